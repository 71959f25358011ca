/* The quantize report (qfold/quant.h, qf_quantize_model_report_json): the
 * JSON text `qfold quantize --report` writes, built from the recipe's
 * result, so that a program (the Python package) gets the same report from
 * the library. */
#include <math.h>

#include "core/strbuf.h"
#include "qfold/pass.h"
#include "qfold/quant.h"

static const char *qf_qr_kind(qf_qspec_kind k)
{
    switch (k) {
    case QF_QSPEC_OBSERVE: return "activation";
    case QF_QSPEC_SHARE: return "shared";
    case QF_QSPEC_FIXED: return "fixed";
    case QF_QSPEC_WEIGHT: return "weight";
    case QF_QSPEC_BIAS: return "bias";
    case QF_QSPEC_FLOAT: break;
    }
    return "float";
}

static void qf_qr_num(qf_strbuf *b, double x)
{
    if (isfinite(x)) qf_strbuf_printf(b, "%.9g", x);
    else qf_strbuf_puts(b, "null");
}

static void qf_qr_string_or_null(qf_strbuf *b, const char *s)
{
    if (s) qf_strbuf_json_string(b, s);
    else qf_strbuf_puts(b, "null");
}

static void qf_qr_strings(qf_strbuf *b, const char *const *s, int n)
{
    qf_strbuf_puts(b, "[");
    for (int i = 0; i < n; i++) {
        qf_strbuf_puts(b, i ? ", " : "");
        qf_qr_string_or_null(b, s[i]);
    }
    qf_strbuf_puts(b, "]");
}

static void qf_qr_tensor(qf_strbuf *b, const qf_quant_tensor *t)
{
    qf_strbuf_json_string(b, t->name);
    qf_strbuf_printf(b, ", \"kind\": \"%s\", \"scale\": ", qf_qr_kind(t->kind));
    if (t->nch == 1) {
        qf_qr_num(b, t->scale[0]);
    } else {
        qf_strbuf_puts(b, "[");
        for (int k = 0; k < t->nch; k++) {
            qf_strbuf_puts(b, k ? ", " : "");
            qf_qr_num(b, t->scale[k]);
        }
        qf_strbuf_puts(b, "]");
    }
    qf_strbuf_printf(b, ", \"zero_point\": %d", (int)t->zero_point);
    if (t->kind == QF_QSPEC_OBSERVE || t->kind == QF_QSPEC_SHARE) {
        qf_strbuf_puts(b, ", \"range\": [");
        qf_qr_num(b, t->min);
        qf_strbuf_puts(b, ", ");
        qf_qr_num(b, t->max);
        qf_strbuf_puts(b, "]");
    }
    if (t->shares) {
        qf_strbuf_puts(b, ", \"shares\": ");
        qf_strbuf_json_string(b, t->shares);
    }
    if (t->node) {
        qf_strbuf_puts(b, ", \"node\": ");
        qf_strbuf_json_string(b, t->node);
    }
    if (t->kind == QF_QSPEC_WEIGHT) qf_strbuf_printf(b, ", \"zero_channels\": %d", t->zero_channels);
}

/* The quantization members of the report (after the passes' members). */
/* --max-drop: the float top-1, the target, every trial and which was kept. */
static void qf_qr_target(qf_strbuf *b, const qf_quant_target_result *t)
{
    qf_strbuf_puts(b, ",\n  \"accuracy_target\": {\"samples\": ");
    qf_strbuf_printf(b, "%lld, \"float_top1\": ", (long long)t->samples);
    qf_qr_num(b, t->float_top1);
    qf_strbuf_puts(b, ", \"max_drop\": ");
    qf_qr_num(b, t->max_drop);
    qf_strbuf_printf(b, ", \"met\": %s, \"best\": %d, \"excluded\": ", t->met ? "true" : "false", t->best);
    qf_qr_strings(b, (const char *const *)t->exclude, t->nexclude);
    qf_strbuf_puts(b, ", \"trials\": [");
    for (int i = 0; i < t->ntrials; i++) {
        const qf_quant_target_trial *x = &t->trials[i];
        qf_strbuf_puts(b, i ? ",\n    {\"what\": " : "\n    {\"what\": ");
        qf_strbuf_json_string(b, x->what);
        qf_strbuf_puts(b, ", \"top1\": ");
        qf_qr_num(b, x->top1);
        qf_strbuf_puts(b, ", \"drop\": ");
        qf_qr_num(b, x->drop);
        qf_strbuf_printf(b, ", \"kept\": %s, \"skipped\": ", x->kept ? "true" : "false");
        qf_qr_string_or_null(b, x->skipped);
        qf_strbuf_puts(b, "}");
    }
    qf_strbuf_puts(b, "]}");
}

