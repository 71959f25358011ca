/* AdaRound: learned up / down rounding of the int8 weights (qfold/quant.h,
 * qf_quant_adaround; Nagel et al. 2020, "Up or Down? Adaptive Rounding for
 * Post-Training Quantization").
 *
 * For every Conv / ConvTranspose / Gemm of the QDQ graph whose weight is an
 * int8 initializer behind a DequantizeLinear, in topological order:
 *
 *   X   the layer's input in the QDQ graph (the DQ output feeding it, the
 *       layers before already AdaRounded) on the first calibration samples;
 *   T   the float model's output of the same layer, after the activation the
 *       annotation fused into it (Relu / relu6 / Clip: the Q follows it),
 *       on the same samples (the float model as calibrated: equalized,
 *       folded, the Neutron-ready float passes done);
 *   h(V) = clip(sigmoid(V) (zeta - gamma) + gamma, 0, 1), zeta 1.1, gamma -0.1;
 *   Ws  = s clip(floor(W / s) + h(V), qmin, qmax)   (per channel or per tensor);
 *   loss = sum_c (act(layer(X, Ws, b)) - T)^2, averaged over the other axes
 *          (AIMET's reconstruction loss) + lambda sum (1 - |2 h(V) - 1|^beta),
 *   the regulariser off for the first 20 % of the iterations, then beta
 *   annealed from 20 to 2 on a cosine (AIMET's schedule); V starts where
 *   h(V) = W / s - floor(W / s) and is trained by Adam (lr 1e-3, torch's
 *   arithmetic) on batches drawn from the samples, shuffled by a seeded
 *   splitmix64; at the end q = floor(W / s) + (h(V) >= 0.5), clipped.
 *
 * The layer (its op, attributes, dequantized bias, the fused activation) and
 * the loss are a small graph of their own: mse_loss on the training engine's
 * backward tape (qf_grad_plan, oneDNN's training convolutions, every core)
 * gives d loss / d Ws; the rest of the chain (clip, rectified sigmoid, the
 * regulariser) is elementwise and written out here. The learned rounding is
 * written only when it reconstructs the layer's output better than nearest
 * rounding on the same samples; the bias (int32 at s_in s_w) is unchanged.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/rand.h"
#include "core/clock.h"
#include "core/parallel.h"
#include "ops/math/quant_math.h"
#include "qfold/quant.h"

#define AR_ZETA       1.1f
#define AR_GAMMA      -0.1f
#define AR_BETA_START 20.0
#define AR_BETA_END   2.0
#define AR_WARM       0.2 /* share of the iterations without the regulariser */
#define AR_LR         1e-3
#define AR_B1         0.9
#define AR_B2         0.999
#define AR_EPS        1e-8

void qf_quant_adaround_free(qf_quant_adaround_layer *l, int n)
{
    for (int i = 0; l && i < n; i++) {
        qf_free(l[i].node);
        qf_free(l[i].weight);
    }
    qf_free(l);
}

/* --- the random batches ------------------------------------------------------------ */

/* --- one value of a graph on the first samples ---------------------------------------- */

typedef struct ar_collect {
    const qf_value *v;
    float *buf; /* n rows of `row` floats, NCHW */
    int64_t n, row, done;
    qf_status st;
} ar_collect;

static bool ar_wants(void *ud, const qf_value *v) { return v == ((const ar_collect *)ud)->v; }

static qf_status ar_observe(void *ud, const qf_value *v, const qf_tensor *t, bool nhwc)
{
    ar_collect *c = ud;
    if (v != c->v || t->dtype != QF_DTYPE_F32) return QF_OK;
    int64_t rows = t->ndim ? t->dims[0] : 1, numel = qf_tensor_numel(t);
    if (rows < 1 || numel != rows * c->row)
        return qf_error(QF_ERR_INTERNAL,
                        "adaround: value '%s' has %lld elements, not %lld rows of %lld", v->name,
                        (long long)numel, (long long)rows, (long long)c->row);
    int64_t take = c->n - c->done < rows ? c->n - c->done : rows;
    if (take <= 0) return QF_OK;
    if (take == rows) {
        qf_exec_copy_nchw(c->buf + c->done * c->row, t, nhwc);
    } else {
        /* a short last batch padded by the batcher: only its real rows */
        float *tmp = qf_malloc(qf_tensor_nbytes(t));
        if (!tmp) return QF_ERR_NOMEM;
        qf_exec_copy_nchw(tmp, t, nhwc);
        memcpy(c->buf + c->done * c->row, tmp, sizeof(float) * (size_t)(take * c->row));
        qf_free(tmp);
    }
    return QF_OK;
}

