/* Optimizers (qfold/train.h): SGD with momentum, dampening, Nesterov and L2
 * weight decay; Adam (L2 weight decay added to the gradient) and AdamW
 * (decoupled weight decay); clipping by the global gradient norm.
 *
 * The arithmetic is PyTorch 1.13's single-tensor implementation
 * (torch/optim/sgd.py, adam.py, adamw.py: _single_tensor_*), in float32 per
 * element with the scalar coefficients formed in double and rounded to float
 * once, as ATen's kernels receive them, so that a run can be compared with
 * PyTorch's step by step:
 *
 *   SGD    g = grad + wd * p
 *          buf = g at a parameter's first step, else buf * momentum + (1 - dampening) * g
 *          d = nesterov ? g + momentum * buf : buf        (d = g without momentum)
 *          p = p - lr * d
 *   Adam   g = grad + wd * p;                            (AdamW: p = p * (1 - lr * wd), g = grad)
 *          t = the parameter's step count (1-based)
 *          m = m * beta1 + (1 - beta1) * g
 *          v = v * beta2 + (1 - beta2) * g * g
 *          p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 *
 * Each parameter keeps its own step count and momentum buffer (a frozen
 * parameter, grads[i] NULL, is not stepped), as torch's per-parameter state.
 * Optimizer steps are memory-bound loops over the parameters: plain loops.
 */
#include <math.h>
#include <string.h>

#include "qfold/train.h"

struct qf_optimizer {
    qf_optim_config c;
    int n;
    qf_tensor **params;
    float **m, **v;    /* SGD: m = the momentum buffer; Adam(W): the two moments */
    int64_t *steps;    /* per parameter: steps taken */
};

static const char *const optim_names[] = {"sgd", "adam", "adamw"};

const char *qf_optim_name(qf_optim_kind k)
{
    return (unsigned)k < sizeof optim_names / sizeof *optim_names ? optim_names[k] : "?";
}

qf_status qf_optim_parse(const char *s, qf_optim_kind *out)
{
    for (int k = 0; k < (int)(sizeof optim_names / sizeof *optim_names); k++)
        if (s && !strcmp(s, optim_names[k])) {
            *out = (qf_optim_kind)k;
            return QF_OK;
        }
    return qf_error(QF_ERR_INVALID, "unknown optimizer '%s' (expected sgd, adam or adamw)", s ? s : "");
}

void qf_optim_free(qf_optimizer *o)
{
    if (!o) return;
    for (int i = 0; i < o->n; i++) {
        if (o->m) qf_free(o->m[i]);
        if (o->v) qf_free(o->v[i]);
    }
    qf_free(o->m);
    qf_free(o->v);
    qf_free(o->steps);
    qf_free(o->params);
    qf_free(o);
}

/* The config with Adam's defaults filled in, or an error naming the bad field. */
static qf_status optim_check(const qf_optim_config *in, qf_optim_config *c)
{
    *c = *in;
    if ((unsigned)c->kind > QF_OPTIM_ADAMW) return qf_error(QF_ERR_INVALID, "optimizer kind %d unknown", (int)c->kind);
    const char *name = qf_optim_name(c->kind);
    if (!(c->lr > 0.0) || !isfinite(c->lr))
        return qf_error(QF_ERR_INVALID, "%s: learning rate %g must be > 0", name, c->lr);
    if (!(c->weight_decay >= 0.0) || !isfinite(c->weight_decay))
        return qf_error(QF_ERR_INVALID, "%s: weight decay %g must be >= 0", name, c->weight_decay);
    if (c->kind == QF_OPTIM_SGD) {
        if (!(c->momentum >= 0.0) || !isfinite(c->momentum))
            return qf_error(QF_ERR_INVALID, "sgd: momentum %g must be >= 0", c->momentum);
        if (!isfinite(c->dampening)) return qf_error(QF_ERR_INVALID, "sgd: dampening %g is not finite", c->dampening);
        if (c->nesterov && (c->momentum <= 0.0 || c->dampening != 0.0))
            return qf_error(QF_ERR_INVALID, "sgd: Nesterov momentum needs momentum > 0 and dampening 0 (momentum %g, dampening %g)",
                            c->momentum, c->dampening);
        return QF_OK;
    }
    if (c->beta1 == 0.0 && c->beta2 == 0.0) {
        c->beta1 = 0.9;
        c->beta2 = 0.999;
    }
    if (c->eps == 0.0) c->eps = 1e-8;
    if (!(c->beta1 >= 0.0 && c->beta1 < 1.0))
        return qf_error(QF_ERR_INVALID, "%s: beta1 %g outside [0, 1)", name, c->beta1);
    if (!(c->beta2 >= 0.0 && c->beta2 < 1.0))
        return qf_error(QF_ERR_INVALID, "%s: beta2 %g outside [0, 1)", name, c->beta2);
    if (!(c->eps > 0.0) || !isfinite(c->eps)) return qf_error(QF_ERR_INVALID, "%s: eps %g must be > 0", name, c->eps);
    return QF_OK;
}

