/* qfold finalize IN.onnx -o OUT.onnx [--target neutron|generic] [--report R.json] [--verify] [-v]
 *
 * A QAT model exported from PyTorch 1.13 (prepare_qat_fx with FakeQuantize
 * modules, observers disabled, eval(), torch.onnx.export at opset 13), or by
 * `qfold qat --keep-qat`, becomes the folded int8 QDQ model `qfold quantize`
 * writes: the pipeline finalize (qat_fold_exported -> dce).
 * The weights keep the range the model was trained with (torch's exporter
 * takes [-128, 127] only; a --keep-qat file records its range in
 * metadata_props "qfold.weight_range"); where that differs from the target profile's the
 * summary and the report say so, weight by weight. */
#include <stdio.h>
#include <string.h>

#include "core/clock.h"
#include "cli.h"
#include "core/strbuf.h"
#include "qfold/exec.h"
#include "qfold/io.h"
#include "qfold/pass.h"
#include "qfold/quant.h"

#define QF_FIN_NOTES 10

typedef struct qf_fin_args {
    const char *in, *out, *report, *target;
    bool verify, verbose;
} qf_fin_args;

static int qf_fin_parse(int argc, char **argv, qf_fin_args *fa)
{
    const char *v = NULL;
    *fa = (qf_fin_args){0};
    qf_cli_args a = qf_cli_args_begin(&qf_cli_cmd_finalize, argc, argv);
    while (qf_cli_args_next(&a)) {
        if (qf_cli_args_value(&a, "-o", "--output", &v)) fa->out = v;
        else if (qf_cli_args_value(&a, "--report", NULL, &v)) fa->report = v;
        else if (qf_cli_args_value(&a, "--target", NULL, &v)) fa->target = v;
        else if (qf_cli_args_flag(&a, "--verify", NULL)) fa->verify = true;
        else if (qf_cli_args_flag(&a, "-v", "--verbose")) fa->verbose = true;
        else if (!fa->in && qf_cli_args_positional(&a, &v)) fa->in = v;
        else return qf_cli_args_unknown(&a);
    }
    if (a.failed) return QF_EXIT_USAGE;
    if (!fa->in) return qf_cli_usage_error(a.cmd, "no input model given");
    if (!fa->out) return qf_cli_usage_error(a.cmd, "no output given (-o OUT.onnx)");
    if (fa->verify && qf_cli_is_tflite(fa->out))
        return qf_cli_usage_error(a.cmd, "--verify loads an ONNX output back: not with a .tflite output");
    return QF_EXIT_OK;
}

/* The target's format for weight w. */
static const qf_qformat *qf_fin_format(const qf_quant_profile *p, const qf_quant_finalize_weight *w)
{
    return w->linear ? &p->linear_weight : &p->conv_weight;
}

static bool qf_fin_differs(const qf_quant_profile *p, const qf_quant_finalize_weight *w)
{
    const qf_qformat *f = qf_fin_format(p, w);
    return f->qmin != w->qmin || f->qmax != w->qmax || f->per_channel != (w->nch > 1);
}

static const char *qf_fin_gran(bool per_channel) { return per_channel ? "per channel" : "per tensor"; }

static int qf_fin_count_op(const qf_graph *g, qf_op op)
{
    int k = 0;
    qf_graph_for_each_node(g, n) k += n->op == op;
    return k;
}

/* The notes on stderr: each weight whose range or granularity is not the target's. */
static void qf_fin_notes(const qf_quant_profile *p, const qf_quant_finalize_session *fs)
{
    int k = 0;
    for (int i = 0; i < fs->nweights; i++) {
        const qf_quant_finalize_weight *w = &fs->weights[i];
        if (!qf_fin_differs(p, w)) continue;
        if (k++ == QF_FIN_NOTES) continue;
        const qf_qformat *f = qf_fin_format(p, w);
        fprintf(stderr, "qfold: note: weight '%s' of '%s' is int8 [%d, %d] %s as trained; target %s wants [%d, %d] "
                        "%s (kept the model's)\n",
                w->name, w->node, (int)w->qmin, (int)w->qmax, qf_fin_gran(w->nch > 1), p->name, (int)f->qmin,
                (int)f->qmax, qf_fin_gran(f->per_channel));
    }
    if (k > QF_FIN_NOTES) fprintf(stderr, "qfold: note: ... %d more weights differ from the target (see --report)\n", k - QF_FIN_NOTES);
}

