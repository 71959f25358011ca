/* The quantize recipe (qfold/quant.h, qf_quantize_model): the steps of
 * `qfold quantize` between reading the files and writing them, so that a
 * program gets the same model and the same figures from one call. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "qfold/pass.h"
#include "qfold/quant.h"

bool qf_graph_is_quantized(const qf_graph *g)
{
    qf_graph_for_each_node(g,
                           n) if (n->op == QF_OP_QUANTIZE || n->op == QF_OP_DEQUANTIZE) return true;
    return false;
}

qf_status qf_quantize_model_check(const qf_graph *g, const char *name)
{
    if (qf_graph_is_quantized(g))
        return qf_error(
            QF_ERR_INVALID,
            "'%s' is already quantized (it has QuantizeLinear / DequantizeLinear nodes)",
            name ? name : "the model");
    return QF_OK;
}

/* SQNR order: worst first (NaN / Inf last). */
static int qf_recipe_by_sqnr(const void *a, const void *b)
{
    double x = ((const qf_quant_sqnr *)a)->sqnr_db, y = ((const qf_quant_sqnr *)b)->sqnr_db;
    return (x > y) - (x < y);
}

/* out->worst_local: the three lowest finite local SQNRs (an op that only
 * moves int8 values, or a float one, adds no error of its own: +inf). */
static void qf_recipe_worst_local(qf_quantize_model_result *out)
{
    out->nworst_local = 0;
    for (int k = 0; k < 3; k++) {
        int w = -1;
        for (int i = 0; i < out->nsqnr; i++) {
            bool taken = false;
            for (int j = 0; j < k; j++) taken |= out->worst_local[j] == i;
            if (taken || !isfinite(out->sqnr[i].local_db)) continue;
            if (w < 0 || out->sqnr[i].local_db < out->sqnr[w].local_db) w = i;
        }
        if (w < 0) break;
        out->worst_local[out->nworst_local++] = w;
    }
}

/* The excluded nodes that the ptq passes left (names / from compacted in
 * place, *count updated): an entry all of whose nodes the passes folded
 * into others (a BatchNormalization) is an error, as excluding it would
 * keep nothing in float. */
static qf_status qf_recipe_exclude_folded(const qf_graph *g, const char *const *entries, int nentries,
                                          char **names, int *from, int *count)
{
    for (int e = 0; e < nentries; e++) {
        bool left = false;
        const char *gone = NULL;
        for (int i = 0; i < *count; i++) {
            if (from[i] != e) continue;
            if (qf_graph_find_node(g, names[i])) left = true;
            else if (!gone) gone = names[i];
        }
        if (!left && gone)
            return qf_error(QF_ERR_INVALID,
                            "exclude: '%s': node '%s' is folded into another node by the ptq passes before "
                            "quantization (exclude the node it was folded into)",
                            entries[e], gone);
    }
    int k = 0;
    for (int i = 0; i < *count; i++) {
        if (!qf_graph_find_node(g, names[i])) {
            qf_free(names[i]);
            continue;
        }
        names[k] = names[i];
        from[k++] = from[i];
    }
    *count = k;
    return QF_OK;
}