static qf_status ar_batch(void *ud, int64_t first, int64_t count, const qf_plan *plan)
{
    (void)first;
    (void)plan;
    ar_collect *c = ud;
    c->done += count;
    return QF_OK;
}

/* v's values on the samples of src (n of them) into buf (n * row floats). */
static qf_status ar_collect_value(qf_graph *g, const qf_value *v, const qf_data_source *src,
                                  int64_t n, int64_t row, int64_t batch, float *buf)
{
    ar_collect c = {.v = v, .buf = buf, .n = n, .row = row};
    qf_plan_observer ob = {.wants = ar_wants, .observe = ar_observe, .ud = &c};
    qf_batch_options bo = {
        .batch = batch, .observer = &ob, .on_batch = ar_batch, .ud = &c, .widen = true};
    QF_TRY(qf_run_source(g, src, &bo));
    if (c.done != n)
        return qf_error(QF_ERR_INTERNAL, "adaround: %lld of %lld samples of '%s' seen",
                        (long long)c.done, (long long)n, v->name);
    return QF_OK;
}

/* --- a constant, dequantized --------------------------------------------------------- */

static const qf_value *ar_input(const qf_node *n, int i)
{
    return i < n->ninputs ? n->inputs[i] : NULL;
}

/* v as float32 into *out (owned): a float32 constant, or a DequantizeLinear
 * of an int8 / int32 constant (per tensor, or per channel along its axis). */
static qf_status ar_const_f32(const qf_value *v, qf_tensor *out)
{
    if (qf_value_is_const(v) && v->type.dtype == QF_DTYPE_F32 && v->type.data) {
        QF_TRY(qf_tensor_init(out, QF_DTYPE_F32, v->type.ndim, v->type.dims));
        memcpy(out->data, v->type.data, qf_tensor_nbytes(out));
        return QF_OK;
    }
    const qf_node *dq = v->producer;
    const qf_value *q = dq && dq->op == QF_OP_DEQUANTIZE ? ar_input(dq, 0) : NULL,
                   *s = dq ? ar_input(dq, 1) : NULL, *z = dq ? ar_input(dq, 2) : NULL;
    if (!q || !s || !qf_value_is_const(q) || !qf_value_is_const(s) ||
        (z && !qf_value_is_const(z)) || s->type.dtype != QF_DTYPE_F32 ||
        (q->type.dtype != QF_DTYPE_I8 && q->type.dtype != QF_DTYPE_I32))
        return QF_ERR_UNSUPPORTED;
    int64_t ns = qf_tensor_numel(&s->type), nq = qf_tensor_numel(&q->type);
    int axis = ns > 1 ? (int)qf_node_attr_int(dq, "axis", 1) : -1;
    if (axis < 0 && ns > 1) axis += q->type.ndim;
    if (ns > 1 && (axis < 0 || axis >= q->type.ndim || q->type.dims[axis] != ns))
        return QF_ERR_UNSUPPORTED;
    if (z && qf_tensor_numel(&z->type) != ns) return QF_ERR_UNSUPPORTED;
    int64_t inner = 1;
    for (int d = axis + 1; ns > 1 && d < q->type.ndim; d++) inner *= q->type.dims[d];
    QF_TRY(qf_tensor_init(out, QF_DTYPE_F32, q->type.ndim, q->type.dims));
    const float *ps = s->type.data;
    float *o = out->data;
    for (int64_t k = 0; k < nq; k++) {
        int64_t c = ns > 1 ? (k / inner) % ns : 0;
        int32_t qk = q->type.dtype == QF_DTYPE_I8 ? ((const int8_t *)q->type.data)[k]
                                                  : ((const int32_t *)q->type.data)[k];
        int32_t zk = 0;
        if (z && z->type.dtype == QF_DTYPE_I8)
            zk = ((const int8_t *)z->type.data)[c];
        else if (z && z->type.dtype == QF_DTYPE_I32)
            zk = ((const int32_t *)z->type.data)[c];
        else if (z && z->type.dtype == QF_DTYPE_U8)
            zk = ((const uint8_t *)z->type.data)[c];
        o[k] = qf_dequantize_f32(qk, ps[c], zk);
    }
    return QF_OK;
}

/* --- the layers ----------------------------------------------------------------------------- */