static void qf_fin_summary(const qf_fin_args *fa, const qf_quant_profile *p, const qf_graph *g,
                           const qf_quant_finalize_session *fs, const qf_pass_report *r, double ms)
{
    int ch = 0, kept = 0, scaled = 0, req = 0, differ = 0;
    for (int i = 0; i < fs->nweights; i++) {
        ch += fs->weights[i].folded;
        kept += fs->weights[i].grid_kept;
        scaled += fs->weights[i].grid_scaled;
        req += fs->weights[i].requantized;
        differ += qf_fin_differs(p, &fs->weights[i]);
    }
    printf("qfold finalize: %s -> %s (target %s)\n", fa->in, fa->out, p->name);
    printf("  folded      %d BatchNorm%s through the weight fake-quant: of %d channels %d keep the trained grid, "
           "%d its int8 values at a scaled scale, %d a new grid\n",
           fs->folded, fs->folded == 1 ? "" : "s", ch, kept, scaled, req);
    printf("  int8        %d weights, %d int32 biases, %d activation pairs moved from uint8 to int8\n", fs->nweights,
           fs->biases, fs->activations);
    if (fs->shared)
        printf("  shared      %d float output%s between int8 ops (a Pad before an AveragePool, ...) given their "
               "input's qparams\n",
               fs->shared, fs->shared == 1 ? "" : "s");
    if (fs->float_biases) printf("  left float  %d biases (their op's input is not dequantized)\n", fs->float_biases);
    printf("  target      %d of %d weights differ from %s's range or granularity (kept as trained)\n", differ,
           fs->nweights, p->name);
    qf_cli_target_passes_print(stdout, r);
    /* A BatchNorm left in the model: why (the skips of the fold). */
    qf_graph_for_each_node(g, n) {
        if (n->op != QF_OP_BATCH_NORM) continue;
        const char *why = "no pass recorded a reason";
        for (int i = 0; i < r->nresults; i++)
            for (int k = 0; k < r->results[i].nskipped; k++)
                if (strcmp(r->results[i].skipped[k].node, n->name) == 0) why = r->results[i].skipped[k].reason;
        printf("  kept float  BatchNormalization '%s': %s\n", n->name, why);
    }
    printf("  time: %.1f ms\n", ms);
}

static void qf_fin_json(const qf_fin_args *fa, const qf_quant_profile *p, const qf_graph *g,
                        const qf_quant_finalize_session *fs, const qf_compare_result *cmp, qf_strbuf *b)
{
    qf_strbuf_puts(b, "\"input\": ");
    qf_strbuf_json_string(b, fa->in);
    qf_strbuf_puts(b, ",\n  \"output\": ");
    qf_strbuf_json_string(b, fa->out);
    qf_strbuf_puts(b, ",\n  \"target\": ");
    qf_strbuf_json_string(b, p->name);
    qf_strbuf_printf(b, ",\n  \"counts\": {\"batch_norm_folded\": %d, \"batch_norm_kept\": %d, \"weights\": %d, "
                        "\"biases\": %d, \"float_biases\": %d, \"activation_pairs_to_int8\": %d, "
                        "\"outputs_given_input_qparams\": %d},\n  \"weights\": [",
                     fs->folded, qf_fin_count_op(g, QF_OP_BATCH_NORM), fs->nweights, fs->biases, fs->float_biases,
                     fs->activations, fs->shared);
    for (int i = 0; i < fs->nweights; i++) {
        const qf_quant_finalize_weight *w = &fs->weights[i];
        const qf_qformat *f = qf_fin_format(p, w);
        qf_strbuf_puts(b, i ? ",\n    {\"name\": " : "\n    {\"name\": ");
        qf_strbuf_json_string(b, w->name);
        qf_strbuf_puts(b, ", \"node\": ");
        qf_strbuf_json_string(b, w->node);
        qf_strbuf_printf(b, ", \"kind\": \"%s\", \"per_channel\": %s, \"range\": [%d, %d], \"folded_channels\": %d, "
                            "\"grid_kept_channels\": %d, \"grid_scaled_channels\": %d, \"requantized_channels\": %d, \"target\": {\"per_channel\": %s, \"range\": [%d, %d]}, "
                            "\"differs_from_target\": %s}",
                         w->linear ? "linear" : "conv", w->nch > 1 ? "true" : "false", (int)w->qmin, (int)w->qmax,
                         w->folded, w->grid_kept, w->grid_scaled, w->requantized, f->per_channel ? "true" : "false", (int)f->qmin, (int)f->qmax,
                         qf_fin_differs(p, w) ? "true" : "false");
    }
    qf_strbuf_puts(b, "],\n  \"verify\": ");
    if (!fa->verify) {
        qf_strbuf_puts(b, "null");
        return;
    }
    qf_strbuf_puts(b, "{\"outputs\": [");
    for (int i = 0; i < cmp->noutputs; i++) {
        qf_strbuf_printf(b, "%s{\"name\": ", i ? ", " : "");
        qf_strbuf_json_string(b, cmp->outputs[i].name);
        qf_strbuf_printf(b, ", \"max_abs\": %.9g, \"ok\": %s}", cmp->outputs[i].max_abs,
                         cmp->outputs[i].ok ? "true" : "false");
    }
    qf_strbuf_puts(b, "]}");
}

