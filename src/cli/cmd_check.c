/* qfold check: what of a model runs on a deployment target's NPU, and why
 * not (the library's qf_target_check, include/qfold/target.h), as a table
 * on stdout, a JSON report (--json) and a coloured graph (--dot). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "qfold/io.h"
#include "qfold/target.h"

#define QF_CHECK_MAX_SETS 16

static int qf_cli_check(int argc, char **argv)
{
    const char *in = NULL, *target = "neutron", *json = NULL, *dot = NULL, *v;
    const char *sets[QF_CHECK_MAX_SETS];
    int nsets = 0;
    bool strict = false;
    qf_cli_args a = qf_cli_args_begin(&qf_cli_cmd_check, argc, argv);
    while (qf_cli_args_next(&a)) {
        if (qf_cli_args_value(&a, "--target", NULL, &v))
            target = v;
        else if (qf_cli_args_value(&a, "--set", NULL, &v)) {
            if (nsets == QF_CHECK_MAX_SETS)
                return qf_cli_usage_error(a.cmd, "at most %d --set", QF_CHECK_MAX_SETS);
            sets[nsets++] = v;
        } else if (qf_cli_args_value(&a, "--json", NULL, &v))
            json = v;
        else if (qf_cli_args_value(&a, "--dot", NULL, &v))
            dot = v;
        else if (qf_cli_args_flag(&a, "--strict", NULL))
            strict = true;
        else if (!in && qf_cli_args_positional(&a, &v))
            in = v;
        else
            return qf_cli_args_unknown(&a);
    }
    if (a.failed) return QF_EXIT_USAGE;
    if (!in) return qf_cli_usage_error(&qf_cli_cmd_check, "no input model");
    qf_target_spec t;
    if (qf_target_spec_init(&t, target) != QF_OK) return qf_cli_fail(QF_ERR_INVALID);
    for (int i = 0; i < nsets; i++)
        if (qf_target_spec_set(&t, sets[i]) != QF_OK) return qf_cli_fail(QF_ERR_INVALID);
    qf_cli_outputs out;
    qf_cli_outputs_init(&out);
    /* the outputs' indices in `out`: -1 when not asked for */
    int rc = QF_EXIT_OK, ji = json ? 0 : -1, di = dot ? (json ? 1 : 0) : -1;
    if (json) rc = qf_cli_outputs_add(&out, "JSON report", json);
    if (rc == QF_EXIT_OK && dot) rc = qf_cli_outputs_add(&out, "DOT graph", dot);
    if (rc == QF_EXIT_OK) rc = qf_cli_outputs_input(&out, "the input model", in);
    if (rc != QF_EXIT_OK) {
        qf_cli_outputs_free(&out);
        return rc;
    }
    qf_graph *g = NULL;
    qf_check_result r = {0};
    char *text = NULL;
    size_t len = 0;
    const char *tmp = NULL;
    int wi = -1;
    qf_status st = qf_onnx_load(in, &g);
    if (st == QF_OK) st = qf_target_check(g, &t, &r);
    if (st == QF_OK && ji >= 0 && (st = qf_check_report_json(&r, &text, &len)) == QF_OK &&
        (st = qf_cli_outputs_stage(&out, wi = ji, &tmp)) == QF_OK)
        st = qf_file_write_atomic(tmp, text, len);
    qf_free(text);
    text = NULL;
    if (st == QF_OK && di >= 0) {
        wi = -1;
        if ((st = qf_check_report_dot(&r, g, &text, &len)) == QF_OK &&
            (st = qf_cli_outputs_stage(&out, wi = di, &tmp)) == QF_OK)
            st = qf_file_write_atomic(tmp, text, len);
    }
    if (st != QF_OK)
        rc = wi >= 0 ? qf_cli_fail_write(&out, wi, st) : qf_cli_fail(st);
    else if ((rc = qf_cli_outputs_commit(&out)) == QF_EXIT_OK) {
        qf_check_print(&r, stdout);
        if (strict && r.cpu_nodes > 0) rc = QF_EXIT_FAIL;
    }
    qf_cli_outputs_free(&out);
    qf_free(text);
    qf_check_result_free(&r);
    qf_graph_free(g);
    return rc;
}

const qf_cli_command qf_cli_cmd_check = {
    .name = "check",
    .summary =
        "what of a model runs on the Neutron NPU and what on the CPU, with the rule and a fix",
    .usage = "qfold check MODEL.onnx [--target neutron] [--set KEY=VALUE]... [--json R.json] "
             "[--dot G.dot] "
             "[--strict]",
    .details =
        "For every node of MODEL: npu or cpu, and for cpu the delegation rule that failed\n"
        "(in words, with the numbers) and a concrete fix where one exists, as ExecuTorch's\n"
        "NXP backend decides (its node converters and partitioner). MODEL is an int8 QDQ\n"
        "model (checked as it is) or a float model (checked as `qfold quantize --target\n"
        "neutron` quantizes it, on synthetic calibration data: the placement does not depend\n"
        "on the data; every node reported under its own name, a folded BatchNorm with the\n"
        "conv it went into). Prints the nodes grouped by NPU partition, the CPU nodes with\n"
        "their rule and fix, and the summary \"NPU: x of y ops, z % of MACs, ...\".\n"
        "Quantize / dequantize nodes run with the op they belong to and are not counted; those\n"
        "of float model inputs and outputs run on the CPU.\n"
        "\n"
        "  --target NAME       the target (default and only one: neutron)\n"
        "  --set KEY=VALUE     a target parameter (repeatable):\n"
        "                        neutron-flow=sdk3|sdk2  the eIQ Neutron SDK 3.x rules (default)\n"
        "                                                or the older SDK 2.x ones\n"
        "                        num-macs=N              MACs per pipe (default 8, i.MX RT700)\n"
        "                        num-pipes=N             pipes (default 8)\n"
        "                        neutron-passes=on|off   a float model: quantized with or\n"
        "                                                without qfold's Neutron passes\n"
        "                                                (quantize's rule; default on)\n"
        "  --json FILE         JSON report: target, nodes (name, op, placement, rule, fix,\n"
        "                      note, partition, macs), partitions, summary\n"
        "  --dot FILE          Graphviz graph of MODEL coloured by placement (the rule as\n"
        "                      the tooltip)\n"
        "  --strict            exit 1 when any node runs on the CPU (for CI)\n",
    .fn = qf_cli_check,
};
