/* Post-training quantization end to end: annotate, calibrate, convert; and
 * the per-layer SQNR of the result against the float model. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/clock.h"
#include "core/parallel.h"
#include "qfold/quant.h"
#include "qfold/schema.h"

/* --- calibration run ------------------------------------------------------------- */

typedef struct qz_calib_run {
    const qf_graph *g;
    qf_quant_calib *c;
    const qf_data_source *data;   /* the caller's source */
    const void *rows[QF_QUANT_MAX_INPUTS]; /* the current batch's rows, as it returned them */
    int64_t total, done;
    int64_t most; /* the largest run's samples */
    const qf_quantize_options *opt;
    const char *pass;             /* the progress line's label (NULL: the only calibration) */
} qz_calib_run;

/* The plain plan's hook: every node's outputs, as the node wrote them. */
static qf_status qz_hook(void *ud, const qf_node *n, const qf_tensor *const *outs, int nout)
{
    qz_calib_run *r = ud;
    for (int i = 0; i < nout; i++) QF_TRY(qf_quant_calib_observe(r->c, n->outputs[i]->id, outs[i]));
    return QF_OK;
}

/* The planned path: the plan keeps the values the observers want out of
 * fused chains and hands each over after the step that writes it, possibly
 * channels-last, which per-tensor observers do not mind (min / max are
 * exact in any order, histogram counts are integers). */
static bool qz_wants(void *ud, const qf_value *v)
{
    const qz_calib_run *r = ud;
    return qf_quant_calib_wants(r->c, v->id);
}

static qf_status qz_observe(void *ud, const qf_value *v, const qf_tensor *t, bool nhwc)
{
    (void)nhwc;
    qz_calib_run *r = ud;
    return qf_quant_calib_observe(r->c, v->id, t);
}

/* The caller's source, its rows kept for qz_batch. */
static qf_status qz_calib_read(const qf_data_source *src, int64_t first, int64_t count, const void **rows)
{
    qz_calib_run *r = src->ud;
    QF_TRY(r->data->read(r->data, first, count, r->rows));
    for (int i = 0; i < src->ninputs; i++) rows[i] = r->rows[i];
    return QF_OK;
}

/* Graph inputs have no producer: observed from the batch's rows of the data. */
static qf_status qz_batch(void *ud, int64_t first, int64_t count, const qf_plan *plan)
{
    (void)plan;
    (void)first;
    qz_calib_run *r = ud;
    for (int i = 0; i < r->g->ninputs; i++) {
        const qf_value *v = r->g->inputs[i];
        if (!qf_quant_calib_wants(r->c, v->id)) continue;
        const qf_tensor *d = r->data->inputs[i];
        int64_t dims[QF_MAX_DIMS];
        memcpy(dims, d->dims, sizeof dims);
        dims[0] = count;
        qf_tensor view;
        qf_tensor_view(&view, d->dtype, d->ndim, dims, (void *)r->rows[i]);
        QF_TRY(qf_quant_calib_observe(r->c, v->id, &view));
    }
    r->done += count;
    if (count > r->most) r->most = count;
    if (r->opt->progress) r->opt->progress(r->opt->progress_ud, r->pass, r->done, r->total);
    return QF_OK;
}

/* Descriptions of the source's inputs with n samples. */
static void qz_first_samples(const qf_data_source *src, int64_t n, qf_tensor *views, const qf_tensor **ptrs)
{
    for (int i = 0; i < src->ninputs; i++) {
        const qf_tensor *d = src->inputs[i];
        int64_t dims[QF_MAX_DIMS];
        memcpy(dims, d->dims, sizeof dims);
        if (d->ndim >= 1 && dims[0] > n) dims[0] = n;
        qf_tensor_view(&views[i], d->dtype, d->ndim, dims, d->data);
        ptrs[i] = &views[i];
    }
}

void qf_quantize_result_free(qf_quantize_result *r)
{
    for (int i = 0; i < r->ntensors; i++) {
        qf_free(r->tensors[i].name);
        qf_free(r->tensors[i].scale);
        qf_free(r->tensors[i].shares);
        qf_free(r->tensors[i].node);
    }
    qf_free(r->tensors);
    for (int i = 0; i < r->nleft_float; i++) {
        qf_free(r->left_float[i].name);
        qf_free(r->left_float[i].op);
        qf_free(r->left_float[i].reason);
    }
    qf_free(r->left_float);
    qf_free(r->batch_note);
    qf_graph_free(r->bc_float);
    qf_quant_bn_stats_free(r->bc_bn);
    qf_quant_adaround_free(r->adaround, r->nadaround);
    qf_graph_free(r->float_ref);
    qf_pass_report_free(r->prepare);
    qf_pass_report_free(r->convert);
    memset(r, 0, sizeof *r);
}

static qf_status qz_left_float(const qf_quant_annotation *a, qf_quantize_result *out)
{
    if (!a->nskips) return QF_OK;
    out->left_float = qf_calloc((size_t)a->nskips, sizeof *out->left_float);
    if (!out->left_float) return QF_ERR_NOMEM;
    for (int i = 0; i < a->nskips; i++) {
        qf_quant_float_node *f = &out->left_float[i];
        const qf_node *n = a->skips[i].node;
        f->name = qf_strdup(n->name);
        f->op = qf_strdup(qf_op_label(n));
        f->reason = qf_strdup(a->skips[i].reason);
        out->nleft_float = i + 1;
        if (!f->name || !f->op || !f->reason) return QF_ERR_NOMEM;
    }
    return QF_OK;
}

extern const qf_pass qf_pass_quant_equalize;
extern const qf_pass qf_pass_quant_annotate;
extern const qf_pass qf_pass_quant_convert;
extern const qf_pass qf_pass_quant_lower_int8;
extern const qf_pass qf_pass_qat_convert;
extern const qf_pass qf_pass_qat_export;
extern const qf_pass qf_pass_quant_qat_insert;

/* fuse_hard_swish: torch's opset-13 x * HardSigmoid(x) quantized as one
 * HardSwish (one int8 table, one TFLite HARD_SWISH); here, not in ptq, so
 * that `qfold fuse` keeps the file's own form and opset. */
static const char *const qz_prepare_passes[] = {"fuse_hard_swish", "equalize", "quant_annotate", NULL};
static const char *const qz_convert_passes[] = {"quant_convert", "dce", NULL};
static const qf_pipeline qz_prepare = {
    .name = "quantize_prepare",
    .summary = "quantizer, before calibration: HardSigmoid + Mul as HardSwish, cross-layer equalization (profile rule), annotate the graph for the target",
    .passes = qz_prepare_passes,
};
static const qf_pipeline qz_convert = {
    .name = "quantize_convert",
    .summary = "quantizer, after calibration: convert to ONNX QDQ, dce",
    .passes = qz_convert_passes,
};
/* Before QAT: fake_quants for the session's profile, then BatchNorm
 * simulated as folded into the conv / linear before it. */
static const char *const qz_qat_prepare_passes[] = {"canonicalize", "fuse_hard_swish", "equalize", "quant_qat_insert",
                                                    "qat_bn_add", NULL};
static const qf_pipeline qz_qat_prepare = {
    .name = "qat_prepare",
    .summary = "QAT: canonicalize, x * HardSigmoid(x) as HardSwish, cross-layer equalization (profile rule), "
               "fake_quants for the target, simulate "
               "BatchNorm folded into the conv / linear before it",
    .passes = qz_qat_prepare_passes,
};
/* The same with the exact simulated fusion (--qat-bn exact: PyTorch's
 * two-pass _forward_slow, for channels with gamma = 0 or a tiny variance). */
