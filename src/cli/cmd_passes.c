/* qfold passes: list the graph passes and the named pipelines. */
#include <stdio.h>

#include "cli.h"
#include "qfold/pass.h"
#include "qfold/quant.h"

static int qf_cli_passes(int argc, char **argv)
{
    qf_cli_args a = qf_cli_args_begin(&qf_cli_cmd_passes, argc, argv);
    while (qf_cli_args_next(&a)) return qf_cli_args_unknown(&a);
    if (a.failed) return QF_EXIT_USAGE;

    /* The quantizer's passes join the list (they run inside `qfold quantize`). */
    qf_status st = qf_quant_register_passes();
    if (st != QF_OK) return qf_cli_fail(st);
    int np, nl;
    const qf_pass *const *ps = qf_pass_list(&np);
    const qf_pipeline *const *pl = qf_pipeline_list(&nl);
    printf("passes:\n");
    for (int i = 0; i < np; i++) printf("  %-24s %s\n", ps[i]->name, ps[i]->summary);
    printf("\npipelines:\n");
    for (int i = 0; i < nl; i++) {
        printf("  %-24s %s\n  %-24s ", pl[i]->name, pl[i]->summary, "");
        for (int k = 0; pl[i]->passes[k]; k++) printf("%s%s", k ? " -> " : "", pl[i]->passes[k]);
        printf("\n");
    }
    return QF_EXIT_OK;
}

const qf_cli_command qf_cli_cmd_passes = {
    .name = "passes",
    .summary = "list the graph passes and pipelines (for `qfold fuse --passes / --pipeline`)",
    .usage = "qfold passes",
    .details = NULL,
    .fn = qf_cli_passes,
};