/* One layer AdaRound can take, found in the QDQ graph. */
typedef struct ar_layer {
    qf_node *node;       /* Conv / ConvTranspose / Gemm / linear */
    qf_value *wq;        /* its int8 weight initializer */
    const qf_node *dq;   /* the weight's DequantizeLinear */
    const qf_node *act;  /* the fused activation after it, or NULL */
    const qf_value *out; /* the value the loss compares: node's output or act's */
    const char *why;     /* not taken: why (static) */
} ar_layer;

static bool ar_is_layer(const qf_node *n)
{
    return n->op == QF_OP_CONV || n->op == QF_OP_CONV_TRANSPOSE || n->op == QF_OP_GEMM ||
           n->op == QF_OP_LINEAR;
}

/* The activation the annotation fused after n (the Q follows it). */
static const qf_node *ar_fused_act(const qf_node *n)
{
    const qf_value *y = n->outputs[0];
    if (y->is_output || y->nuses != 1) return NULL;
    const qf_node *a = y->uses[0].node;
    if (a->op == QF_OP_RELU || a->op == QF_OP_RELU6) return a;
    if (a->op == QF_OP_CLIP && y->uses[0].slot == 0) {
        for (int i = 1; i < a->ninputs; i++)
            if (a->inputs[i] && !qf_value_is_const(a->inputs[i])) return NULL;
        return a;
    }
    return NULL;
}

static ar_layer ar_find(qf_node *n)
{
    ar_layer l = {.node = n};
    const qf_value *w = ar_input(n, 1);
    const qf_node *dq = w ? w->producer : NULL;
    qf_value *wq = dq && dq->op == QF_OP_DEQUANTIZE ? dq->inputs[0] : NULL;
    if (!wq || !qf_value_is_const(wq) || wq->type.dtype != QF_DTYPE_I8) {
        l.why = "its weight is not an int8 initializer behind a DequantizeLinear";
        return l;
    }
    if (w->nuses != 1 || wq->nuses != 1 || w->is_output) {
        l.why = "its int8 weight is shared with another node";
        return l;
    }
    const qf_value *z = ar_input(dq, 2);
    if (z && qf_value_is_const(z))
        for (int64_t k = 0; k < qf_tensor_numel(&z->type); k++)
            if (z->type.dtype == QF_DTYPE_I8 && ((const int8_t *)z->type.data)[k] != 0) {
                l.why = "its weight has a zero point other than 0";
                return l;
            }
    if (!ar_input(n, 0) || ar_input(n, 0)->producer == NULL) {
        l.why = "its input is a graph input or a constant";
        return l;
    }
    l.wq = wq;
    l.dq = dq;
    l.act = ar_fused_act(n);
    l.out = l.act ? l.act->outputs[0] : n->outputs[0];
    return l;
}

/* Elements per sample of v (its dims after the first), -1 when unknown. */
static int64_t ar_row(const qf_value *v)
{
    if (v->type.ndim < 1) return -1;
    int64_t r = 1;
    for (int d = 1; d < v->type.ndim; d++) {
        if (v->type.dims[d] <= 0) return -1;
        r *= v->type.dims[d];
    }
    return r;
}

/* --- the small graph: the layer, its activation, the loss -------------------------------- */

typedef struct ar_net {
    qf_graph *g;
    qf_value *w;    /* the parameter: Ws, rewritten before every forward */
    qf_tensor x, t; /* one batch of inputs and targets */
    qf_grad_plan *gp;
} ar_net;

static void ar_net_free(ar_net *m)
{
    qf_grad_plan_free(m->gp);
    qf_graph_free(m->g);
    qf_tensor_free(&m->x);
    qf_tensor_free(&m->t);
    memset(m, 0, sizeof *m);
}

/* A float32 copy of constant v (or of the DequantizeLinear of one) in g. */
static qf_status ar_net_const(qf_graph *g, const char *name, const qf_value *v, qf_value **out)
{
    qf_tensor t;
    qf_status st = ar_const_f32(v, &t);
    if (st == QF_ERR_UNSUPPORTED)
        return qf_error(st, "adaround: '%s' is not a constant it can read", v->name);
    QF_TRY(st);
    *out = qf_graph_add_constant(g, name, QF_VALUE_CONSTANT, &t);
    qf_tensor_free(&t);
    return *out ? QF_OK : QF_ERR_NOMEM;
}