static const char *const qz_qat_prepare_exact_passes[] = {"canonicalize", "fuse_hard_swish", "equalize",
                                                          "quant_qat_insert", "qat_bn_add_exact", NULL};
static const qf_pipeline qz_qat_prepare_exact = {
    .name = "qat_prepare_exact",
    .summary = "QAT: as qat_prepare, with the exact two-pass simulated BatchNorm fusion (qat_bn_add_exact)",
    .passes = qz_qat_prepare_exact_passes,
};
/* After QAT: the simulation removed, BatchNorm folded for real through the
 * weight fake_quants (fuse_batch_norm), the fake_quants to QDQ. */
static const char *const qz_qat_finalize_passes[] = {"qat_bn_remove", "fuse_batch_norm", "dce", "qat_convert", "dce",
                                                     NULL};
static const qf_pipeline qz_qat_finalize = {
    .name = "qat_finalize",
    .summary = "after QAT: remove the simulation, fold BatchNorm through the weight fake_quants, to QDQ, dce",
    .passes = qz_qat_finalize_passes,
};

/* The same pipelines for a profile with neutron_passes (the neutron one):
 * the Neutron-ready float passes (built-in pipeline `neutron`) after
 * canonicalize / before annotation, the QDQ ones (`neutron_qdq`) after the
 * conversion to QDQ. */
static const char *const qz_prepare_neutron_passes[] = {"div_to_mul", "fuse_linear_add", "move_act_before_concat",
                                                        "fuse_hard_swish", "equalize", "quant_annotate", NULL};
static const qf_pipeline qz_prepare_neutron = {
    .name = "quantize_prepare_neutron",
    .summary = "quantize_prepare after the Neutron-ready float passes (pipeline neutron)",
    .passes = qz_prepare_neutron_passes,
};
/* The float passes of the two prepare pipelines above (all but
 * quant_annotate), in their order: qf_quant_float_as_prepared. */
static const char *const qz_float_passes[] = {"fuse_hard_swish", "equalize", NULL};
static const char *const qz_float_neutron_passes[] = {"div_to_mul", "fuse_linear_add", "move_act_before_concat",
                                                      "fuse_hard_swish", "equalize", NULL};
static const char *const qz_convert_neutron_passes[] = {"quant_convert", "dce", "split_group_conv_qdq", "fold_dq_q",
                                                        "dce", NULL};
static const qf_pipeline qz_convert_neutron = {
    .name = "quantize_convert_neutron",
    .summary = "quantize_convert, then the Neutron-ready QDQ passes (pipeline neutron_qdq)",
    .passes = qz_convert_neutron_passes,
};
static const char *const qz_qat_prepare_neutron_passes[] = {
    "canonicalize", "div_to_mul",       "fuse_linear_add", "move_act_before_concat", "fuse_hard_swish",
    "equalize",     "quant_qat_insert", "qat_bn_add",      NULL};
static const qf_pipeline qz_qat_prepare_neutron = {
    .name = "qat_prepare_neutron",
    .summary = "qat_prepare with the Neutron-ready float passes after canonicalize",
    .passes = qz_qat_prepare_neutron_passes,
};
static const char *const qz_qat_prepare_exact_neutron_passes[] = {
    "canonicalize", "div_to_mul",       "fuse_linear_add",  "move_act_before_concat", "fuse_hard_swish",
    "equalize",     "quant_qat_insert", "qat_bn_add_exact", NULL};
static const qf_pipeline qz_qat_prepare_exact_neutron = {
    .name = "qat_prepare_exact_neutron",
    .summary = "qat_prepare_exact with the Neutron-ready float passes after canonicalize",
    .passes = qz_qat_prepare_exact_neutron_passes,
};
static const char *const qz_qat_finalize_neutron_passes[] = {
    "qat_bn_remove", "fuse_batch_norm", "dce", "qat_convert", "dce", "split_group_conv_qdq", "fold_dq_q", "dce", NULL};
static const qf_pipeline qz_qat_finalize_neutron = {
    .name = "qat_finalize_neutron",
    .summary = "qat_finalize, then the Neutron-ready QDQ passes (pipeline neutron_qdq)",
    .passes = qz_qat_finalize_neutron_passes,
};
static const char *const qz_finalize_neutron_passes[] = {"qat_fold_exported", "dce", "split_group_conv_qdq",
                                                         "fold_dq_q", "dce", NULL};
static const qf_pipeline qz_finalize_neutron = {
    .name = "finalize_neutron",
    .summary = "finalize, then the Neutron-ready QDQ passes (pipeline neutron_qdq)",
    .passes = qz_finalize_neutron_passes,
};

qf_status qf_quant_register_passes(void)
{
    /* quant_qat_insert, qat_convert, qat_export: the pipelines qat_prepare /
     * qat_finalize and qfold qat --keep-qat name them, so register before
     * running those. */
    static const qf_pass *const passes[] = {&qf_pass_quant_annotate, &qf_pass_quant_convert,
                                            &qf_pass_quant_lower_int8, &qf_pass_qat_convert, &qf_pass_qat_export,
                                            &qf_pass_quant_qat_insert, &qf_pass_quant_equalize};
    static const qf_pipeline *const pipelines[] = {&qz_prepare,
                                                   &qz_convert,
                                                   &qz_qat_prepare,
                                                   &qz_qat_prepare_exact,
                                                   &qz_qat_finalize,
                                                   &qz_prepare_neutron,
                                                   &qz_convert_neutron,
                                                   &qz_qat_prepare_neutron,
                                                   &qz_qat_prepare_exact_neutron,
                                                   &qz_qat_finalize_neutron,
                                                   &qz_finalize_neutron};
    QF_TRY(qf_pass_register(passes, 7, pipelines, 11));
    return qf_quant_finalize_register();
}

/* Why g, whose inputs fix the batch size, cannot run `batch` samples at
 * once (qf_batch_widen, as the batcher decides it), into *note; NULL when
 * it can, or when g does not fix its batch size. */
static qf_status qz_batch_note(qf_graph *g, int64_t batch, char **note)
{
    *note = NULL;
    int64_t fixed = g->ninputs && g->inputs[0]->type.ndim ? g->inputs[0]->type.dims[0] : -1;
    if (fixed < 1 || batch == fixed) return QF_OK;
    qf_batch_widen *w = NULL;
    QF_TRY(qf_batch_widen_init(&w, g));
    bool ok = false;
    qf_status st = qf_batch_widen_begin(w, batch, &ok);
    qf_batch_widen_end(w);
    if (st == QF_OK && ok) st = qf_graph_infer_shapes(g);
    if (st == QF_OK && !ok && qf_batch_widen_why(w) && !(*note = qf_strdup(qf_batch_widen_why(w))))
        st = QF_ERR_NOMEM;
    qf_batch_widen_free(w);
    return st;
}

/* One quantization of g with profile p (its equalize rule taken as is);
 * `pass` labels its progress (NULL: the only one). */