static void qf_qr_members(const qf_quantize_model_result *m, const qf_quant_profile *p,
                          const qf_quantize_report_info *info, qf_strbuf *b)
{
    const qf_quantize_result *r = &m->quant;
    qf_strbuf_puts(b, "\"input\": ");
    qf_qr_string_or_null(b, info->input);
    qf_strbuf_puts(b, ",\n  \"output\": ");
    qf_qr_string_or_null(b, info->output);
    qf_strbuf_puts(b, ",\n  \"target\": ");
    qf_strbuf_json_string(b, p->name);
    qf_strbuf_puts(b, ",\n  \"set\": ");
    qf_qr_strings(b, info->sets, info->nsets);
    qf_strbuf_printf(b, ",\n  \"calibration\": {\"samples\": %lld, \"batch\": %lld, \"batch_note\": ",
                     (long long)r->samples, (long long)r->batch);
    qf_qr_string_or_null(b, r->batch_note);
    qf_strbuf_puts(b, ", \"files\": ");
    qf_qr_strings(b, info->files, info->nfiles);
    qf_strbuf_printf(b, "},\n  \"counts\": {\"activations\": %d, \"weights\": %d, \"biases\": %d, "
                        "\"zero_weights\": %d, \"left_float\": %d},\n  \"tensors\": [",
                     r->stats.activations, r->stats.weights, r->stats.biases, r->stats.zero_weights, r->nleft_float);
    for (int i = 0; i < r->ntensors; i++) {
        qf_strbuf_puts(b, i ? ",\n    {\"name\": " : "\n    {\"name\": ");
        qf_qr_tensor(b, &r->tensors[i]);
        qf_strbuf_puts(b, "}");
    }
    qf_strbuf_puts(b, "],\n  \"equalize\": ");
    if (r->eq_trial) {
        qf_strbuf_printf(b, "{\"kept\": \"%s\", \"output_sqnr_db\": {", qf_quant_eq_rule_name(r->eq_rule));
        const char *sep = "";
        for (int k = QF_QEQ_OFF; k <= QF_QEQ_ALL; k++) {
            if (!r->eq_tried[k]) continue;
            qf_strbuf_printf(b, "%s\"%s\": ", sep, qf_quant_eq_rule_name((qf_qequalize)k));
            qf_qr_num(b, r->eq_sqnr[k]);
            sep = ", ";
        }
        /* A rule measured higher than the one kept: refused, below its
         * margin over the model without equalization. */
        const qf_qequalize x = qf_quant_eq_refused(r);
        qf_strbuf_puts(b, "}, \"refused\": ");
        if (x != QF_QEQ_OFF) {
            qf_strbuf_printf(b, "{\"rule\": \"%s\", \"over_without_db\": ", qf_quant_eq_rule_name(x));
            qf_qr_num(b, r->eq_sqnr[x] - r->eq_sqnr[QF_QEQ_OFF]);
            qf_strbuf_printf(b, ", \"margin_db\": %g}}", qf_quant_eq_margin(x));
        } else {
            qf_strbuf_puts(b, "null}");
        }
    } else {
        qf_strbuf_puts(b, "null");
    }
    qf_strbuf_puts(b, ",\n  \"bias_correction\": ");
    if (r->bc_rule != QF_QBIAS_OFF) {
        qf_strbuf_printf(b,
                         "{\"rule\": \"%s\", \"form\": \"%s\", \"kept\": %s, \"layers\": %d, \"biases_added\": %d, "
                         "\"layers_skipped\": %d, \"passes\": %d, \"samples\": %lld, \"max_abs_mean_error\": ",
                         qf_quant_bc_rule_name(r->bc_rule), qf_quant_bc_rule_name(r->bc_form),
                         r->bc_kept ? "true" : "false", r->bc.layers, r->bc.added, r->bc.skipped, r->bc.passes,
                         (long long)r->bc.samples);
        qf_qr_num(b, r->bc.max_abs_error);
        qf_strbuf_puts(b, ", \"output_sqnr_db\": {\"without\": ");
        qf_qr_num(b, r->bc_sqnr_before);
        qf_strbuf_puts(b, ", \"with\": ");
        qf_qr_num(b, r->bc_sqnr_after);
        qf_strbuf_puts(b, "}, \"other\": ");
        /* auto: the form not chosen (null: not tried) */
        if (r->bc_rule == QF_QBIAS_AUTO && !isnan(r->bc_alt_sqnr)) {
            qf_strbuf_printf(b, "{\"form\": \"%s\", \"layers\": %d, \"output_sqnr_db\": ",
                             qf_quant_bc_rule_name(r->bc_form == QF_QBIAS_EMPIRICAL ? QF_QBIAS_ANALYTICAL
                                                                                    : QF_QBIAS_EMPIRICAL),
                             r->bc_alt.layers);
            qf_qr_num(b, r->bc_alt_sqnr);
            qf_strbuf_puts(b, "}");
        } else {
            qf_strbuf_puts(b, "null");
        }
        qf_strbuf_printf(b, ", \"ms\": %.1f}", r->bc_ms);
    } else {
        qf_strbuf_puts(b, "null");
    }
    qf_strbuf_printf(b, ",\n  \"weight_rounding\": \"%s\", \"adaround\": ", qf_quant_rounding_name(p->weight_rounding));
    if (p->weight_rounding == QF_QROUND_ADAROUND) {
        qf_strbuf_printf(b, "{\"iterations\": %d, \"reg\": %.9g, \"seed\": %llu, \"layers\": [",
                         p->adaround_iters, (double)p->adaround_reg, (unsigned long long)r->adaround_seed);
        for (int i = 0; i < r->nadaround; i++) {
            const qf_quant_adaround_layer *l = &r->adaround[i];
            qf_strbuf_puts(b, i ? ",\n    {\"node\": " : "\n    {\"node\": ");
            qf_strbuf_json_string(b, l->node);
            qf_strbuf_puts(b, ", \"weight\": ");
            if (l->weight) qf_strbuf_json_string(b, l->weight);
            else qf_strbuf_puts(b, "null");
            if (l->reason) {
                qf_strbuf_puts(b, ", \"skipped\": ");
                qf_strbuf_json_string(b, l->reason);
            } else {
                qf_strbuf_printf(b, ", \"iterations\": %d, \"samples\": %lld, \"weights\": %lld, \"changed\": %lld, "
                                    "\"error_nearest\": ",
                                 l->iters, (long long)l->samples, (long long)l->weights, (long long)l->changed);
                qf_qr_num(b, l->err_nearest);
                qf_strbuf_puts(b, ", \"error_adaround\": ");
                qf_qr_num(b, l->err_adaround);
                qf_strbuf_printf(b, ", \"kept\": %s, \"ms\": %.1f", l->kept ? "true" : "false", l->ms);
            }
            qf_strbuf_puts(b, "}");
        }
        qf_strbuf_puts(b, "]}");
    } else {
        qf_strbuf_puts(b, "null");
    }
    qf_strbuf_puts(b, ",\n  \"left_float\": [");
    for (int i = 0; i < r->nleft_float; i++) {
        qf_strbuf_puts(b, i ? ", " : "");
        qf_strbuf_puts(b, "{\"node\": ");
        qf_strbuf_json_string(b, r->left_float[i].name);
        qf_strbuf_puts(b, ", \"op\": ");
        qf_strbuf_json_string(b, r->left_float[i].op);
        qf_strbuf_puts(b, ", \"reason\": ");
        qf_strbuf_json_string(b, r->left_float[i].reason);
        qf_strbuf_puts(b, "}");
    }
    qf_strbuf_puts(b, "]");
    /* The quantizer's own pipelines, as the passes' report is (the top level
     * of the report is the ptq pipeline's). */
    const qf_pass_report *reps[2] = {r->prepare, r->convert};
    const char *names[2] = {"quantize_prepare", "quantize_convert"};
    for (int k = 0; k < 2; k++) {
        char *text = NULL;
        size_t len = 0;
        qf_strbuf_printf(b, ",\n  \"%s\": ", names[k]);
        if (reps[k] && qf_pass_report_json(reps[k], NULL, &text, &len) == QF_OK) qf_strbuf_append(b, text, len);
        else qf_strbuf_puts(b, "null");
        qf_free(text);
    }
    qf_strbuf_puts(b, ",\n  \"sqnr_db\": [");
    for (int i = 0; i < m->nsqnr; i++) {
        qf_strbuf_puts(b, i ? ",\n    {\"value\": " : "\n    {\"value\": ");
        qf_strbuf_json_string(b, m->sqnr[i].name);
        qf_strbuf_puts(b, ", \"db\": ");
        qf_qr_num(b, m->sqnr[i].sqnr_db);
        qf_strbuf_puts(b, ", \"local_db\": ");
        qf_qr_num(b, m->sqnr[i].local_db);
        qf_strbuf_puts(b, "}");
    }
    qf_strbuf_puts(b, "],\n  \"worst_local_sqnr\": [");
    for (int k = 0; k < m->nworst_local; k++) {
        qf_strbuf_puts(b, k ? ", " : "");
        qf_strbuf_json_string(b, m->sqnr[m->worst_local[k]].name);
    }
    qf_strbuf_puts(b, "]");
    if (info->target) qf_qr_target(b, info->target);
}

qf_status qf_quantize_model_report_json(const qf_quantize_model_result *m, const qf_quant_profile *p,
                                        const qf_quantize_report_info *info, char **json, size_t *len)
{
    *json = NULL;
    if (len) *len = 0;
    static const qf_quantize_report_info none = {0};
    qf_strbuf extra = {0};
    qf_qr_members(m, p, info ? info : &none, &extra);
    size_t n = 0;
    qf_status st = extra.oom ? qf_error(QF_ERR_NOMEM, "out of memory writing the quantize report")
                             : qf_pass_report_json(m->passes, extra.p, json, &n);
    if (len) *len = n;
    qf_strbuf_free(&extra);
    return st;
}