qf_status qf_quantize_model(qf_graph *g, const qf_data_source *data,
                            const qf_quantize_model_options *opt, qf_quantize_model_result *out)
{
    *out = (qf_quantize_model_result){0};
    qf_quantize_model_options o = opt ? *opt : (qf_quantize_model_options){0};
    QF_TRY(qf_quantize_model_check(g, o.name));
    /* The float model the SQNR compares against: g as given, folded the
     * same way (a copy: the passes and the quantizer rewrite g). */
    /* Every step's time goes to one of the phases (the copy to the SQNR's,
     * the shape check after quantizing to the conversion's), so that the
     * phases add up to the whole. */
    double tc = qf_clock_seconds();
    qf_graph *ref = NULL;
    if (o.sqnr_samples >= 0) QF_TRY(qf_graph_clone(g, &ref));
    /* --exclude: op types as the model was given (canonicalize makes a
     * Gemm `linear`), node names as the quantizer will see them. */
    char **ex = NULL;
    int *ex_from = NULL, nex = 0;
    qf_status st = qf_quant_exclude_resolve(g, o.quantize.exclude, o.quantize.nexclude, o.name, &ex, &ex_from, &nex);
    /* The data-free bias correction reads the BatchNorms the fold consumes. */
    const qf_quant_profile *prof = o.quantize.profile ? o.quantize.profile : qf_quant_profile_find("neutron");
    qf_quant_bn_stats *bn = NULL;
    if (st == QF_OK && !o.quantize.bn_stats &&
        (prof->bias_correction == QF_QBIAS_ANALYTICAL || prof->bias_correction == QF_QBIAS_AUTO)) {
        st = qf_quant_bn_stats_collect(g, &bn);
        if (st == QF_OK) o.quantize.bn_stats = bn;
    }
    double t0 = qf_clock_seconds();
    qf_pass_options po = {.verify = true};
    if (st == QF_OK) st = qf_pipeline_run(g, "ptq", &po, &out->passes);
    double t1 = qf_clock_seconds();
    out->passes_ms = (t1 - t0) * 1e3;
    if (st == QF_OK)
        st = qf_recipe_exclude_folded(g, o.quantize.exclude, o.quantize.nexclude, ex, ex_from, &nex);
    qf_quantize_options qo = o.quantize;
    qo.exclude = (const char *const *)ex;
    qo.nexclude = nex;
    if (st == QF_OK) st = qf_quantize(g, data, &qo, &out->quant);
    qf_quant_exclude_free(ex, ex_from, nex);
    double tq = qf_clock_seconds();
    if (st == QF_OK) st = qf_graph_verify_shapes(g);
    double t2 = qf_clock_seconds();
    out->quant.convert_ms += (t2 - tq) * 1e3;
    if (st == QF_OK && ref) {
        qf_pass_report *r2 = NULL;
        st = qf_pipeline_run(ref, "ptq", NULL, &r2);
        qf_pass_report_free(r2);
        /* Equalized: the inner values compared with the float model
         * equalized the same way (the model as folded differs from it by the
         * equalization's per-channel scales, not by quantization). */
        qf_qequalize eq = out->quant.eq_trial ? out->quant.eq_rule : prof->equalize;
        if (st == QF_OK && (eq == QF_QEQ_PER_TENSOR || eq == QF_QEQ_ALL))
            st = qf_quant_float_as_prepared(ref, prof, eq);
        int64_t want = o.sqnr_samples ? o.sqnr_samples : QF_QUANTIZE_MODEL_SQNR_SAMPLES;
        int64_t n = out->quant.samples < want ? out->quant.samples : want;
        /* The calibration batch, made smaller by qf_quant_measure_sqnr when
         * the float activations it keeps for one batch would exceed
         * QF_QUANT_SQNR_BYTES. */
        int64_t batch = o.quantize.batch ? o.quantize.batch : 32;
        if (st == QF_OK)
            st = qf_quant_measure_sqnr_ex(ref, g, data, batch, n, !o.no_local_sqnr, &out->sqnr, &out->nsqnr);
        if (st == QF_OK) qsort(out->sqnr, (size_t)out->nsqnr, sizeof *out->sqnr, qf_recipe_by_sqnr);
        if (st == QF_OK) qf_recipe_worst_local(out);
        out->sqnr_ms = (qf_clock_seconds() - t2 + (t0 - tc)) * 1e3;
    }
    qf_graph_free(ref);
    qf_quant_bn_stats_free(bn);
    return st;
}

void qf_quantize_model_result_free(qf_quantize_model_result *r)
{
    if (!r) return;
    qf_quant_sqnr_free(r->sqnr, r->nsqnr);
    qf_quantize_result_free(&r->quant);
    qf_pass_report_free(r->passes);
    *r = (qf_quantize_model_result){0};
}