static qf_status qz_quantize_one(qf_graph *g, const qf_data_source *data, const qf_quantize_options *opt,
                                 const qf_quant_profile *p, const char *pass, qf_quantize_result *out)
{
    memset(out, 0, sizeof *out);
    int ndata = data->ninputs;
    if (ndata < 1 || ndata > QF_QUANT_MAX_INPUTS)
        return qf_error(QF_ERR_INVALID, "quantize: %d calibration inputs", ndata);
    int64_t n = data->inputs[0]->ndim >= 1 ? data->inputs[0]->dims[0] : 0;
    if (opt->max_samples > 0 && opt->max_samples < n) n = opt->max_samples;
    if (n < 1) return qf_error(QF_ERR_SHAPE, "the calibration data holds no samples");
    qf_tensor views[QF_QUANT_MAX_INPUTS];
    const qf_tensor *ptrs[QF_QUANT_MAX_INPUTS];
    qz_first_samples(data, n, views, ptrs);

    double t0 = (qf_clock_seconds() * 1e3);
    QF_TRY(qf_quant_register_passes());
    /* A float16 / bfloat16 model is quantized as the float32 graph qfold
     * holds and written with float32 data around its int8 tensors: ONNX's
     * QuantizeLinear takes half-precision input only from opset 19 on, and an
     * int8 model gains nothing from half-precision float edges. */
    for (int i = 0; i < g->nvalues; i++)
        if (g->values[i]) g->values[i]->store = 0;
    QF_TRY(qf_graph_toposort(g));
    QF_TRY(qf_graph_infer_shapes(g));
    /* The BatchNorm statistics anchored on the folded graph before
     * equalization rescales it (analytical bias correction follows that). */
    if (p->bias_correction != QF_QBIAS_OFF && p->bias_correction != QF_QBIAS_EMPIRICAL && opt->bn_stats)
        QF_TRY(qf_quant_bn_stats_anchor(opt->bn_stats, g, &out->bc_bn));
    qf_quant_session sess = {.profile = p, .exclude = opt->exclude, .nexclude = opt->nexclude};
    qf_pass_options po = {.verify = true, .user = &sess};
    qf_status st =
        qf_pipeline_run(g, p->neutron_passes ? "quantize_prepare_neutron" : "quantize_prepare", &po, &out->prepare);
    qf_quant_annotation *a = sess.annotation;
    if (st == QF_OK) st = qf_quant_calib_init(&sess.calib, g, a, p);
    qf_quant_calib *c = sess.calib;
    double t1 = (qf_clock_seconds() * 1e3), t2 = t1;
    if (st == QF_OK) {
        qz_calib_run run = {.g = g, .c = c, .data = data, .total = n, .opt = opt, .pass = pass};
        qf_data_source first_n = {.ninputs = ndata, .inputs = ptrs, .read = qz_calib_read, .ud = &run};
        /* A model exported with a fixed batch size (PyTorch's default: 1)
         * runs opt->batch samples at once where that computes what it
         * computes one run at a time (qf_batch_widen): the same plans, and
         * so the same qparams, as the model exported with a dynamic batch. */
        qf_batch_options bo = {
            .batch = opt->batch, .on_batch = qz_batch, .ud = &run, .widen = true};
        st = qz_batch_note(g, opt->batch ? opt->batch : 32, &out->batch_note);
        /* The planned path (channels-last, fused where nothing is observed)
         * unless asked for the plain one or an observer is per channel. */
        qf_plan_observer ob = {.wants = qz_wants, .observe = qz_observe, .ud = &run};
        if (opt->plain_calibration || !qf_quant_calib_order_free(c)) {
            bo.hook = qz_hook;
            bo.hook_ud = &run;
        } else {
            bo.observer = &ob;
        }
        if (st == QF_OK) st = qf_run_source(g, &first_n, &bo);
        out->samples = run.done;
        out->batch = run.most;
        t2 = (qf_clock_seconds() * 1e3);
    }
    if (st == QF_OK) st = qf_quant_calib_finish(c);
    if (st == QF_OK) st = qz_left_float(a, out);
    /* Bias correction compares the QDQ model with the float graph it is
     * converted from (after equalization and the Neutron passes). */
    if (st == QF_OK && p->bias_correction != QF_QBIAS_OFF) st = qf_graph_clone(g, &out->bc_float);
    /* AdaRound (qf_quantize, after the choice of equalize=auto) needs the
     * float graph as it is converted: its weights and its layers' outputs. */
    if (st == QF_OK && p->weight_rounding == QF_QROUND_ADAROUND) st = qf_graph_clone(g, &out->float_ref);
    if (st == QF_OK)
        st = qf_pipeline_run(g, p->neutron_passes ? "quantize_convert_neutron" : "quantize_convert", &po,
                             &out->convert);
    out->stats = sess.stats;
    out->tensors = sess.tensors;
    out->ntensors = sess.ntensors;
    if (st == QF_OK) st = qf_graph_infer_shapes(g);
    out->calibrate_ms = t2 - t1;
    out->convert_ms = (t1 - t0) + ((qf_clock_seconds() * 1e3) - t2);
    qf_quant_calib_free(sess.calib);
    qf_quant_annotation_free(sess.annotation);
    if (st != QF_OK) qf_quantize_result_free(out);
    return st;
}

/* The SQNR (dB) of the graph outputs of q against ref's over the pairs
 * measured (noise and signal summed over the outputs); -inf when no graph
 * output is quantized (nothing to compare on). */
static double qz_output_sqnr(const qf_graph *ref, const qf_quant_sqnr *s, int count)
{
    double sig = 0.0, noise = 0.0;
    bool any = false;
    for (int i = 0; i < ref->noutputs; i++)
        for (int k = 0; k < count; k++)
            if (!strcmp(s[k].name, ref->outputs[i]->name)) {
                sig += s[k].signal;
                noise += s[k].noise;
                any = true;
            }
    if (!any) return -INFINITY;
    return noise > 0.0 ? 10.0 * log10(sig / noise) : INFINITY;
}

static qf_status qz_measure_sqnr(qf_graph *ref, qf_graph *q, const qf_data_source *data,
                                 int64_t batch, int64_t max_samples, bool outputs_only,
                                 qf_quant_sqnr **out, int *count);

static qf_status qz_measure_outputs(qf_graph *ref, qf_graph *q, const qf_data_source *data,
                                    const qf_quantize_options *opt, int64_t n, double *db)
{
    qf_quant_sqnr *s = NULL;
    int count = 0;
    QF_TRY(qz_measure_sqnr(ref, q, data, opt->batch, n, true, &s, &count));
    *db = qz_output_sqnr(ref, s, count);
    qf_quant_sqnr_free(s, count);
    return QF_OK;
}

static void qz_swap_graphs(qf_graph *a, qf_graph *b)
{
    qf_graph t = *a;
    *a = *b;
    *b = t;
}

/* equalize=auto: how many pairs does equalization with `rule` rewrite in g?
 * (run on a copy, made only when the pass finds a pair at all) */
static qf_status qz_eq_rewrites(const qf_graph *g, const qf_quant_profile *p, qf_qequalize rule, int *rewrites)
{
    *rewrites = 0;
    qf_quant_profile pe = *p;
    pe.equalize = rule;
    /* Many models have no pair for a rule (per-tensor in resnet18 / resnet50 /
     * mobilenet_v2: an Add or a Relu6 before each Gemm): no copy of their
     * weights then. */
    if (!qf_quant_equalize_candidates(g, &pe)) return QF_OK;
    qf_graph *copy = NULL;
    QF_TRY(qf_graph_clone(g, &copy));
    qf_quant_session sess = {.profile = &pe};
    static const char *const only[] = {"equalize", NULL};
    qf_pass_options po = {.verify = false, .user = &sess};
    qf_pass_report *rep = NULL;
    qf_status st = qf_passes_run(copy, only, &po, &rep);
    if (st == QF_OK) *rewrites = qf_pass_report_count(rep, QF_PASS_REWROTE, QF_OP_COUNT);
    qf_pass_report_free(rep);
    qf_graph_free(copy);
    return st;
}