/* --verify: the file just written computes what the finalized graph in
 * memory computes (generated inputs: both sides are the same graph, so any
 * difference is the export's). */
static qf_status qf_fin_verify(qf_graph *g, const char *tmp, qf_compare_result *res)
{
    qf_graph *written = NULL;
    QF_TRY(qf_cli_load_staged(tmp, &written));
    qf_verify_options opt = {.tolerance = 1e-6, .ref_name = "finalized", .cand_name = "written", .change = "writing"};
    qf_status st = qf_verify_graphs(g, written, NULL, &opt, res);
    qf_graph_free(written);
    if (st == QF_OK && !res->ok)
        st = qf_error(QF_ERR_MISMATCH, "the written model computes other outputs than the finalized graph: nothing "
                                       "written");
    return st;
}

/* The range the weights were trained with, when the model records it
 * (qfold qat --keep-qat: metadata_props "qfold.weight_range" = "QMIN,QMAX");
 * without the record, int8's [-128, 127] as the Q/DQ pairs say. */
static qf_status qf_fin_weight_range(const char *path, const qf_graph *g, qf_quant_finalize_session *fs)
{
    char v[64];
    bool found = false;
    qf_status st = qf_onnx_metadata(g, QF_QUANT_WEIGHT_RANGE_KEY, v, sizeof v, &found);
    if (st != QF_OK) return qf_error_prefix(st, "%s: ", path);
    if (!found) return QF_OK;
    int lo = 0, hi = 0, end = 0;
    if (sscanf(v, "%d,%d%n", &lo, &hi, &end) != 2 || v[end] || lo < -128 || hi > 127 || lo > 0 || hi <= 0)
        return qf_error(QF_ERR_INVALID,
                        "%s: metadata_props '%s' is '%s': expected \"QMIN,QMAX\" within int8's [-128, 127], "
                        "QMIN <= 0 < QMAX",
                        path, QF_QUANT_WEIGHT_RANGE_KEY, v);
    fs->weight_range = true;
    fs->weight_qmin = lo;
    fs->weight_qmax = hi;
    return QF_OK;
}

static int qf_cli_finalize(int argc, char **argv)
{
    qf_fin_args fa;
    int rc = qf_fin_parse(argc, argv, &fa);
    if (rc != QF_EXIT_OK) return rc;
    const char *tname = fa.target ? fa.target : "neutron";
    const qf_quant_profile *p = qf_quant_profile_find(tname);
    if (!p) {
        const char *const *names = qf_quant_profile_names();
        return qf_cli_error(QF_EXIT_USAGE, "unknown --target '%s' (targets: %s, %s)", tname, names[0], names[1]);
    }
    qf_cli_outputs out;
    qf_cli_outputs_init(&out);
    rc = qf_cli_outputs_add(&out, "output", fa.out);
    if (rc == QF_EXIT_OK && fa.report) rc = qf_cli_outputs_add(&out, "report", fa.report);
    if (rc == QF_EXIT_OK) rc = qf_cli_outputs_input(&out, "the input model", fa.in);
    if (rc != QF_EXIT_OK) {
        qf_cli_outputs_free(&out);
        return rc;
    }
    double t0 = (qf_clock_seconds() * 1e3);
    qf_graph *g = NULL;
    qf_pass_report *r = NULL;
    qf_quant_finalize_session fs = {0};
    qf_compare_result cmp = {0};
    qf_strbuf extra = {0};
    char *text = NULL;
    size_t len = 0;
    const char *tmp = NULL;
    int wi = -1; /* the output being written */
    qf_status st = qf_onnx_load(fa.in, &g);
    if (st == QF_OK && !qf_graph_is_quantized(g))
        st = qf_error(QF_ERR_INVALID, "'%s' has no QuantizeLinear / DequantizeLinear: not a QAT model (a float model "
                                      "goes through `qfold quantize` or `qfold qat`)",
                      fa.in);
    if (st == QF_OK) st = qf_fin_weight_range(fa.in, g, &fs);
    if (st == QF_OK) st = qf_quant_register_passes();
    qf_pass_options opt = {.verify = true, .user = &fs};
    if (st == QF_OK) st = qf_pipeline_run(g, p->neutron_passes ? "finalize_neutron" : "finalize", &opt, &r);
    if (st == QF_OK) st = qf_graph_verify_shapes(g);
    if (st == QF_OK && fa.verbose) qf_pass_report_print(r, stdout);
    /* Both files or neither: staged, then renamed together. */
    if (st == QF_OK) st = qf_cli_outputs_save_model(&out, wi = 0, g, &tmp);
    if (st == QF_OK && fa.verify) {
        wi = -1; /* a mismatch is not a write error */
        st = qf_fin_verify(g, tmp, &cmp);
        for (int i = 0; i < cmp.noutputs; i++)
            printf("verify: output '%s': max abs diff %.3g (written file vs finalized graph) %s\n",
                   cmp.outputs[i].name, cmp.outputs[i].max_abs, cmp.outputs[i].ok ? "ok" : "FAILED");
    }
    if (st == QF_OK && fa.report) {
        wi = -1;
        qf_fin_json(&fa, p, g, &fs, &cmp, &extra);
        st = extra.oom ? QF_ERR_NOMEM : qf_pass_report_json(r, extra.p, &text, &len);
        if (st == QF_OK && (st = qf_cli_outputs_stage(&out, wi = 1, &tmp)) == QF_OK)
            st = qf_file_write_atomic(tmp, text, len);
    }
    if (st != QF_OK) {
        rc = wi >= 0 ? qf_cli_fail_write(&out, wi, st) : qf_cli_fail(st);
    } else if ((rc = qf_cli_outputs_commit(&out)) == QF_EXIT_OK) {
        qf_fin_summary(&fa, p, g, &fs, r, (qf_clock_seconds() * 1e3) - t0);
        qf_fin_notes(p, &fs);
    }
    qf_cli_outputs_free(&out);
    qf_compare_result_free(&cmp);
    qf_free(text);
    qf_strbuf_free(&extra);
    qf_quant_finalize_session_free(&fs);
    qf_pass_report_free(r);
    qf_graph_free(g);
    return rc;
}

