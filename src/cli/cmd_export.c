/* qfold export: an int8 QDQ model -> an int8 TFLite flatbuffer (the
 * library's qf_tflite_export, include/qfold/tflite.h), with the deployment
 * report (--report) and a short summary on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "qfold/io.h"
#include "qfold/pass.h"
#include "qfold/target.h"
#include "qfold/tflite.h"

/* `--target T` of a target `check` knows: the placement of the exported
 * graph (the ops of the report and of the summary line). Other names
 * (generic) have no placement: *c stays empty. */
static qf_status qf_cli_export_place(const qf_graph *g, const char *target, qf_check_result *c, bool *placed)
{
    *placed = false;
    if (!target) return QF_OK;
    for (const char *const *t = qf_target_names(); *t; t++) {
        if (strcmp(*t, target) != 0) continue;
        qf_target_spec spec;
        QF_TRY(qf_target_spec_init(&spec, target));
        QF_TRY(qf_target_check(g, &spec, c));
        *placed = true;
    }
    return QF_OK;
}

static int qf_cli_export(int argc, char **argv)
{
    const char *in = NULL, *outp = NULL, *report = NULL, *target = NULL, *v;
    const char *data[QF_CLI_EXPORT_MAX_DATA];
    int ndata = 0;
    int64_t count = 0;
    double *max_lsb = NULL;
    qf_tflite_options o = {0};
    qf_cli_args a = qf_cli_args_begin(&qf_cli_cmd_export, argc, argv);
    while (qf_cli_args_next(&a)) {
        if (qf_cli_args_value(&a, "-o", "--output", &v)) outp = v;
        else if (qf_cli_args_value(&a, "--report", NULL, &v)) report = v;
        else if (qf_cli_args_value(&a, "--target", NULL, &v)) target = v;
        else if (qf_cli_args_flag(&a, "--float-io", NULL)) o.float_io = true;
        else if (qf_cli_args_flag(&a, "--all-outputs", NULL)) o.all_outputs = true; /* debug, not in the help */
        else if (qf_cli_args_value(&a, "--batch", NULL, &v)) {
            char *end;
            long b = strtol(v, &end, 10);
            if (end == v || *end || b < 1 || b > 65536)
                return qf_cli_value_error(a.cmd, "--batch takes a number in [1, 65536], got '%s'", v);
            o.batch = (int)b;
        }
        else if (qf_cli_args_value(&a, "--data", NULL, &v)) {
            if (ndata == QF_CLI_EXPORT_MAX_DATA)
                return qf_cli_usage_error(a.cmd, "at most %d --data files", QF_CLI_EXPORT_MAX_DATA);
            data[ndata++] = v;
        } else if (qf_cli_args_value(&a, "--count", NULL, &v)) {
            char *end;
            long long c = strtoll(v, &end, 10);
            if (end == v || *end || c < 1)
                return qf_cli_value_error(a.cmd, "--count takes a positive number, got '%s'", v);
            count = c;
        } else if (!in && qf_cli_args_positional(&a, &v)) in = v;
        else return qf_cli_args_unknown(&a);
    }
    if (a.failed) return QF_EXIT_USAGE;
    if (!in) return qf_cli_usage_error(&qf_cli_cmd_export, "no input model");
    if (!outp) return qf_cli_usage_error(&qf_cli_cmd_export, "no output file (-o OUT.tflite)");
    if (target && strcmp(target, "neutron") != 0)
        return qf_cli_value_error(a.cmd, "unknown --target '%s' (targets: neutron)", target);
    if ((ndata || count) && !report)
        return qf_cli_usage_error(&qf_cli_cmd_export, "--data / --count fill the report: give --report R.json");
    qf_cli_outputs out;
    qf_cli_outputs_init(&out);
    int rc = qf_cli_outputs_add(&out, "output", outp);
    if (rc == QF_EXIT_OK && report) rc = qf_cli_outputs_add(&out, "report", report);
    if (rc == QF_EXIT_OK) rc = qf_cli_outputs_input(&out, "the input model", in);
    if (rc != QF_EXIT_OK) {
        qf_cli_outputs_free(&out);
        return rc;
    }
    qf_graph *g = NULL;
    qf_tflite_result r = {0};
    qf_check_result cr = {0};
    bool placed = false;
    char *text = NULL;
    size_t len = 0;
    const char *tmp = NULL;
    int wi = -1;
    qf_pass_report *tp = NULL;
    qf_status st = qf_onnx_load(in, &g);
    /* --target neutron: the Neutron-ready QDQ passes first (pipeline neutron_qdq) */
    if (st == QF_OK && target) st = qf_pipeline_run(g, "neutron_qdq", &(qf_pass_options){.verify = true}, &tp);
    if (st == QF_OK) st = qf_tflite_export(g, &o, &r);
    if (st == QF_OK && (st = qf_cli_outputs_stage(&out, wi = 0, &tmp)) == QF_OK)
        st = qf_file_write_atomic(tmp, r.data, r.size);
    if (st == QF_OK) {
        wi = -1;
        st = qf_cli_export_place(g, target, &cr, &placed);
    }
    if (st == QF_OK && report) {
        wi = -1;
        if (ndata) st = qf_cli_export_lsb(g, &r, data, ndata, count, &max_lsb);
        if (st == QF_OK)
            st = placed ? qf_target_report_json(&r, max_lsb, &cr, &text, &len)
                        : qf_tflite_report_json(&r, max_lsb, &text, &len);
        if (st == QF_OK && (st = qf_cli_outputs_stage(&out, wi = 1, &tmp)) == QF_OK)
            st = qf_file_write_atomic(tmp, text, len);
    }
    if (st != QF_OK) rc = wi >= 0 ? qf_cli_fail_write(&out, wi, st) : qf_cli_fail(st);
    else if ((rc = qf_cli_outputs_commit(&out)) == QF_EXIT_OK) {
        qf_tflite_report_print(&r, stderr);
        qf_status pst = placed ? qf_target_report_print(&r, &cr, stderr) : QF_OK;
        if (pst != QF_OK) rc = qf_cli_fail(pst);
        qf_cli_target_passes_print(stderr, tp);
    }
    qf_pass_report_free(tp);
    qf_cli_outputs_free(&out);
    qf_check_result_free(&cr);
    qf_free(text);
    qf_free(max_lsb);
    qf_tflite_result_free(&r);
    qf_graph_free(g);
    return rc;
}