qf_status qf_quant_float_as_prepared(qf_graph *ref, const qf_quant_profile *p, qf_qequalize rule)
{
    if (rule == QF_QEQ_AUTO) return qf_error(QF_ERR_INVALID, "qf_quant_float_as_prepared: a rule, not auto");
    QF_TRY(qf_quant_register_passes());
    QF_TRY(qf_graph_toposort(ref));
    QF_TRY(qf_graph_infer_shapes(ref));
    qf_quant_profile pe = *p;
    pe.equalize = rule;
    qf_quant_session sess = {.profile = &pe};
    qf_pass_options po = {.verify = false, .user = &sess};
    qf_pass_report *rep = NULL;
    qf_status st = qf_passes_run(ref, p->neutron_passes ? qz_float_neutron_passes : qz_float_passes, &po, &rep);
    qf_pass_report_free(rep);
    return st;
}

static size_t qz_weight_bytes(const qf_graph *g)
{
    size_t n = 0;
    for (int i = 0; i < g->nvalues; i++)
        if (g->values[i] && qf_value_is_const(g->values[i])) n += qf_tensor_nbytes(&g->values[i]->type);
    return n;
}

/* One candidate of the trial: a copy of the float model `ref` quantized with
 * `rule`, its graph outputs' SQNR measured on the first samples; it replaces
 * the model in g (SQNR *best, rule *kept) in g and out when it measures
 * higher and clears the rule's margin over the model without equalization
 * (out->eq_sqnr[QF_QEQ_OFF]). */
static qf_status qz_eq_try(qf_graph *g, qf_graph *ref, const qf_data_source *data, const qf_quantize_options *opt,
                           const qf_quant_profile *p, qf_qequalize rule, const char *pass,
                           qf_quantize_result *out, qf_qequalize *kept, double *best)
{
    qf_quant_profile pc = *p;
    pc.equalize = rule;
    qf_graph *c = NULL;
    qf_quantize_result r = {0};
    double db = 0.0;
    int64_t n = out->samples < QF_QUANT_EQ_SAMPLES ? out->samples : QF_QUANT_EQ_SAMPLES;
    qf_status st = qf_graph_clone(ref, &c);
    if (st == QF_OK) st = qz_quantize_one(c, data, opt, &pc, pass, &r);
    if (st == QF_OK) st = qz_measure_outputs(ref, c, data, opt, n, &db);
    if (st == QF_OK) {
        out->eq_sqnr[rule] = db;
        out->eq_tried[rule] = true;
        double cal = out->calibrate_ms + r.calibrate_ms, conv = out->convert_ms + r.convert_ms;
        if (db > *best && db >= out->eq_sqnr[QF_QEQ_OFF] + qf_quant_eq_margin(rule)) {
            qz_swap_graphs(g, c);
            qf_quantize_result t = *out;
            *out = r;
            r = t;
            memcpy(out->eq_sqnr, r.eq_sqnr, sizeof out->eq_sqnr);
            memcpy(out->eq_tried, r.eq_tried, sizeof out->eq_tried);
            *kept = rule;
            *best = db;
        }
        out->calibrate_ms = cal;
        out->convert_ms = conv;
    }
    qf_quantize_result_free(&r);
    qf_graph_free(c);
    return st;
}

static qf_status qz_quantize(qf_graph *g, const qf_data_source *data,
                             const qf_quantize_options *opt, qf_quantize_result *out)
{
    memset(out, 0, sizeof *out);
    const qf_quant_profile *p = opt->profile ? opt->profile : qf_quant_profile_find("neutron");
    if (p->equalize != QF_QEQ_AUTO) return qz_quantize_one(g, data, opt, p, NULL, out);
    /* equalize=auto: cross-layer equalization balances the weights of a
     * pair but can move the activation's channel ranges apart (on the
     * bundled Fashion-MNIST CNN it costs 0.1-0.5 point), so it is kept only
     * where the int8 model it gives is clearly closer to the float model on
     * the calibration data: the model is quantized without it and with each
     * rule that changes it, and the graph outputs' SQNR compared. Clearly:
     * per-tensor by QF_QUANT_EQ_MARGIN_DB, since a few hundred calibration
     * samples do not separate smaller differences from chance (a
     * depthwise-separable Fashion-MNIST CNN: +0.5 dB on 512 calibration
     * images with it, yet 0.1 point of top-1 and 0.7 point of agreement with
     * float lost on the test images; the skewed head of tests/ref/fx_qat.py
     * --skew 8: +10.7 dB, 1.2 points won). Equalizing every pair (both
     * weights per channel: what it buys is the activation grid between them)
     * must beat the best of the others by QF_QUANT_EQ_ALL_MARGIN_DB: on the
     * bundled CNN it gains 5.0 dB yet loses 0.08 point with neutron and 0.4
     * point (below PyTorch) with generic; on a CNN whose block channels are
     * scaled apart (tests/ref/fx_qat.py --spread 8) it gains 12.6 dB and wins
     * back 2.2 points. Of the candidates that clear their margin over the
     * model without equalization, the one measured best is kept: all over
     * per-tensor when all measures higher (a depthwise-separable CNN with
     * both kinds of pair skewed: per-tensor alone leaves its depthwise pairs
     * unbalanced); a rule measured higher that misses its margin is named in
     * the summary (qf_quant_eq_summary). That trial runs only on models of at most
     * QF_QUANT_EQ_ALL_BYTES of weights (the size the Neutron NPU runs): above,
     * it would double the calibration of every CNN with a conv pair. */
    QF_TRY(qf_quant_register_passes());
    QF_TRY(qf_graph_toposort(g));
    QF_TRY(qf_graph_infer_shapes(g));
    int n_pt = 0, n_all = 0;
    QF_TRY(qz_eq_rewrites(g, p, QF_QEQ_PER_TENSOR, &n_pt));
    if (qz_weight_bytes(g) <= QF_QUANT_EQ_ALL_BYTES) QF_TRY(qz_eq_rewrites(g, p, QF_QEQ_ALL, &n_all));
    qf_quant_profile off = *p;
    off.equalize = QF_QEQ_OFF;
    if (!n_pt && n_all <= n_pt) return qz_quantize_one(g, data, opt, &off, NULL, out);
    /* One progress line per calibration, each saying which it is. */
    int npasses = 1 + (n_pt > 0) + (n_all > n_pt), pass = 1;
    char label[80];
    snprintf(label, sizeof label, "equalize=auto trial %d/%d: without equalization", pass++, npasses);
    qf_graph *ref = NULL;
    qf_status st = qf_graph_clone(g, &ref);
    if (st == QF_OK) st = qz_quantize_one(g, data, opt, &off, label, out);
    int64_t n = out->samples < QF_QUANT_EQ_SAMPLES ? out->samples : QF_QUANT_EQ_SAMPLES;
    double best = 0.0;
    if (st == QF_OK) st = qz_measure_outputs(ref, g, data, opt, n, &best);
    qf_qequalize kept = QF_QEQ_OFF;
    if (st == QF_OK) {
        out->eq_sqnr[QF_QEQ_OFF] = best;
        out->eq_tried[QF_QEQ_OFF] = true;
    }
    if (st == QF_OK && n_pt) {
        snprintf(label, sizeof label, "equalize=auto trial %d/%d: equalize per-tensor", pass++, npasses);
        st = qz_eq_try(g, ref, data, opt, p, QF_QEQ_PER_TENSOR, label, out, &kept, &best);
    }
    if (st == QF_OK && n_all > n_pt) {
        snprintf(label, sizeof label, "equalize=auto trial %d/%d: equalize all", pass++, npasses);
        st = qz_eq_try(g, ref, data, opt, p, QF_QEQ_ALL, label, out, &kept, &best);
    }
    if (st == QF_OK) {
        out->eq_trial = true;
        out->eq_rule = kept;
    }
    qf_graph_free(ref);
    if (st != QF_OK) qf_quantize_result_free(out);
    return st;
}

