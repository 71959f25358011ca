/* BatchNorm fold math shared by the BN passes: guards on the BN node, the
 * per-channel scale and shift in double with their numeric validation, and
 * the diagnostics JSON. The generic rewrite helpers are in rewrite.c. */
#include "bn_math.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/strbuf.h"
#include "rewrite.h"

static const char *const qf_bn_param_names[4] = {"scale (gamma)", "bias (beta)", "mean", "var"};

bool qf_bn_is_training(const qf_graph *g, const qf_node *bn)
{
    if (qf_node_attr_int(bn, "training_mode", 0) != 0) return true;
    /* Before opset 14 the mode is given by the number of outputs: the
     * running-statistics outputs exist only in training mode. */
    if (g->opset < 14 && bn->noutputs > 1) return true;
    for (int i = 1; i < bn->noutputs; i++)
        if (bn->outputs[i] && (bn->outputs[i]->nuses || bn->outputs[i]->is_output)) return true;
    return false;
}

bool qf_bn_check(const qf_graph *g, const qf_node *bn, char *buf, size_t size)
{
    if (qf_bn_is_training(g, bn)) {
        snprintf(buf, size, "BN is in training mode");
        return true;
    }
    if (bn->ninputs < 5) {
        snprintf(buf, size, "BN has %d inputs, expected 5", bn->ninputs);
        return true;
    }
    int64_t c = -1;
    for (int i = 0; i < 4; i++) {
        const qf_value *p = bn->inputs[QF_BN_IN_SCALE + i];
        if (qf_value_has_default(p)) {
            /* ONNX Runtime does not fold such an input either. */
            snprintf(buf, size,
                     "BN %s '%s' is a graph input with a default (an initializer listed as an "
                     "input: overridable, not a constant)",
                     qf_bn_param_names[i], p->name);
            return true;
        }
        if (!p || !qf_value_is_const(p)) {
            snprintf(buf, size, "BN %s is not a constant", qf_bn_param_names[i]);
            return true;
        }
        if (!qf_dtype_is_float(p->type.dtype)) {
            snprintf(buf, size, "BN %s is %s, expected a float tensor", qf_bn_param_names[i],
                     qf_dtype_name(p->type.dtype));
            return true;
        }
        int64_t n = qf_tensor_numel(&p->type);
        if (p->type.ndim != 1 || (c >= 0 && n != c)) {
            char sh[96];
            snprintf(buf, size, "BN %s has shape %s, expected [%" PRId64 "]", qf_bn_param_names[i],
                     qf_shape_str(p->type.ndim, p->type.dims, sh, sizeof sh), c >= 0 ? c : n);
            return true;
        }
        c = n;
    }
    const qf_value *x = bn->inputs[QF_BN_IN_X];
    if (x && x->type.ndim >= 2 && x->type.dims[1] >= 0 && x->type.dims[1] != c) {
        snprintf(buf, size, "channel counts differ: BN has %" PRId64 " parameters, its input has %" PRId64
                 " channels", c, x->type.dims[1]);
        return true;
    }
    return false;
}

void qf_bn_affine_free(qf_bn_affine *a)
{
    qf_free(a->scale);
    qf_free(a->shift);
    qf_free(a->mean);
    qf_free(a->beta);
    qf_free(a->small_var);
    qf_free(a->dead);
    memset(a, 0, sizeof *a);
}

qf_status qf_bn_affine_init(qf_bn_affine *a, const qf_node *bn)
{
    memset(a, 0, sizeof *a);
    for (int i = 0; i < 4; i++) QF_TRY(qf_rewrite_check_finite(bn->inputs[QF_BN_IN_SCALE + i], bn));
    const qf_tensor *gamma = &bn->inputs[QF_BN_IN_SCALE]->type, *beta = &bn->inputs[QF_BN_IN_BIAS]->type;
    const qf_tensor *mean = &bn->inputs[QF_BN_IN_MEAN]->type, *var = &bn->inputs[QF_BN_IN_VAR]->type;
    int64_t c = qf_tensor_numel(gamma);
    size_t n = (size_t)(c > 0 ? c : 1);
    a->channels = c;
    /* epsilon is a float attribute: widen the float ONNX Runtime uses too. */
    a->eps = (double)qf_node_attr_float(bn, "epsilon", 1e-5f);
    a->scale = qf_malloc(n * sizeof *a->scale);
    a->shift = qf_malloc(n * sizeof *a->shift);
    a->mean = qf_malloc(n * sizeof *a->mean);
    a->beta = qf_malloc(n * sizeof *a->beta);
    a->small_var = qf_malloc(n * sizeof *a->small_var);
    a->dead = qf_malloc(n * sizeof *a->dead);
    if (!a->scale || !a->shift || !a->mean || !a->beta || !a->small_var || !a->dead) {
        qf_bn_affine_free(a);
        return QF_ERR_NOMEM;
    }
    for (int64_t k = 0; k < c; k++) {
        double g = qf_tensor_get_f64(gamma, k), v = qf_tensor_get_f64(var, k);
        double den = v + a->eps;
        if (!(den > 0) || !isfinite(den)) {
            qf_status st = qf_error(QF_ERR_NUMERIC,
                                    "node '%s' (BatchNormalization): channel %" PRId64
                                    ": var + epsilon = %g + %g = %g is not positive",
                                    bn->name, k, v, a->eps, den);
            qf_bn_affine_free(a);
            return st;
        }
        double s = g / sqrt(den);
        a->scale[k] = s;
        a->mean[k] = qf_tensor_get_f64(mean, k);
        a->beta[k] = qf_tensor_get_f64(beta, k);
        a->shift[k] = a->beta[k] - a->mean[k] * s;
        if (den < QF_BN_SMALL_VAR) a->small_var[a->nsmall_var++] = k;
        if (g == 0) a->dead[a->ndead++] = k;
    }
    return QF_OK;
}