static qf_status ar_net_init(ar_net *m, const ar_layer *l, int64_t opset, int64_t batch,
                             const qf_value *x, const qf_value *t, const qf_tensor *wf)
{
    memset(m, 0, sizeof *m);
    QF_TRY(qf_graph_init(&m->g));
    qf_graph *g = m->g;
    g->opset = opset;
    int64_t xd[QF_MAX_DIMS], td[QF_MAX_DIMS];
    memcpy(xd, x->type.dims, sizeof xd);
    memcpy(td, t->type.dims, sizeof td);
    xd[0] = td[0] = batch;
    qf_value *vx = qf_graph_add_input(g, "x", QF_DTYPE_F32, x->type.ndim, xd);
    qf_value *vt = qf_graph_add_input(g, "t", QF_DTYPE_F32, t->type.ndim, td);
    qf_tensor w;
    QF_TRY(qf_tensor_init(&w, QF_DTYPE_F32, wf->ndim, wf->dims));
    m->w = qf_graph_add_constant(g, "w", QF_VALUE_PARAMETER, &w);
    qf_tensor_free(&w);
    if (!vx || !vt || !m->w) return QF_ERR_NOMEM;
    const qf_node *n = l->node;
    qf_value *in[3] = {vx, m->w, NULL};
    if (ar_input(n, 2)) QF_TRY(ar_net_const(g, "b", ar_input(n, 2), &in[2]));
    qf_node *ln = qf_graph_add_node(g, n->op, "layer", n->ninputs < 3 ? n->ninputs : 3, in, 1);
    if (!ln) return QF_ERR_NOMEM;
    QF_TRY(qf_node_copy_attrs(g, ln, n));
    qf_value *y = ln->outputs[0];
    if (l->act) {
        qf_value *ain[3] = {y, NULL, NULL};
        int na = l->act->ninputs < 3 ? l->act->ninputs : 3;
        for (int i = 1; i < na; i++)
            if (l->act->inputs[i])
                QF_TRY(ar_net_const(g, i == 1 ? "lo" : "hi", l->act->inputs[i], &ain[i]));
        qf_node *an = qf_graph_add_node(g, l->act->op, "act", na, ain, 1);
        if (!an) return QF_ERR_NOMEM;
        QF_TRY(qf_node_copy_attrs(g, an, l->act));
        y = an->outputs[0];
    }
    qf_value *lin[2] = {y, vt};
    qf_node *loss = qf_graph_add_node(g, QF_OP_MSE_LOSS, "loss", 2, lin, 1);
    if (!loss) return QF_ERR_NOMEM;
    QF_TRY(qf_graph_add_output(g, loss->outputs[0]));
    QF_TRY(qf_graph_toposort(g));
    QF_TRY(qf_graph_infer_shapes(g));
    if (!qf_shape_equal(y->type.ndim, y->type.dims, vt->type.ndim, vt->type.dims))
        return qf_error(QF_ERR_INTERNAL,
                        "adaround: node '%s': the layer's output shape is not the float model's",
                        n->name);
    QF_TRY(qf_tensor_init(&m->x, QF_DTYPE_F32, vx->type.ndim, vx->type.dims));
    QF_TRY(qf_tensor_init(&m->t, QF_DTYPE_F32, vt->type.ndim, vt->type.dims));
    const qf_value *params[1] = {m->w};
    qf_grad_options go = {.loss = loss->outputs[0], .nparams = 1, .params = params};
    return qf_grad_plan_init(&m->gp, g, &go);
}

/* The mean squared error per element of the layer's output with weights
 * ws, over the n samples (n a multiple of the batch), in double. */
static qf_status ar_net_error(ar_net *m, const float *ws, const float *x, const float *t, int64_t n,
                              int64_t batch, int64_t xrow, int64_t trow, double *err)
{
    memcpy(m->w->type.data, ws, qf_tensor_nbytes(&m->w->type));
    double sum = 0.0;
    const qf_tensor *in[2] = {&m->x, &m->t};
    for (int64_t first = 0; first < n; first += batch) {
        memcpy(m->x.data, x + first * xrow, sizeof(float) * (size_t)(batch * xrow));
        memcpy(m->t.data, t + first * trow, sizeof(float) * (size_t)(batch * trow));
        QF_TRY(qf_grad_plan_forward(m->gp, in, 2, false));
        sum += (double)qf_grad_plan_loss(m->gp);
    }
    *err = sum / (double)(n / batch);
    return QF_OK;
}

/* --- the elementwise part of a step ------------------------------------------------------ */

typedef struct ar_step {
    int64_t numel;
    const float *fl; /* floor(W / s) */
    const float *s;  /* each element's scale */
    float qmin, qmax;
    float *v, *m1, *m2; /* V and Adam's moments */
    float *ws;          /* out: the soft weights */
    const float *grad;  /* d recon / d Ws (mse_loss's mean) */
    float gscale;       /* to AIMET's loss: the channel count */
    float lambda, beta; /* regulariser (lambda 0: warm-up) */
    double step_size, bc2_sqrt;
} ar_step;