/* One form of bias correction on c (a copy of the QDQ model or the model
 * itself), its graph outputs' SQNR against f into *db. */
static qf_status qz_bc_form(qf_graph *c, qf_graph *f, const qf_data_source *data, const qf_quantize_options *opt,
                            qf_qbias form, const qf_quantize_result *out, qf_quant_bc_stats *st, double *db)
{
    int64_t nm = out->samples < QF_QUANT_EQ_SAMPLES ? out->samples : QF_QUANT_EQ_SAMPLES;
    int64_t nb = out->samples < QF_QUANT_BC_SAMPLES ? out->samples : QF_QUANT_BC_SAMPLES;
    if (form == QF_QBIAS_EMPIRICAL) QF_TRY(qf_quant_bias_correct(c, f, data, nb, opt->batch ? opt->batch : 32, st));
    else QF_TRY(qf_quant_bias_correct_analytic(c, f, out->bc_bn, st));
    return qz_measure_outputs(f, c, data, opt, nm, db);
}

/* Bias correction of the QDQ model g against the float graph it was
 * converted from (out->bc_float): empirical on the first
 * QF_QUANT_BC_SAMPLES calibration samples, analytical from the BatchNorm
 * statistics (out->bc_bn); the graph outputs' SQNR before and after on the
 * first QF_QUANT_EQ_SAMPLES (equalize=auto's measure). empirical and
 * analytical correct g itself; auto corrects a copy with each (analytical
 * only when it has statistics for a layer: else it would measure the
 * uncorrected model again) and keeps the better when its SQNR gains more
 * than QF_QUANT_BC_MARGIN_DB. */
static qf_status qz_bias_correct(qf_graph *g, const qf_data_source *data, const qf_quantize_options *opt,
                                 qf_qbias rule, qf_quantize_result *out)
{
    double t0 = qf_clock_seconds() * 1e3;
    out->bc_rule = rule;
    out->bc_alt_sqnr = NAN;
    qf_graph *f = out->bc_float;
    if (!f) return qf_error(QF_ERR_INTERNAL, "bias correction: no float graph kept");
    int64_t nm = out->samples < QF_QUANT_EQ_SAMPLES ? out->samples : QF_QUANT_EQ_SAMPLES;
    qf_status st = qz_measure_outputs(f, g, data, opt, nm, &out->bc_sqnr_before);
    if (rule != QF_QBIAS_AUTO) {
        out->bc_form = rule;
        if (st == QF_OK) st = qz_bc_form(g, f, data, opt, rule, out, &out->bc, &out->bc_sqnr_after);
        out->bc_kept = true;
        out->bc_ms = qf_clock_seconds() * 1e3 - t0;
        return st;
    }
    qf_graph *ce = NULL, *ca = NULL;
    qf_quant_bc_stats se = {0}, sa = {0};
    double de = -INFINITY, da = NAN;
    if (st == QF_OK) st = qf_graph_clone(g, &ce);
    if (st == QF_OK) st = qz_bc_form(ce, f, data, opt, QF_QBIAS_EMPIRICAL, out, &se, &de);
    if (st == QF_OK && out->bc_bn && out->bc_bn->count) st = qf_graph_clone(g, &ca);
    if (st == QF_OK && ca) st = qf_quant_bias_correct_analytic(ca, f, out->bc_bn, &sa);
    if (st == QF_OK && ca && sa.layers) st = qz_measure_outputs(f, ca, data, opt, nm, &da);
    if (st == QF_OK) {
        bool analytical = !isnan(da) && da > de;
        out->bc_form = analytical ? QF_QBIAS_ANALYTICAL : QF_QBIAS_EMPIRICAL;
        out->bc = analytical ? sa : se;
        out->bc_alt = analytical ? se : sa;
        out->bc_sqnr_after = analytical ? da : de;
        out->bc_alt_sqnr = analytical ? de : da;
        out->bc_kept = out->bc_sqnr_after > out->bc_sqnr_before + QF_QUANT_BC_MARGIN_DB;
        if (out->bc_kept) qz_swap_graphs(g, analytical ? ca : ce);
    }
    qf_graph_free(ce);
    qf_graph_free(ca);
    out->bc_ms = qf_clock_seconds() * 1e3 - t0;
    return st;
}

qf_status qf_quantize(qf_graph *g, const qf_data_source *data, const qf_quantize_options *opt,
                      qf_quantize_result *out)
{
    double t0 = qf_clock_seconds() * 1e3;
    QF_TRY(qz_quantize(g, data, opt, out));
    const qf_quant_profile *p = opt->profile ? opt->profile : qf_quant_profile_find("neutron");
    qf_status st = QF_OK;
    /* AdaRound first (the weights), then bias correction (the mean error
     * the rounded weights leave); each needs the float graph as converted. */
    if (out->float_ref) {
        double ta = qf_clock_seconds() * 1e3;
        qf_quant_adaround_options ao = {.iters = p->adaround_iters, .reg = p->adaround_reg, .batch = opt->batch,
                                        .max_samples = opt->max_samples, .seed = opt->seed,
                                        .progress = opt->adaround_progress, .progress_ud = opt->progress_ud};
        out->adaround_seed = opt->seed;
        st = qf_quant_adaround(g, out->float_ref, data, &ao, p, &out->adaround, &out->nadaround);
        out->adaround_ms = qf_clock_seconds() * 1e3 - ta;
    }
    qf_graph_free(out->float_ref);
    out->float_ref = NULL;
    if (st == QF_OK && p->bias_correction != QF_QBIAS_OFF) st = qz_bias_correct(g, data, opt, p->bias_correction, out);
    qf_graph_free(out->bc_float);
    out->bc_float = NULL;
    qf_quant_bn_stats_free(out->bc_bn);
    out->bc_bn = NULL;
    if (st != QF_OK) {
        qf_quantize_result_free(out);
        return st;
    }
    /* Whatever the calibrations, conversions, AdaRound and bias correction
     * did not take is equalize=auto's: which rules change the model, the
     * trials' copies and output SQNR (0 but for the bookkeeping without a
     * trial). */
    double rest = qf_clock_seconds() * 1e3 - t0 - out->calibrate_ms - out->convert_ms - out->bc_ms - out->adaround_ms;
    out->equalize_ms = rest > 0.0 ? rest : 0.0;
    return QF_OK;
}

const char *qf_quant_bc_rule_name(qf_qbias b)
{
    switch (b) {
    case QF_QBIAS_OFF: return "off";
    case QF_QBIAS_EMPIRICAL: return "empirical";
    case QF_QBIAS_ANALYTICAL: return "analytical";
    case QF_QBIAS_AUTO: return "auto";
    }
    return "?";
}