qf_status qf_optim_init(qf_optimizer **out, const qf_optim_config *cfg, int n, qf_tensor *const *params)
{
    *out = NULL;
    qf_optim_config c;
    QF_TRY(optim_check(cfg, &c));
    if (n < 0 || (n > 0 && !params)) return qf_error(QF_ERR_INVALID, "%s: %d parameters", qf_optim_name(c.kind), n);
    for (int i = 0; i < n; i++)
        if (!params[i] || params[i]->dtype != QF_DTYPE_F32 || (!params[i]->data && qf_tensor_numel(params[i]) > 0))
            return qf_error(QF_ERR_INVALID, "%s: parameter %d is not a float32 tensor with data", qf_optim_name(c.kind),
                            i);
    qf_optimizer *o = qf_calloc(1, sizeof *o);
    if (!o) return QF_ERR_NOMEM;
    o->c = c;
    o->n = n;
    const size_t cnt = (size_t)(n ? n : 1);
    o->params = qf_calloc(cnt, sizeof *o->params);
    o->steps = qf_calloc(cnt, sizeof *o->steps);
    const bool first = c.kind != QF_OPTIM_SGD || c.momentum != 0.0, second = c.kind != QF_OPTIM_SGD;
    if (first) o->m = qf_calloc(cnt, sizeof *o->m);
    if (second) o->v = qf_calloc(cnt, sizeof *o->v);
    if (!o->params || !o->steps || (first && !o->m) || (second && !o->v)) {
        qf_optim_free(o);
        return QF_ERR_NOMEM;
    }
    for (int i = 0; i < n; i++) {
        o->params[i] = params[i];
        size_t k = (size_t)qf_tensor_numel(params[i]);
        if (first && !(o->m[i] = qf_calloc(k ? k : 1, sizeof(float)))) {
            qf_optim_free(o);
            return QF_ERR_NOMEM;
        }
        if (second && !(o->v[i] = qf_calloc(k ? k : 1, sizeof(float)))) {
            qf_optim_free(o);
            return QF_ERR_NOMEM;
        }
    }
    *out = o;
    return QF_OK;
}

static void sgd_step(const qf_optim_config *c, float *p, const float *g, float *buf, int64_t k, bool first, double lr)
{
    const float wd = (float)c->weight_decay, mom = (float)c->momentum, damp = (float)(1.0 - c->dampening);
    const float nlr = (float)-lr;
    for (int64_t i = 0; i < k; i++) {
        float d = g[i];
        if (wd != 0.0f) d = d + wd * p[i];
        if (buf) {
            float b = first ? d : buf[i] * mom + damp * d;
            buf[i] = b;
            d = c->nesterov ? d + mom * b : b;
        }
        p[i] = p[i] + nlr * d;
    }
}

static void adam_step(const qf_optim_config *c, float *p, const float *g, float *m, float *v, int64_t k, int64_t t,
                      double lr)
{
    const bool decoupled = c->kind == QF_OPTIM_ADAMW;
    const float b1 = (float)c->beta1, b2 = (float)c->beta2;
    const float a1 = (float)(1.0 - c->beta1), a2 = (float)(1.0 - c->beta2);
    /* Python floats in torch: bias corrections and the step size in double. */
    const double bc1 = 1.0 - pow(c->beta1, (double)t), bc2 = 1.0 - pow(c->beta2, (double)t);
    const float nstep = (float)-(lr / bc1), bc2s = (float)sqrt(bc2), eps = (float)c->eps;
    const float wd = decoupled ? 0.0f : (float)c->weight_decay;
    const float shrink = (float)(1.0 - lr * c->weight_decay);
    for (int64_t i = 0; i < k; i++) {
        float pi = p[i], gi = g[i];
        if (decoupled) pi = pi * shrink;
        else if (wd != 0.0f) gi = gi + wd * pi;
        const float mi = m[i] * b1 + a1 * gi;
        const float vi = v[i] * b2 + a2 * (gi * gi);
        m[i] = mi;
        v[i] = vi;
        const float denom = sqrtf(vi) / bc2s + eps;
        p[i] = pi + nstep * (mi / denom);
    }
}

qf_status qf_optim_step(qf_optimizer *o, const qf_tensor *const *grads, double lr)
{
    const char *name = qf_optim_name(o->c.kind);
    if (!(lr >= 0.0) || !isfinite(lr)) return qf_error(QF_ERR_INVALID, "%s: learning rate %g for this step", name, lr);
    for (int i = 0; i < o->n; i++) {
        const qf_tensor *g = grads[i];
        if (!g) continue;
        if (g->dtype != QF_DTYPE_F32 || qf_tensor_numel(g) != qf_tensor_numel(o->params[i])) {
            char a[128], b[128];
            return qf_error(QF_ERR_SHAPE, "%s: gradient %d is %s %s, its parameter float32 %s", name, i,
                            qf_dtype_name(g->dtype), qf_shape_str(g->ndim, g->dims, a, sizeof a),
                            qf_shape_str(o->params[i]->ndim, o->params[i]->dims, b, sizeof b));
        }
    }
    for (int i = 0; i < o->n; i++) {
        if (!grads[i]) continue;
        const int64_t k = qf_tensor_numel(o->params[i]);
        const int64_t t = ++o->steps[i];
        float *p = o->params[i]->data;
        const float *g = grads[i]->data;
        if (o->c.kind == QF_OPTIM_SGD) sgd_step(&o->c, p, g, o->m ? o->m[i] : NULL, k, t == 1, lr);
        else adam_step(&o->c, p, g, o->m[i], o->v[i], k, t, lr);
    }
    return QF_OK;
}

double qf_clip_grad_norm(qf_tensor *const *grads, int n, double max_norm)
{
    double ss = 0.0;
    for (int i = 0; i < n; i++) {
        if (!grads[i]) continue;
        const float *g = grads[i]->data;
        for (int64_t j = 0, k = qf_tensor_numel(grads[i]); j < k; j++) ss += (double)g[j] * g[j];
    }
    const double norm = sqrt(ss);
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0) {
        const float cf = (float)coef;
        for (int i = 0; i < n; i++) {
            if (!grads[i]) continue;
            float *g = grads[i]->data;
            for (int64_t j = 0, k = qf_tensor_numel(grads[i]); j < k; j++) g[j] *= cf;
        }
    }
    return norm;
}