static inline float ar_sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

static inline float ar_h(float v)
{
    float h = ar_sigmoid(v) * (AR_ZETA - AR_GAMMA) + AR_GAMMA;
    return h < 0.0f ? 0.0f : (h > 1.0f ? 1.0f : h);
}

/* Ws = s clip(floor + h(V), qmin, qmax). */
static void ar_soft_body(void *ctx, int64_t lo, int64_t hi)
{
    const ar_step *a = ctx;
    for (int64_t k = lo; k < hi; k++) {
        float q = a->fl[k] + ar_h(a->v[k]);
        q = q < a->qmin ? a->qmin : (q > a->qmax ? a->qmax : q);
        a->ws[k] = a->s[k] * q;
    }
}

/* d loss / d V, then Adam (torch 1.13's arithmetic, no weight decay). */
static void ar_adam_body(void *ctx, int64_t lo, int64_t hi)
{
    const ar_step *a = ctx;
    const float span = AR_ZETA - AR_GAMMA;
    for (int64_t k = lo; k < hi; k++) {
        float sg = ar_sigmoid(a->v[k]);
        float hr = sg * span + AR_GAMMA;
        /* the clips pass no gradient where they clamp */
        float dh = hr > 0.0f && hr < 1.0f ? sg * (1.0f - sg) * span : 0.0f;
        float h = hr < 0.0f ? 0.0f : (hr > 1.0f ? 1.0f : hr);
        float q = a->fl[k] + h;
        float dq = q >= a->qmin && q <= a->qmax ? a->gscale * a->grad[k] * a->s[k] : 0.0f;
        float g = dq * dh;
        if (a->lambda > 0.0f) {
            /* d/dh of lambda (1 - |2h - 1|^beta) = -2 lambda beta |2h - 1|^(beta - 1) sign(2h - 1) */
            float u = 2.0f * h - 1.0f, au = fabsf(u);
            float dr = au > 0.0f ? -2.0f * a->lambda * a->beta * powf(au, a->beta - 1.0f) *
                                       (u > 0.0f ? 1.0f : -1.0f)
                                 : 0.0f;
            g += dr * dh;
        }
        a->m1[k] = (float)AR_B1 * a->m1[k] + (float)(1.0 - AR_B1) * g;
        a->m2[k] = (float)AR_B2 * a->m2[k] + (float)(1.0 - AR_B2) * g * g;
        float denom = sqrtf(a->m2[k]) / (float)a->bc2_sqrt + (float)AR_EPS;
        a->v[k] -= (float)a->step_size * (a->m1[k] / denom);
    }
}

#define AR_GRAIN 16384

/* --- one layer ------------------------------------------------------------------------------ */

typedef struct ar_ctx {
    qf_graph *g, *ref;
    const qf_data_source *src; /* the first n samples */
    int64_t n, batch;          /* samples used (a multiple of batch) and the step's batch */
    int64_t run_batch;         /* the calibration batch, for the collection runs */
    const qf_quant_adaround_options *opt;
    const qf_quant_profile *p;
    uint64_t rng;
} ar_ctx;

/* Buffers of one layer, freed together. */
typedef struct ar_bufs {
    float *x, *t, *fl, *s, *v, *m1, *m2, *ws, *wn;
    int64_t *order;
    qf_tensor wf;
} ar_bufs;

static void ar_bufs_free(ar_bufs *b)
{
    qf_free(b->x);
    qf_free(b->t);
    qf_free(b->fl);
    qf_free(b->s);
    qf_free(b->v);
    qf_free(b->m1);
    qf_free(b->m2);
    qf_free(b->ws);
    qf_free(b->wn);
    qf_free(b->order);
    qf_tensor_free(&b->wf);
}