void qf_quant_bc_summary(const qf_quantize_result *r, char *buf, size_t n)
{
    if (r->bc_rule == QF_QBIAS_OFF) {
        if (n) buf[0] = 0;
        return;
    }
    /* auto names the form its figures are of, then the other one's SQNR */
    char form[48] = "", alt[96] = "";
    if (r->bc_rule == QF_QBIAS_AUTO) {
        snprintf(form, sizeof form, ": %s", qf_quant_bc_rule_name(r->bc_form));
        qf_qbias other = r->bc_form == QF_QBIAS_EMPIRICAL ? QF_QBIAS_ANALYTICAL : QF_QBIAS_EMPIRICAL;
        if (isnan(r->bc_alt_sqnr))
            snprintf(alt, sizeof alt, "; %s: no layer with BatchNorm statistics", qf_quant_bc_rule_name(other));
        else
            snprintf(alt, sizeof alt, "; %s: %d layer%s, %.1f dB", qf_quant_bc_rule_name(other), r->bc_alt.layers,
                     r->bc_alt.layers == 1 ? "" : "s", r->bc_alt_sqnr);
    }
    snprintf(buf, n, "%s%s, %d layer%s (%d bias%s added, %d skipped, %d pass%s), int8 outputs' SQNR %.1f -> %.1f dB (%s%s)",
             qf_quant_bc_rule_name(r->bc_rule), form, r->bc.layers, r->bc.layers == 1 ? "" : "s", r->bc.added,
             r->bc.added == 1 ? "" : "es", r->bc.skipped, r->bc.passes, r->bc.passes == 1 ? "" : "es",
             r->bc_sqnr_before, r->bc_sqnr_after, r->bc_kept ? "kept" : "not kept", alt);
}

const char *qf_quant_eq_rule_name(qf_qequalize e)
{
    switch (e) {
    case QF_QEQ_OFF: return "off";
    case QF_QEQ_PER_TENSOR: return "per-tensor";
    case QF_QEQ_ALL: return "all";
    case QF_QEQ_AUTO: return "auto";
    }
    return "?";
}

double qf_quant_eq_margin(qf_qequalize rule)
{
    return rule == QF_QEQ_ALL ? QF_QUANT_EQ_ALL_MARGIN_DB : rule == QF_QEQ_PER_TENSOR ? QF_QUANT_EQ_MARGIN_DB : 0.0;
}

qf_qequalize qf_quant_eq_refused(const qf_quantize_result *r)
{
    if (!r->eq_trial) return QF_QEQ_OFF;
    const int k = r->eq_rule <= QF_QEQ_ALL ? (int)r->eq_rule : QF_QEQ_OFF;
    int refused = QF_QEQ_OFF;
    for (int j = QF_QEQ_PER_TENSOR; j <= QF_QEQ_ALL; j++) {
        if (j == k || !r->eq_tried[j] || r->eq_sqnr[j] <= r->eq_sqnr[k]) continue;
        if (refused == QF_QEQ_OFF || r->eq_sqnr[j] > r->eq_sqnr[refused]) refused = j;
    }
    return (qf_qequalize)refused;
}

void qf_quant_eq_summary(const qf_quantize_result *r, char *buf, size_t n)
{
    int k = r->eq_rule <= QF_QEQ_ALL ? (int)r->eq_rule : QF_QEQ_OFF;
    int w = k == QF_QEQ_OFF ? snprintf(buf, n, "not kept: int8 outputs' SQNR %.1f dB without (", r->eq_sqnr[k])
                            : snprintf(buf, n, "%s kept: int8 outputs' SQNR %.1f dB (",
                                       qf_quant_eq_rule_name((qf_qequalize)k), r->eq_sqnr[k]);
    const char *sep = "";
    for (int j = QF_QEQ_ALL; j >= QF_QEQ_OFF && w >= 0 && (size_t)w < n; j--) {
        if (j == k || !r->eq_tried[j]) continue;
        w += snprintf(buf + w, n - (size_t)w, "%s%s %.1f", sep,
                      j == QF_QEQ_OFF ? "without" : qf_quant_eq_rule_name((qf_qequalize)j), r->eq_sqnr[j]);
        sep = ", ";
    }
    if (w >= 0 && (size_t)w < n) w += snprintf(buf + w, n - (size_t)w, ")");
    /* A rule measured higher than the one kept missed its margin over the
     * model without equalization: say so, and how to have it anyway. */
    const qf_qequalize x = qf_quant_eq_refused(r);
    if (x != QF_QEQ_OFF && w >= 0 && (size_t)w < n)
        snprintf(buf + w, n - (size_t)w, "; %s refused: %+.1f dB over without, below its %.0f dB margin "
                 "(--set equalize=%s keeps it)", qf_quant_eq_rule_name(x), r->eq_sqnr[x] - r->eq_sqnr[QF_QEQ_OFF],
                 qf_quant_eq_margin(x), qf_quant_eq_rule_name(x));
}

qf_status qf_quant_equalize_choose(const qf_graph *g, const qf_data_source *data, int64_t max_samples,
                                   const qf_quant_profile *p, qf_qequalize *out, qf_quantize_result *trial)
{
    memset(trial, 0, sizeof *trial);
    *out = p->equalize;
    if (p->equalize != QF_QEQ_AUTO) return QF_OK;
    qf_graph *c = NULL;
    QF_TRY(qf_graph_clone(g, &c));
    qf_pass_report *r = NULL;
    qf_status st = qf_pipeline_run(c, "ptq", NULL, &r);
    qf_pass_report_free(r);
    /* the trial decides equalization only: no bias correction in it */
    qf_quant_profile pc = *p;
    pc.bias_correction = QF_QBIAS_OFF;
    qf_quantize_options opt = {.profile = &pc, .max_samples = max_samples};
    if (st == QF_OK) st = qf_quantize(c, data, &opt, trial);
    qf_graph_free(c);
    if (st != QF_OK) return st;
    *out = trial->eq_trial ? trial->eq_rule : QF_QEQ_OFF;
    return QF_OK;
}

/* --- per-layer SQNR ----------------------------------------------------------------- */

typedef struct qz_pair {
    uint32_t ref_id, q_id;
    float *buf;      /* the reference tensor of the current batch, NCHW */
    size_t bytes, cap;
    bool have;
    bool moves;      /* written by an op that only moves int8 values on its input's qparams */
} qz_pair;

typedef struct qz_sqnr_run {
    qz_pair *pairs;
    int npairs;
    uint32_t *by_ref, *by_q;  /* value id -> pair index + 1 (0: none) */
    uint32_t *by_qin;         /* q's value id -> 1 + the graph input its Q -> DQ dequantizes (0: none) */
    uint32_t nref, nq;
    double *part;             /* per piece: signal, noise */
    size_t part_cap;
    qf_quant_sqnr *res;
    /* the local SQNR: q runs a second time per batch (local_pass), each
     * paired DQ's output compared, then replaced by the float value */
    bool local, local_pass;
    const qf_data_source *data;
    const void *const *rows;  /* the batch's rows of each graph input */
    int64_t count;            /* ... and how many */
} qz_sqnr_run;

/* buf with room for `bytes` (NULL: out of memory; the old buffer is then
 * still the caller's). */
static void *qz_grow(void *buf, size_t *cap, size_t bytes)
{
    if (bytes <= *cap && buf) return buf;
    void *nb = qf_realloc(buf, bytes ? bytes : 1);
    if (nb) *cap = bytes;
    return nb;
}

static bool qz_ref_wants(void *ud, const qf_value *v)
{
    const qz_sqnr_run *r = ud;
    return v->id < r->nref && r->by_ref[v->id];
}

/* The reference's value of a pair, kept (in NCHW order) for q's. */
static qf_status qz_ref_observe(void *ud, const qf_value *v, const qf_tensor *t, bool nhwc)
{
    qz_sqnr_run *r = ud;
    qz_pair *pr = &r->pairs[r->by_ref[v->id] - 1];
    size_t bytes = qf_tensor_nbytes(t);
    float *buf = qz_grow(pr->buf, &pr->cap, bytes);
    if (!buf) return QF_ERR_NOMEM;
    pr->buf = buf;
    pr->bytes = bytes;
    qf_exec_copy_nchw(pr->buf, t, nhwc);
    pr->have = true;
    return QF_OK;
}

