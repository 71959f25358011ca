/* The summary lines of a target's graph passes (the Neutron-ready ones:
 * pipelines neutron and neutron_qdq) in a pass report, for quantize, qat,
 * finalize and export --target neutron: per pass that ran, its rewrites and
 * skips, and the first reasons it skipped. Which passes: the pipelines'
 * lists, so a pass added there is printed without a change here. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "qfold/pass.h"

/* At most this many skip reasons per pass in the summary (all in --report). */
#define QF_TP_REASONS 3

static bool qf_tp_is_target_pass(const char *name)
{
    static const char *const pipelines[] = {"neutron", "neutron_qdq"};
    if (strcmp(name, "dce") == 0) return false;
    for (size_t k = 0; k < sizeof pipelines / sizeof pipelines[0]; k++) {
        const qf_pipeline *p = qf_pipeline_find(pipelines[k]);
        for (int i = 0; p && p->passes[i]; i++)
            if (strcmp(p->passes[i], name) == 0) return true;
    }
    return false;
}

void qf_cli_target_passes_print(FILE *f, const qf_pass_report *r)
{
    for (int i = 0; r && i < r->nresults; i++) {
        const qf_pass_result *res = &r->results[i];
        if (!qf_tp_is_target_pass(res->pass)) continue;
        fprintf(f, "  neutron     %s: %d rewrite%s, %d skip%s\n", res->pass, res->rewrites,
                res->rewrites == 1 ? "" : "s", res->nskipped, res->nskipped == 1 ? "" : "s");
        for (int k = 0; k < res->nskipped && k < QF_TP_REASONS; k++)
            fprintf(f, "    kept %s '%s': %s\n", res->skipped[k].op, res->skipped[k].node,
                    res->skipped[k].reason);
        if (res->nskipped > QF_TP_REASONS)
            fprintf(f, "    ... %d more in the report\n", res->nskipped - QF_TP_REASONS);
    }
}