static qf_status ar_layer_run(ar_ctx *c, const ar_layer *l, qf_quant_adaround_layer *rec)
{
    const qf_node *n = l->node;
    const qf_quant_adaround_options *o = c->opt;
    /* The float weight this int8 one was quantized from: "<w>_quantized". */
    const char *qn = l->wq->name;
    size_t len = strlen(qn), sl = strlen("_quantized");
    char wname[512];
    if (len <= sl || len - sl >= sizeof wname || strcmp(qn + len - sl, "_quantized") != 0) {
        rec->reason = "its int8 weight has no float original by name";
        return QF_OK;
    }
    memcpy(wname, qn, len - sl);
    wname[len - sl] = 0;
    const qf_value *wf = qf_graph_find_value(c->ref, wname);
    /* Its output in the float model: the node of the same name (a graph
     * output's value changes its name in the QDQ graph: the DQ after it
     * takes it), after the activation of the same name. */
    const qf_node *fn = qf_graph_find_node(c->ref, n->name);
    const qf_node *fa = l->act ? qf_graph_find_node(c->ref, l->act->name) : fn;
    const qf_value *tref =
        fn && fa && fn->op == n->op && fa->op == (l->act ? l->act : n)->op &&
                (fa == fn || (fn->outputs[0]->nuses == 1 && fn->outputs[0]->uses[0].node == fa))
            ? fa->outputs[0]
            : NULL;
    if (!wf || !qf_value_is_const(wf) || wf->type.dtype != QF_DTYPE_F32 || !wf->type.data ||
        !qf_shape_equal(wf->type.ndim, wf->type.dims, l->wq->type.ndim, l->wq->type.dims)) {
        rec->reason = "the float model has no weight of that name and shape (a rewritten layer)";
        return QF_OK;
    }
    if (!tref) {
        rec->reason = "the float model has no node of that name and op";
        return QF_OK;
    }
    const qf_value *x = n->inputs[0];
    int64_t xrow = ar_row(x), trow = ar_row(l->out);
    if (xrow < 1 || trow < 1 || ar_row(tref) != trow || l->out->type.ndim < 2) {
        rec->reason = "its input or output has no known shape per sample";
        return QF_OK;
    }
    /* The per-channel scale (or the one scale) of the weight. */
    const qf_value *sv = ar_input(l->dq, 1);
    if (!sv || !qf_value_is_const(sv) || sv->type.dtype != QF_DTYPE_F32) {
        rec->reason = "its weight scale is not a float32 constant";
        return QF_OK;
    }
    int64_t ns = qf_tensor_numel(&sv->type), numel = qf_tensor_numel(&l->wq->type);
    int axis = ns > 1 ? (int)qf_node_attr_int(l->dq, "axis", 1) : -1;
    if (axis < 0 && ns > 1) axis += l->wq->type.ndim;
    if (ns > 1 && (axis < 0 || axis >= l->wq->type.ndim || l->wq->type.dims[axis] != ns)) {
        rec->reason = "its weight scale does not match the weight's channels";
        return QF_OK;
    }
    int64_t inner = 1;
    for (int d = axis + 1; ns > 1 && d < l->wq->type.ndim; d++) inner *= l->wq->type.dims[d];
    const qf_qformat *fmt = n->op == QF_OP_CONV || n->op == QF_OP_CONV_TRANSPOSE
                                ? &c->p->conv_weight
                                : &c->p->linear_weight;
    /* Samples: as many of the first n as the inputs and targets of this
     * layer fit in QF_QUANT_ADAROUND_BYTES, a multiple of the batch. */
    int64_t ns_fit = (int64_t)(QF_QUANT_ADAROUND_BYTES / (sizeof(float) * (size_t)(xrow + trow)));
    int64_t nsamp = c->n < ns_fit ? c->n : ns_fit, batch = c->batch < nsamp ? c->batch : nsamp;
    if (batch < 1) {
        rec->reason = "one sample's input and output do not fit in the memory AdaRound may use";
        return QF_OK;
    }
    nsamp -= nsamp % batch;
    rec->samples = nsamp;
    rec->weights = numel;

    double t0 = qf_clock_seconds();
    ar_bufs b = {0};
    ar_net m = {0};
    qf_status st = QF_OK;
    size_t fw = sizeof(float) * (size_t)numel;
    b.x = qf_malloc(sizeof(float) * (size_t)(nsamp * xrow));
    b.t = qf_malloc(sizeof(float) * (size_t)(nsamp * trow));
    b.fl = qf_malloc(fw);
    b.s = qf_malloc(fw);
    b.v = qf_malloc(fw);
    b.m1 = qf_calloc((size_t)numel, sizeof(float));
    b.m2 = qf_calloc((size_t)numel, sizeof(float));
    b.ws = qf_malloc(fw);
    b.wn = qf_malloc(fw);
    b.order = qf_malloc(sizeof(int64_t) * (size_t)nsamp);
    if (!b.x || !b.t || !b.fl || !b.s || !b.v || !b.m1 || !b.m2 || !b.ws || !b.wn || !b.order)
        st = QF_ERR_NOMEM;
    /* X from the QDQ graph (the layers before already rounded), T from the
     * float one, on the same samples. */
    qf_tensor views[QF_QUANT_MAX_INPUTS];
    const qf_tensor *ptrs[QF_QUANT_MAX_INPUTS];
    for (int i = 0; i < c->src->ninputs; i++) {
        const qf_tensor *d = c->src->inputs[i];
        int64_t dims[QF_MAX_DIMS];
        memcpy(dims, d->dims, sizeof dims);
        dims[0] = nsamp;
        qf_tensor_view(&views[i], d->dtype, d->ndim, dims, d->data);
        ptrs[i] = &views[i];
    }
    qf_data_source sub = {
        .ninputs = c->src->ninputs, .inputs = ptrs, .read = c->src->read, .ud = c->src->ud};
    if (st == QF_OK) st = ar_collect_value(c->g, x, &sub, nsamp, xrow, c->run_batch, b.x);
    if (st == QF_OK) st = ar_collect_value(c->ref, tref, &sub, nsamp, trow, c->run_batch, b.t);
    /* floor(W / s) and V where h(V) = W / s - floor(W / s), in the float
     * arithmetic of the nearest rounding (qf_quantize_range_f32: x / s). */
    const float *w = wf->type.data, *ps = sv->type.data;
    const int8_t *qn8 = l->wq->type.data;
    for (int64_t k = 0; st == QF_OK && k < numel; k++) {
        float s = ps[ns > 1 ? (k / inner) % ns : 0];
        float r = w[k] / s, f = floorf(r), rest = r - f;
        b.fl[k] = f;
        b.s[k] = s;
        b.v[k] = -logf((AR_ZETA - AR_GAMMA) / (rest - AR_GAMMA) - 1.0f);
        b.wn[k] = s * (float)qn8[k];
    }
    if (st == QF_OK) st = ar_net_init(&m, l, c->g->opset, batch, x, l->out, &wf->type);
    double err0 = 0.0, err1 = 0.0;
    if (st == QF_OK) st = ar_net_error(&m, b.wn, b.x, b.t, nsamp, batch, xrow, trow, &err0);

    int iters = o->iters;
    int64_t warm = (int64_t)(AR_WARM * iters);
    ar_step a = {.numel = numel,
                 .fl = b.fl,
                 .s = b.s,
                 .qmin = (float)fmt->qmin,
                 .qmax = (float)fmt->qmax,
                 .v = b.v,
                 .m1 = b.m1,
                 .m2 = b.m2,
                 .ws = b.ws,
                 .gscale = (float)l->out->type.dims[1]};
    for (int64_t i = 0; i < nsamp; i++) b.order[i] = i;
    int64_t pos = nsamp;
    const qf_tensor *in[2] = {&m.x, &m.t};
    float *pw = m.w ? m.w->type.data : NULL;
    for (int it = 0; st == QF_OK && it < iters; it++) {
        if ((st = qf_interrupt_check()) != QF_OK) break;
        if (pos + batch > nsamp) {
            qf_rand_shuffle(b.order, nsamp, &c->rng);
            pos = 0;
        }
        for (int64_t r = 0; r < batch; r++) {
            int64_t k = b.order[pos + r];
            memcpy((float *)m.x.data + r * xrow, b.x + k * xrow, sizeof(float) * (size_t)xrow);
            memcpy((float *)m.t.data + r * trow, b.t + k * trow, sizeof(float) * (size_t)trow);
        }
        pos += batch;
        a.ws = pw;
        qf_parallel_for(numel, AR_GRAIN, ar_soft_body, &a);
        st = qf_grad_plan_forward(m.gp, in, 2, true);
        if (st == QF_OK) st = qf_grad_plan_backward(m.gp);
        if (st != QF_OK) break;
        a.grad = qf_grad_plan_grad(m.gp, 0)->data;
        if (it < warm) {
            a.lambda = 0.0f;
        } else {
            /* AIMET's schedule: beta from 20 down to 2 on a half cosine */
            double rel = iters - warm > 0 ? (double)(it - warm) / (double)(iters - warm) : 1.0;
            a.beta = (float)(AR_BETA_END + 0.5 * (AR_BETA_START - AR_BETA_END) *
                                               (1.0 + cos(rel * 3.14159265358979323846)));
            a.lambda = (float)o->reg;
        }
        double step = (double)it + 1.0;
        a.step_size = AR_LR / (1.0 - pow(AR_B1, step));
        a.bc2_sqrt = sqrt(1.0 - pow(AR_B2, step));
        qf_parallel_for(numel, AR_GRAIN, ar_adam_body, &a);
    }
    /* The hard rounding: up where h(V) >= 0.5, i.e. V >= 0. */
    int8_t *q8 = NULL;
    if (st == QF_OK) {
        q8 = qf_malloc((size_t)numel);
        if (!q8) st = QF_ERR_NOMEM;
    }
    int64_t changed = 0;
    for (int64_t k = 0; st == QF_OK && k < numel; k++) {
        float q = b.fl[k] + (b.v[k] >= 0.0f ? 1.0f : 0.0f);
        q = q < a.qmin ? a.qmin : (q > a.qmax ? a.qmax : q);
        q8[k] = (int8_t)q;
        b.ws[k] = b.s[k] * q;
        changed += q8[k] != qn8[k];
    }
    if (st == QF_OK) st = ar_net_error(&m, b.ws, b.x, b.t, nsamp, batch, xrow, trow, &err1);
    if (st == QF_OK) {
        rec->iters = iters;
        rec->err_nearest = err0;
        rec->err_adaround = err1;
        rec->changed = changed;
        /* Kept only where it reconstructs better than nearest rounding. */
        rec->kept = err1 < err0;
        if (rec->kept) {
            if (l->wq->type.owns || l->wq->type.writable) {
                memcpy(l->wq->type.data, q8, (size_t)numel);
            } else {
                qf_tensor nt;
                st = qf_tensor_init(&nt, QF_DTYPE_I8, l->wq->type.ndim, l->wq->type.dims);
                if (st == QF_OK) {
                    memcpy(nt.data, q8, (size_t)numel);
                    qf_value_set_data(l->wq, &nt);
                }
            }
        }
    }
    rec->ms = (qf_clock_seconds() - t0) * 1e3;
    qf_free(q8);
    ar_net_free(&m);
    ar_bufs_free(&b);
    if (st != QF_OK) return qf_error_prefix(st, "adaround: node '%s': ", n->name);
    return QF_OK;
}