const qf_cli_command qf_cli_cmd_export = {
    .name = "export",
    .summary = "an int8 QDQ model -> an int8 TFLite flatbuffer (NHWC), with a deployment report",
    .usage = "qfold export IN.onnx -o OUT.tflite [--target neutron] [--float-io] [--batch N] [--report R.json "
             "[--data X.npy [--count N]]]",
    .details =
        "IN is an int8 QDQ model: what `qfold quantize`, `qat` or `finalize` write, or one\n"
        "quantized by another tool in the same form (ONNX Runtime's quantize_static, QDQ;\n"
        "its uint8 activations become int8 exactly, uint8 weights only with zero point\n"
        "128). Each DQ -> op -> [Relu] -> Q group becomes one TFLite operator: CONV_2D\n"
        "(weights OHWI, per channel), DEPTHWISE_CONV_2D (1HWO), TRANSPOSE_CONV,\n"
        "FULLY_CONNECTED (per-tensor weights; per-channel ones: a 1x1 CONV_2D between two\n"
        "RESHAPEs), AVERAGE_POOL_2D, MAX_POOL_2D, MEAN, SUM, REDUCE_MAX, ADD, SUB, MUL,\n"
        "MAXIMUM, MINIMUM, CONCATENATION, SPLIT, RESHAPE, TRANSPOSE, PAD, PADV2, SOFTMAX,\n"
        "LOGISTIC, TANH, HARD_SWISH, LEAKY_RELU (alpha in its options; TFLite 2.3 and later,\n"
        "not 2.2), RESIZE_BILINEAR, RESIZE_NEAREST_NEIGHBOR, QUANTIZE; a few as short chains\n"
        "of them (a grouped conv: SPLIT, one CONV_2D per group, CONCATENATION; HardSigmoid:\n"
        "ADD + MUL; PRelu: MAXIMUM, MINIMUM, MUL, ADD; Abs: SUB + MAXIMUM; Exp / Log:\n"
        "DEQUANTIZE, EXP / LOG, QUANTIZE). Conv1d and 1-D pools\n"
        "are their 2-D forms with H = 1 (a rank-3 input or output is [N, L, C]). Relu /\n"
        "Relu6 become fused activations. Tensors are NHWC (transposed\n"
        "once for the whole graph; a TRANSPOSE only where a Reshape / Flatten needs the\n"
        "NCHW order) and keep the ONNX value names; the batch is the model's (a dynamic one\n"
        "as 1) or --batch's. Anything TFLite's int8 ops (or ArmNN's TfLite parser) cannot\n"
        "express is an error naming the node and the reason (exit 2, nothing written).\n"
        "`quantize`, `qat` and `finalize` write the same file directly when their output\n"
        "name ends in .tflite.\n\n"
        "options:\n"
        "  -o, --output FILE   the .tflite file (temporary file + rename; never the input)\n"
        "  --target neutron    first the Neutron-ready QDQ passes (pipeline neutron_qdq: grouped\n"
        "                      convolutions split per group, redundant DQ -> Q pairs folded;\n"
        "                      exact in int8), one line each on stderr; then each op placed\n"
        "                      on the NPU or the CPU as `qfold check` places its node (the\n"
        "                      report's per-op placement, rule, fix and padded MACs, its\n"
        "                      \"placement\" totals; a summary line `NPU: x of y ops, z % of\n"
        "                      MACs`)\n"
        "  --float-io          float32 inputs and outputs (QUANTIZE / DEQUANTIZE at the\n"
        "                      boundaries); without it they are int8 with their qparams\n"
        "  --batch N           every input's first dim N (default: the model's; dynamic: 1)\n"
        "  --report FILE       JSON deployment report: per op the TFLite op, its node, tensor\n"
        "                      shapes (NHWC), MACs, weight bytes; totals: file size, weight\n"
        "                      bytes, peak activation memory (first-fit arena plan in op\n"
        "                      order), MACs per invocation (of the exported batch)\n"
        "  --data FILE         .npy of samples for the next graph input (float32, the batch\n"
        "                      first; one per input): the report's per-op max_lsb, the\n"
        "                      largest difference in LSB between the integer reference (the\n"
        "                      .tflite's arithmetic: TFLite's requantization) and qfold's int8\n"
        "                      run of the QDQ model as written (`qfold run --simulate`)\n"
        "  --count N           measure on the first N samples of --data (default: all)\n",
    .fn = qf_cli_export,
};