/* --- diagnostics JSON ------------------------------------------------------ */
static int qf_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* At most this many channel indices are listed; the count is always exact. */
#define QF_BN_DIAG_LIST_MAX 64

static void qf_bn_json_list(qf_strbuf *b, const char *key, const int64_t *idx, int n)
{
    qf_strbuf_printf(b, ",\"%s_count\":%d,\"%s\":[", key, n, key);
    for (int i = 0; i < n && i < QF_BN_DIAG_LIST_MAX; i++)
        qf_strbuf_printf(b, "%s%" PRId64, i ? "," : "", idx[i]);
    qf_strbuf_puts(b, "]");
}

char *qf_bn_diag_json(const qf_bn_affine *a, const double *ranges, int64_t nranges)
{
    qf_strbuf b = {0};
    qf_strbuf_printf(&b, "{\"channels\":%" PRId64 ",\"eps\":%.9g", a->channels, a->eps);
    qf_bn_json_list(&b, "small_var_channels", a->small_var, a->nsmall_var);
    qf_bn_json_list(&b, "dead_channels", a->dead, a->ndead);
    if (ranges && nranges > 0) {
        double *sorted = qf_malloc((size_t)nranges * sizeof *sorted);
        if (!sorted) {
            qf_strbuf_free(&b);
            qf_error(QF_ERR_NOMEM, "out of memory");
            return NULL;
        }
        memcpy(sorted, ranges, (size_t)nranges * sizeof *sorted);
        qsort(sorted, (size_t)nranges, sizeof *sorted, qf_cmp_double);
        double mx = sorted[nranges - 1];
        double med = nranges % 2 ? sorted[nranges / 2]
                                 : 0.5 * (sorted[nranges / 2 - 1] + sorted[nranges / 2]);
        qf_free(sorted);
        qf_strbuf_printf(&b, ",\"weight_range_max\":%.9g,\"weight_range_median\":%.9g", mx, med);
        /* JSON has no Inf: a zero median (mostly dead channels) gives null. */
        if (med > 0)
            qf_strbuf_printf(&b, ",\"weight_range_spread\":%.6g", mx / med);
        else
            qf_strbuf_puts(&b, ",\"weight_range_spread\":null");
    }
    qf_strbuf_puts(&b, "}");
    char *text = qf_strbuf_take(&b, NULL);
    if (!text) qf_error(QF_ERR_NOMEM, "out of memory");
    return text;
}

bool qf_bn_qat_match(const qf_graph *g, qf_node *bn, qf_bn_qat_chain *a, char *why, size_t size)
{
    memset(a, 0, sizeof *a);
    a->bn = bn;
    if (qf_bn_check(g, bn, why, size)) return true;
    qf_value *x = bn->inputs[QF_BN_IN_X];
    qf_node *p = x->producer;
    if (!p || (p->op != QF_OP_CONV && p->op != QF_OP_CONV_TRANSPOSE && p->op != QF_OP_LINEAR))
        return qf_rewrite_why(why, size, "BN input comes from %s, not a conv / conv_transpose / linear",
                              p ? qf_op_name(p->op) : "no node");
    const char *pn = qf_op_name(p->op);
    a->prod = p;
    if (x->is_output) return qf_rewrite_why(why, size, "%s output is a graph output", pn);
    if (x->nuses != 1) return qf_rewrite_why(why, size, "%s output has %d users", pn, x->nuses);
    if (p->ninputs < 2 || !p->inputs[1]) return qf_rewrite_why(why, size, "%s has no weight input", pn);
    a->w = p->inputs[1];
    if (a->w->producer && a->w->producer->op == QF_OP_FAKE_QUANT) {
        a->fq = a->w->producer;
        if (a->w->nuses != 1) return qf_rewrite_why(why, size, "the weight's fake_quant has %d readers", a->w->nuses);
        a->w = a->fq->inputs[0];
    }
    if (!qf_value_is_const(a->w) || a->w->type.dtype != QF_DTYPE_F32)
        return qf_rewrite_why(why, size, "weight '%s' is not a float32 constant", a->w->name);
    if (p->ninputs > 2 && p->inputs[2]) {
        a->b = p->inputs[2];
        if (!qf_value_is_const(a->b) || a->b->type.dtype != QF_DTYPE_F32)
            return qf_rewrite_why(why, size, "bias '%s' is not a float32 constant", a->b->name);
    }
    const qf_tensor *w = &a->w->type;
    a->group = 1;
    if (p->op == QF_OP_CONV_TRANSPOSE) {
        a->axis = 1;
        a->group = qf_node_attr_int(p, "group", 1);
        if (w->ndim < 3 || a->group < 1 || w->dims[0] % a->group)
            return qf_rewrite_why(why, size, "conv_transpose weight %s does not fit group %" PRId64, a->w->name,
                                  a->group);
        a->out_ch = w->dims[1] * a->group;
    } else {
        if (p->op == QF_OP_LINEAR && (x->type.ndim != 2 || w->ndim != 2))
            return qf_rewrite_why(why, size, "linear output is rank %d (BN1d over [N, C] only)", x->type.ndim);
        a->out_ch = w->dims[0];
    }
    const int64_t c = qf_tensor_numel(&bn->inputs[QF_BN_IN_SCALE]->type);
    if (a->out_ch != c)
        return qf_rewrite_why(why, size, "channel counts differ: %s has %" PRId64 ", BN has %" PRId64, pn, a->out_ch,
                              c);
    if (a->b && (a->b->type.ndim != 1 || a->b->type.dims[0] != c))
        return qf_rewrite_why(why, size, "bias '%s' is not [%" PRId64 "]", a->b->name, c);
    return false;
}