/* Signal and noise of x (the reference) against y in fixed pieces, each
 * summed on its own and the pieces added in order: the figure does not
 * depend on the thread count. */
enum { QZ_PIECE = 16384 };

typedef struct qz_cmp {
    const float *x, *y;
    int64_t n;
    double *part;
} qz_cmp;

static void qz_cmp_body(void *ctx, int64_t lo, int64_t hi)
{
    const qz_cmp *c = ctx;
    for (int64_t k = lo; k < hi; k++) {
        int64_t e0 = k * QZ_PIECE, e1 = e0 + QZ_PIECE < c->n ? e0 + QZ_PIECE : c->n;
        double sig = 0.0, noise = 0.0;
        for (int64_t e = e0; e < e1; e++) {
            double d = (double)c->x[e] - (double)c->y[e];
            sig += (double)c->x[e] * c->x[e];
            noise += d * d;
        }
        c->part[2 * k] = sig;
        c->part[2 * k + 1] = noise;
    }
}

/* A graph input's float data in place of its DequantizeLinear's output t
 * (the local pass): the batch's rows, a padded batch's extra rows repeating
 * the last sample as the batcher pads them. */
static void qz_input_float(const qz_sqnr_run *r, int in, const qf_tensor *t)
{
    const qf_tensor *d = r->data->inputs[in];
    size_t row = d->ndim >= 1 ? (size_t)qf_shape_numel(d->ndim - 1, d->dims + 1) * qf_dtype_size(d->dtype) : 0;
    size_t bytes = qf_tensor_nbytes(t);
    if (d->dtype != QF_DTYPE_F32 || !row || !r->count || bytes % row) return;
    size_t have = (size_t)r->count * row, at = 0;
    char *dst = t->data;
    for (; at + row <= bytes; at += row) {
        size_t from = at < have ? at : have - row;
        memcpy(dst + at, (const char *)r->rows[in] + from, row);
    }
}

/* The quantized model runs plain (NCHW, nothing fused: its convolutions
 * read weights computed at run time, which run on the reference kernels
 * anyway, and a plain plan has no reorders around them); each paired value
 * is compared with the reference's of the same batch as it is written. In
 * the local pass the DequantizeLinear's output is then overwritten with the
 * reference's value (the plan hook may: later steps read what it leaves),
 * so that every layer computes on float inputs. */
static qf_status qz_q_hook(void *ud, const qf_node *n, const qf_tensor *const *outs, int nout)
{
    qz_sqnr_run *r = ud;
    for (int i = 0; i < nout; i++) {
        uint32_t id = n->outputs[i]->id;
        if (r->local_pass && id < r->nq && r->by_qin[id]) {
            qz_input_float(r, (int)r->by_qin[id] - 1, outs[i]);
            continue;
        }
        if (id >= r->nq || !r->by_q[id]) continue;
        int k = (int)r->by_q[id] - 1;
        qz_pair *pr = &r->pairs[k];
        size_t bytes = qf_tensor_nbytes(outs[i]);
        if (!pr->have || bytes != pr->bytes) continue;
        int64_t ne = (int64_t)(bytes / sizeof(float)), pieces = (ne + QZ_PIECE - 1) / QZ_PIECE;
        double *part = qz_grow(r->part, &r->part_cap, (size_t)pieces * 2 * sizeof(double));
        if (!part) return QF_ERR_NOMEM;
        r->part = part;
        qz_cmp c = {pr->buf, outs[i]->data, ne, part};
        qf_parallel_for(pieces, 1, qz_cmp_body, &c);
        for (int64_t j = 0; j < pieces; j++) {
            if (r->local_pass) {
                if (!pr->moves) r->res[k].local_noise += part[2 * j + 1];
            } else {
                r->res[k].signal += part[2 * j];
                r->res[k].noise += part[2 * j + 1];
            }
        }
        if (r->local_pass) memcpy(outs[i]->data, pr->buf, bytes);
        if (r->local_pass || !r->local) pr->have = false;
    }
    return QF_OK;
}

/* Whether two scalar qparams constants (scale or zero point) are equal. */
static bool qz_same_const(const qf_value *a, const qf_value *b)
{
    if (a == b) return true;
    if (!a || !b || !qf_value_is_const(a) || !qf_value_is_const(b) || qf_tensor_numel(&a->type) != 1 ||
        qf_tensor_numel(&b->type) != 1)
        return false;
    return qf_tensor_get_f64(&a->type, 0) == qf_tensor_get_f64(&b->type, 0);
}

/* Whether the value Q node qn quantizes is written by an op that moves
 * int8 values (MaxPool, Reshape, Flatten, Transpose, ...) from a
 * DequantizeLinear of the same qparams: in int8 it adds no error, so its
 * local SQNR is infinite (measured on float inputs it would repeat its
 * input's rounding). */
static bool qz_moves(const qf_node *qn)
{
    const qf_node *p = qn->inputs[0] ? qn->inputs[0]->producer : NULL;
    if (!p || !qf_quant_op_passes_qparams(p->op) || p->ninputs < 1 || !p->inputs[0]) return false;
    const qf_node *dq = p->inputs[0]->producer;
    if (!dq || dq->op != QF_OP_DEQUANTIZE || dq->ninputs < 2 || qn->ninputs < 2) return false;
    const qf_value *zq = qn->ninputs > 2 ? qn->inputs[2] : NULL, *zd = dq->ninputs > 2 ? dq->inputs[2] : NULL;
    return qz_same_const(qn->inputs[1], dq->inputs[1]) && (zq == zd || qz_same_const(zq, zd));
}

/* Pair every Q -> DQ of q with the float value of ref it stands for: the Q's
 * input has the float value's name, or (a graph output, whose name the DQ
 * took over) the DQ's output has it. */
static qf_status qz_pairs(qf_graph *ref, qf_graph *q, bool outputs_only, qz_sqnr_run *r)
{
    r->nref = (uint32_t)ref->nvalues;
    r->nq = (uint32_t)q->nvalues;
    r->by_ref = qf_calloc(r->nref ? r->nref : 1, sizeof *r->by_ref);
    r->by_q = qf_calloc(r->nq ? r->nq : 1, sizeof *r->by_q);
    r->by_qin = qf_calloc(r->nq ? r->nq : 1, sizeof *r->by_qin);
    r->pairs = qf_calloc((size_t)(q->nnodes ? q->nnodes : 1), sizeof *r->pairs);
    if (!r->by_ref || !r->by_q || !r->by_qin || !r->pairs) return QF_ERR_NOMEM;
    for (const qf_node *n = q->first; n; n = n->next) {
        if (n->op != QF_OP_DEQUANTIZE || !n->inputs[0] || !n->inputs[0]->producer ||
            n->inputs[0]->producer->op != QF_OP_QUANTIZE)
            continue;
        const qf_value *u = n->inputs[0]->producer->inputs[0], *d = n->outputs[0];
        /* a quantized graph input: the local pass gives its layers the data */
        for (int i = 0; i < q->ninputs && r->local; i++)
            if (q->inputs[i] == u && u->type.dtype == QF_DTYPE_F32 && i < r->data->ninputs)
                r->by_qin[d->id] = (uint32_t)i + 1;
        const qf_value *fv = qf_graph_find_value(ref, u->name);
        if (!fv || !fv->producer) fv = qf_graph_find_value(ref, d->name);
        if (!fv || !fv->producer || fv->type.dtype != QF_DTYPE_F32 || r->by_ref[fv->id]) continue;
        /* equalize=auto's trials compare the graph outputs only: the other
         * values then stay in the reference plan's fused chains */
        if (outputs_only && !fv->is_output) continue;
        r->pairs[r->npairs] = (qz_pair){.ref_id = fv->id, .q_id = d->id, .moves = qz_moves(n->inputs[0]->producer)};
        r->by_ref[fv->id] = r->by_q[d->id] = (uint32_t)++r->npairs;
    }
    /* A graph output left in float (an excluded last layer) is compared as
     * it is: its cumulative SQNR is what the model loses there. */
    for (int i = 0; i < q->noutputs && r->npairs < q->nnodes; i++) {
        const qf_value *d = q->outputs[i], *fv = qf_graph_find_value(ref, d->name);
        if (!d->producer || d->producer->op == QF_OP_DEQUANTIZE || d->type.dtype != QF_DTYPE_F32 || r->by_q[d->id] ||
            !fv || !fv->producer || fv->type.dtype != QF_DTYPE_F32 || r->by_ref[fv->id])
            continue;
        r->pairs[r->npairs] = (qz_pair){.ref_id = fv->id, .q_id = d->id};
        r->by_ref[fv->id] = r->by_q[d->id] = (uint32_t)++r->npairs;
    }
    r->res = qf_calloc((size_t)(r->npairs ? r->npairs : 1), sizeof *r->res);
    if (!r->res) return QF_ERR_NOMEM;
    for (int k = 0; k < r->npairs; k++) {
        r->res[k].name = qf_strdup(ref->values[r->pairs[k].ref_id]->name);
        if (!r->res[k].name) return QF_ERR_NOMEM;
    }
    return QF_OK;
}