qf_status qf_quant_adaround(qf_graph *g, qf_graph *ref, const qf_data_source *data,
                            const qf_quant_adaround_options *opt, const qf_quant_profile *p,
                            qf_quant_adaround_layer **layers, int *count)
{
    *layers = NULL;
    *count = 0;
    qf_quant_adaround_options o = *opt;
    if (o.iters <= 0) o.iters = QF_QUANT_ADAROUND_ITERS;
    if (!(o.reg >= 0.0) || !isfinite(o.reg))
        return qf_error(QF_ERR_INVALID, "adaround: regularisation %g", o.reg);
    int64_t n = data->inputs[0]->ndim >= 1 ? data->inputs[0]->dims[0] : 0;
    if (o.max_samples > 0 && o.max_samples < n) n = o.max_samples;
    if (n > QF_QUANT_ADAROUND_SAMPLES) n = QF_QUANT_ADAROUND_SAMPLES;
    if (n < 1) return qf_error(QF_ERR_SHAPE, "adaround: the calibration data holds no samples");
    ar_ctx c = {.g = g,
                .ref = ref,
                .src = data,
                .n = n,
                .batch = o.batch > 0 ? o.batch : 32,
                .run_batch = o.batch > 0 ? o.batch : 32,
                .opt = &o,
                .p = p,
                .rng = o.seed ^ 0x5ada0d5eedull};
    QF_TRY(qf_graph_toposort(g));
    QF_TRY(qf_graph_infer_shapes(g));
    QF_TRY(qf_graph_toposort(ref));
    QF_TRY(qf_graph_infer_shapes(ref));
    int total = 0;
    qf_graph_for_each_node(g, nd) total += ar_is_layer(nd);
    if (!total) return QF_OK;
    qf_quant_adaround_layer *recs = qf_calloc((size_t)total, sizeof *recs);
    if (!recs) return QF_ERR_NOMEM;
    qf_status st = QF_OK;
    int k = 0;
    for (qf_node *nd = g->first; nd && st == QF_OK; nd = nd->next) {
        if (!ar_is_layer(nd)) continue;
        qf_quant_adaround_layer *r = &recs[k++];
        ar_layer l = ar_find(nd);
        r->node = qf_strdup(nd->name);
        r->weight = l.wq ? qf_strdup(l.wq->name) : NULL;
        if (!r->node || (l.wq && !r->weight)) {
            st = QF_ERR_NOMEM;
            break;
        }
        if (l.why)
            r->reason = l.why;
        else
            st = ar_layer_run(&c, &l, r);
        if (st == QF_OK && o.progress) o.progress(o.progress_ud, r, k, total);
    }
    *layers = recs;
    *count = k;
    return st;
}

const char *qf_quant_rounding_name(qf_qrounding r)
{
    return r == QF_QROUND_ADAROUND ? "adaround" : "nearest";
}