const qf_cli_command qf_cli_cmd_finalize = {
    .name = "finalize",
    .summary = "a model trained with fake-quant in PyTorch (ONNX export): fold BatchNorm through it, write int8 QDQ",
    .usage = "qfold finalize IN.onnx -o OUT.onnx [--target neutron|generic] [--report R.json] [--verify] [-v]",
    .details =
        "IN is a quantization-aware-trained model as PyTorch 1.13 exports it (prepare_qat_fx\n"
        "with FakeQuantize modules, observers disabled, eval(), torch.onnx.export at opset\n"
        "13) or as `qfold qat --keep-qat` writes it: QuantizeLinear -> DequantizeLinear on\n"
        "activations and weights, ConvBn / LinearBn as op -> Div(s) -> [Add(b)] ->\n"
        "BatchNormalization. Runs the pipeline finalize (qat_fold_exported, dce): the\n"
        "Div / Add / BatchNorm chain is folded into the op through the weight's fake-quant\n"
        "(channels whose folded factor is exactly 1, as in every PyTorch export, keep the\n"
        "trained int8 grid; per-channel weights keep their int8 values at a scaled scale\n"
        "otherwise, per-tensor ones get a new symmetric grid), every weight becomes an int8\n"
        "initializer -> DequantizeLinear (per channel with its axis), every conv / Gemm bias\n"
        "an int32 at s_in * s_w, uint8 activation pairs int8 ones (the same grid); one-element\n"
        "scales and zero points become scalars, a Pad (or MaxPool, reshape) PyTorch left\n"
        "without Q / DQ before an int8 op (AvgPool2d(padding): Pad -> AveragePool) gets a\n"
        "Q -> DQ with its input's qparams, and a repeated Q -> DQ of one grid goes. The output\n"
        "has the form `qfold quantize` writes. Weights keep the range they were trained with (torch's\n"
        "exporter only takes [-128, 127]; a --keep-qat file records its range in metadata_props\n"
        "\"qfold.weight_range\"); each weight whose range or granularity differs\n"
        "from the target's is named on stderr and in the report. A fake-quant pattern qfold\n"
        "does not know (a non-constant scale, a Div by a non-constant, a BatchNorm in training\n"
        "mode, var + eps <= 0, NaN weights) is an error naming the node (exit 2, nothing\n"
        "written).\n\n"
        "options:\n"
        "  -o, --output FILE   the int8 QDQ model (temporary file + rename; never the input); a\n"
        "                      name ending in .tflite: the int8 TFLite model (as `qfold export`)\n"
        "  --target NAME       the profile the weight ranges are compared with: neutron\n"
        "                      (default: [-127, 127], linear weights per tensor) or generic\n"
        "  --report FILE       JSON: the passes (every fold and skip with its reason), counts,\n"
        "                      per weight its range, granularity and the target's, --verify\n"
        "  --verify            load the written model back and check that it computes what the\n"
        "                      finalized graph computes (generated inputs); nothing is written\n"
        "                      when it does not\n"
        "  -v, --verbose       print the full pass report\n",
    .fn = qf_cli_finalize,
};