void qf_quant_sqnr_free(qf_quant_sqnr *s, int count)
{
    for (int i = 0; s && i < count; i++) qf_free(s[i].name);
    qf_free(s);
}

static qf_status qz_measure(qf_graph *ref, qf_graph *q, const qf_data_source *data, int64_t batch,
                            int64_t max_samples, bool outputs_only, bool local, qf_quant_sqnr **out, int *count);

qf_status qf_quant_measure_sqnr(qf_graph *ref, qf_graph *q, const qf_data_source *data, int64_t batch,
                                int64_t max_samples, qf_quant_sqnr **out, int *count)
{
    return qz_measure(ref, q, data, batch, max_samples, false, false, out, count);
}

qf_status qf_quant_measure_sqnr_ex(qf_graph *ref, qf_graph *q, const qf_data_source *data, int64_t batch,
                                   int64_t max_samples, bool local, qf_quant_sqnr **out, int *count)
{
    return qz_measure(ref, q, data, batch, max_samples, false, local, out, count);
}

static qf_status qz_measure_sqnr(qf_graph *ref, qf_graph *q, const qf_data_source *data,
                                 int64_t batch, int64_t max_samples, bool outputs_only,
                                 qf_quant_sqnr **out, int *count)
{
    return qz_measure(ref, q, data, batch, max_samples, outputs_only, false, out, count);
}

static qf_status qz_measure(qf_graph *ref, qf_graph *q, const qf_data_source *data, int64_t batch,
                            int64_t max_samples, bool outputs_only, bool local, qf_quant_sqnr **out, int *count)
{
    *out = NULL;
    *count = 0;
    int ndata = data->ninputs;
    if (ndata < 1 || ndata > QF_QUANT_MAX_INPUTS) return qf_error(QF_ERR_INVALID, "sqnr: %d inputs", ndata);
    int64_t n = data->inputs[0]->ndim >= 1 ? data->inputs[0]->dims[0] : 0;
    if (max_samples > 0 && max_samples < n) n = max_samples;
    if (batch < 1) batch = QF_QUANT_SQNR_BATCH;
    qz_sqnr_run r = {.local = local, .data = data};
    qf_status st = qz_pairs(ref, q, outputs_only, &r);
    /* The kept activations of one sample (dims past the first, as inferred);
     * the batch shrinks until a batch's fit QF_QUANT_SQNR_BYTES. */
    size_t per_sample = 0;
    for (int k = 0; k < r.npairs && st == QF_OK; k++) {
        const qf_tensor *t = &ref->values[r.pairs[k].ref_id]->type;
        int64_t e = t->ndim >= 1 ? qf_shape_numel(t->ndim - 1, t->dims + 1) : 1;
        if (e > 0) per_sample += (size_t)e * qf_dtype_size(t->dtype);
    }
    if (per_sample && (size_t)batch * per_sample > QF_QUANT_SQNR_BYTES) {
        batch = (int64_t)(QF_QUANT_SQNR_BYTES / per_sample);
        if (batch < 1) batch = 1;
    }
    /* Batch by batch, both models planned once per batch size: the
     * reference (channels-last and fused as for inference, the paired values
     * kept unfused) keeps the batch's paired activations, then the quantized
     * model runs the same rows and compares as it goes. */
    qf_tensor views[QF_QUANT_MAX_INPUTS];
    const qf_tensor *ptrs[QF_QUANT_MAX_INPUTS];
    qz_first_samples(data, n, views, ptrs);
    qf_plan_observer ref_obs = {.wants = qz_ref_wants, .observe = qz_ref_observe, .ud = &r};
    qf_batcher *rb = NULL, *qb = NULL;
    if (st == QF_OK)
        st = qf_batcher_open(&rb, ref, ptrs, ndata,
                             &(qf_batch_options){.observer = &ref_obs, .widen = true});
    if (st == QF_OK)
        st = qf_batcher_open(&qb, q, ptrs, ndata,
                             &(qf_batch_options){.hook = qz_q_hook, .hook_ud = &r, .widen = true});
    /* A fixed batch size runs that size unless both models may grow to
     * `batch` (qf_batch_widen); then both run it. */
    if (st == QF_OK) batch = qf_batcher_rows(rb, batch);
    if (st == QF_OK) batch = qf_batcher_rows(qb, batch);
    const void *rows[QF_QUANT_MAX_INPUTS];
    for (int64_t first = 0; first < n && st == QF_OK; first += batch) {
        int64_t count_b = n - first < batch ? n - first : batch;
        st = data->read(data, first, count_b, rows);
        for (int k = 0; k < r.npairs; k++) r.pairs[k].have = false;
        if (st == QF_OK) st = qf_batcher_run(rb, rows, count_b);
        r.local_pass = false;
        if (st == QF_OK) st = qf_batcher_run(qb, rows, count_b);
        r.rows = rows;
        r.count = count_b;
        r.local_pass = true;
        if (st == QF_OK && local) st = qf_batcher_run(qb, rows, count_b);
        r.local_pass = false;
    }
    qf_status cst = qf_batcher_close(rb);
    if (st == QF_OK) st = cst;
    cst = qf_batcher_close(qb);
    if (st == QF_OK) st = cst;
    qf_free(r.part);
    for (int k = 0; k < r.npairs; k++) {
        qf_free(r.pairs[k].buf);
        if (r.res) {
            qf_quant_sqnr *s = &r.res[k];
            s->sqnr_db = s->noise > 0.0 ? 10.0 * log10(s->signal / s->noise) : INFINITY;
            s->local_db = !local ? NAN : s->local_noise > 0.0 ? 10.0 * log10(s->signal / s->local_noise) : INFINITY;
        }
    }
    qf_free(r.pairs);
    qf_free(r.by_ref);
    qf_free(r.by_q);
    qf_free(r.by_qin);
    if (st != QF_OK) {
        qf_quant_sqnr_free(r.res, r.npairs);
        return st;
    }
    *out = r.res;
    *count = r.npairs;
    return QF_OK;
}
