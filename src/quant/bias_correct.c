/* Empirical bias correction of a QDQ model (Nagel et al., "Data-Free
 * Quantization Through Weight Equalization and Bias Correction", 2019;
 * NNCF's BiasCorrection, AIMET's empirical form).
 *
 * A quantized layer's error has a mean per output channel: the weights'
 * rounding error times the mean input (W_q - W) E[x], and what the layers
 * before it lost to their own grids. It shifts every reader's input by a
 * constant per channel, which a ReLU, a pool and the next layer pass on and
 * the activation grids cannot see. For each quantized Conv / ConvTranspose /
 * Gemm (or qfold's linear, what the folds make of a Gemm) of q, with f the float graph q was converted from (same value names):
 *
 *   e_c = mean over the samples and positions of (y_q[c] - y_f[c])
 *   b_q[c] -= round(e_c / s_b[c])        (the int32 bias, s_b = s_x * s_W[c])
 *
 * y_q is the layer's output (before a fused activation: the int8 model's
 * int32 accumulator times s_b) in q as it stands, y_f the float model's, so
 * that the errors of earlier layers count; a layer's correction changes its
 * readers' inputs, so layers are corrected in stages: stage 1 holds the
 * layers with no quantized layer before them, stage k those whose latest
 * predecessor is in stage k - 1; the layers of one stage are independent of
 * one another and are measured in one run of q over the data, after the
 * corrections of the stages before. A chain of K layers takes K runs of q;
 * the float means are taken in one run of f.
 *
 * q runs as written (DequantizeLinear -> float op -> QuantizeLinear, the
 * plain plan, NCHW): its conv outputs are the int8 model's accumulators
 * times s_b up to float32 summation order, and every int8 activation the
 * integer executor's to within one LSB on the rare ties its fixed-point
 * requantization rounds the other way (qf_quant_int8_diff measures that).
 * The lowered graph would hide the accumulator behind the requantization
 * and a fused ReLU's clamp.
 *
 * A layer without a bias gets an int32 one (zeros at s_x * s_W, behind a
 * DequantizeLinear, as convert writes biases) before the first run. Layers
 * left out (counted in stats->skipped): an output f has no value of that
 * name for (a grouped conv split per group after the conversion), an input
 * or weight not behind a DequantizeLinear of constant qparams, a bias that
 * is not an int32 DequantizeLinear. A MatMul [N, K] x int8 constant
 * [K, O] has no bias slot in ONNX: it becomes a Gemm (transB 0) with one. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/math/quant_math.h"
#include "../passes/rewrite.h"
#include "qdq.h"
#include "qfold/quant.h"
#include "qfold/schema.h"

typedef struct bc_layer {
    qf_node *node;    /* the layer in q */
    uint32_t f_id;    /* its output in f */
    int stage;        /* 1, 2, ... */
    int64_t channels; /* output channels (axis 1) */
    double *sum_q, *sum_f;
    int64_t count_q, count_f; /* elements summed per channel */
    bool need_bias;           /* found without adding its missing bias */
} bc_layer;

typedef struct bc_run {
    bc_layer *layers;
    int nlayers;
    uint32_t *by_node;  /* q node id -> layer + 1 */
    uint32_t nnode;
    uint32_t *by_fval;  /* f value id -> layer + 1 */
    uint32_t nfval;
    int stage;          /* the run's stage in q; 0: the float run */
    int64_t rows;       /* samples of the batch being run (a fixed batch pads) */
    const qf_data_source *data;
} bc_run;

/* The first samples of the caller's source, the batch's row count kept. */
static qf_status bc_read(const qf_data_source *src, int64_t first, int64_t count, const void **rows)
{
    bc_run *r = src->ud;
    r->rows = count;
    return r->data->read(r->data, first, count, rows);
}

/* Per-channel sums over the batch's real rows of t, [N, C, ...]. */
static void bc_accumulate(const qf_tensor *t, int64_t rows, int64_t channels, double *sum, int64_t *count)
{
    int64_t n = t->ndim >= 1 ? t->dims[0] : 0;
    if (rows < n) n = rows;
    int64_t numel = qf_tensor_numel(t), per_row = t->dims[0] ? numel / t->dims[0] : 0;
    int64_t inner = channels ? per_row / channels : 0;
    const float *d = t->data;
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < channels; c++) {
            const float *p = d + (i * channels + c) * inner;
            double s = 0.0;
            for (int64_t k = 0; k < inner; k++) s += p[k];
            sum[c] += s;
        }
    *count += n * inner;
}

static qf_status bc_hook_q(void *ud, const qf_node *n, const qf_tensor *const *outs, int nout)
{
    (void)nout;
    bc_run *r = ud;
    if (n->id >= r->nnode || !r->by_node[n->id]) return QF_OK;
    bc_layer *l = &r->layers[r->by_node[n->id] - 1];
    if (l->stage == r->stage) bc_accumulate(outs[0], r->rows, l->channels, l->sum_q, &l->count_q);
    return QF_OK;
}

static qf_status bc_hook_f(void *ud, const qf_node *n, const qf_tensor *const *outs, int nout)
{
    bc_run *r = ud;
    for (int i = 0; i < nout; i++) {
        uint32_t id = n->outputs[i]->id;
        if (id >= r->nfval || !r->by_fval[id]) continue;
        bc_layer *l = &r->layers[r->by_fval[id] - 1];
        bc_accumulate(outs[i], r->rows, l->channels, l->sum_f, &l->count_f);
    }
    return QF_OK;
}

/* The constant scalar or vector behind a DequantizeLinear's slot. */
static const qf_value *bc_dq_const(const qf_value *v, int slot)
{
    const qf_node *dq = v ? v->producer : NULL;
    if (!dq || dq->op != QF_OP_DEQUANTIZE || slot >= dq->ninputs || !dq->inputs[slot]) return NULL;
    const qf_value *c = dq->inputs[slot];
    return qf_value_is_const(c) ? c : NULL;
}

/* Whether v is a DequantizeLinear of a constant `dt` tensor with float32 scales. */
static bool bc_is_dq_of(const qf_value *v, qf_dtype dt)
{
    const qf_value *q = bc_dq_const(v, 0), *s = bc_dq_const(v, 1);
    return q && s && q->type.dtype == dt && s->type.dtype == QF_DTYPE_F32;
}

/* An int32 bias of zeros at s_x * s_W (a float32 product, as convert),
 * behind a DequantizeLinear, as input 2 of layer n. */
static qf_status bc_add_bias(qf_graph *q, qf_node *n, int64_t channels)
{
    const qf_value *sx = bc_dq_const(n->inputs[0], 1), *sw = bc_dq_const(n->inputs[1], 1);
    int64_t nw = qf_tensor_numel(&sw->type);
    float s_in = ((const float *)sx->type.data)[0];
    float *scale = qf_malloc(sizeof *scale * (size_t)channels);
    if (!scale) return QF_ERR_NOMEM;
    for (int64_t c = 0; c < channels; c++) scale[c] = s_in * ((const float *)sw->type.data)[nw == 1 ? 0 : c % nw];
    char name[512];
    snprintf(name, sizeof name, "%s_bias", n->name);
    /* MatMul [N, K] x [K, O] has no bias slot: Gemm (transB 0, alpha and beta 1) has */
    if (n->op == QF_OP_MATMUL) n->op = QF_OP_GEMM;
    qf_tensor zf, zq;
    qf_status st = qf_tensor_init(&zf, QF_DTYPE_F32, 1, &channels);
    if (st == QF_OK) st = qf_rewrite_install_const(q, n, 2, &zf, name);
    if (st == QF_OK) st = qf_tensor_init(&zq, QF_DTYPE_I32, 1, &channels);
    if (st == QF_OK) st = qf_qdq_const(q, n->inputs[2], &zq, scale, nw == 1 ? 1 : channels, nw == 1 ? -1 : 0);
    qf_free(scale);
    return st;
}

/* A graph output's name goes to the DequantizeLinear after it (the file's
 * interface keeps its names): y -> Q -> DQ(named as f's output). */
static const qf_value *bc_graph_output(const qf_graph *f, const qf_value *y)
{
    if (y->nuses != 1 || y->uses[0].node->op != QF_OP_QUANTIZE) return NULL;
    const qf_value *yq = y->uses[0].node->outputs[0];
    for (int i = 0; i < yq->nuses; i++) {
        const qf_node *dq = yq->uses[i].node;
        if (dq->op != QF_OP_DEQUANTIZE || !dq->outputs[0]->is_output) continue;
        const qf_value *fy = qf_graph_find_value(f, dq->outputs[0]->name);
        if (fy) return fy;
    }
    return NULL;
}

/* The layers of q that f has, in q's order; biases added where missing
 * (add_bias; else the layer is kept with need_bias set). */
static qf_status bc_find_layers(qf_graph *q, const qf_graph *f, bc_run *r, qf_quant_bc_stats *stats, bool add_bias)
{
    r->layers = qf_calloc((size_t)(q->nnodes ? q->nnodes : 1), sizeof *r->layers);
    if (!r->layers) return QF_ERR_NOMEM;
    bool added = false;
    for (qf_node *n = q->first; n; n = n->next) {
        if (n->op != QF_OP_CONV && n->op != QF_OP_CONV_TRANSPOSE && n->op != QF_OP_GEMM && n->op != QF_OP_LINEAR &&
            n->op != QF_OP_MATMUL)
            continue;
        /* a MatMul: only [N, K] x int8 constant [K, O] (it becomes a Gemm
         * when it gets its bias) */
        if (n->op == QF_OP_MATMUL && (!n->inputs[0] || n->inputs[0]->type.ndim != 2 || !n->inputs[1] ||
                                      n->inputs[1]->type.ndim != 2 || !bc_is_dq_of(n->inputs[1], QF_DTYPE_I8)))
            continue;
        const qf_value *y = n->outputs[0];
        const qf_value *fy = qf_graph_find_value(f, y->name);
        if (!fy) fy = bc_graph_output(f, y);
        const qf_value *sx = bc_dq_const(n->inputs[0], 1);
        bool ok = fy && fy->producer && fy->producer->op == n->op && y->type.ndim >= 2 &&
                  y->type.dtype == QF_DTYPE_F32 && y->type.dims[1] > 0 && sx && qf_tensor_numel(&sx->type) == 1 &&
                  sx->type.dtype == QF_DTYPE_F32 && n->ninputs >= 2 && bc_is_dq_of(n->inputs[1], QF_DTYPE_I8);
        /* a Gemm / linear's channels are its last axis: [N, C] only */
        if (ok && (n->op == QF_OP_GEMM || n->op == QF_OP_LINEAR || n->op == QF_OP_MATMUL)) ok = y->type.ndim == 2;
        int64_t channels = ok ? y->type.dims[1] : 0;
        const qf_value *b = n->ninputs > 2 ? n->inputs[2] : NULL;
        if (ok && b) {
            const qf_value *bq = bc_dq_const(b, 0), *bs = bc_dq_const(b, 1);
            ok = bc_is_dq_of(b, QF_DTYPE_I32) && qf_tensor_numel(&bq->type) == channels &&
                 (qf_tensor_numel(&bs->type) == 1 || qf_tensor_numel(&bs->type) == channels);
        }
        if (ok && !b) {
            const qf_value *sw = bc_dq_const(n->inputs[1], 1);
            int64_t nw = qf_tensor_numel(&sw->type);
            ok = nw >= 1 && channels % nw == 0;
        }
        if (!ok) {
            stats->skipped++;
            continue;
        }
        if (!b && add_bias) {
            QF_TRY(bc_add_bias(q, n, channels));
            stats->added++;
            added = true;
        }
        bc_layer *l = &r->layers[r->nlayers++];
        l->need_bias = !b && !add_bias;
        l->node = n;
        l->f_id = fy->id;
        l->channels = channels;
        l->sum_q = qf_calloc((size_t)channels, sizeof *l->sum_q);
        l->sum_f = qf_calloc((size_t)channels, sizeof *l->sum_f);
        if (!l->sum_q || !l->sum_f) return QF_ERR_NOMEM;
    }
    if (added) {
        QF_TRY(qf_graph_toposort(q));
        QF_TRY(qf_graph_infer_shapes(q));
    }
    return QF_OK;
}

/* Stage of every layer: 1 + the largest stage of a layer before it. */
static qf_status bc_stages(qf_graph *q, bc_run *r, int *nstages)
{
    *nstages = 0;
    r->nnode = q->next_node_id;
    r->by_node = qf_calloc(r->nnode ? r->nnode : 1, sizeof *r->by_node);
    int *vstage = qf_calloc((size_t)(q->nvalues ? q->nvalues : 1), sizeof *vstage);
    if (!r->by_node || !vstage) {
        qf_free(vstage);
        return QF_ERR_NOMEM;
    }
    for (int k = 0; k < r->nlayers; k++) r->by_node[r->layers[k].node->id] = (uint32_t)k + 1;
    for (const qf_node *n = q->first; n; n = n->next) {
        int s = 0;
        for (int i = 0; i < n->ninputs; i++)
            if (n->inputs[i] && vstage[n->inputs[i]->id] > s) s = vstage[n->inputs[i]->id];
        if (r->by_node[n->id]) {
            s++;
            r->layers[r->by_node[n->id] - 1].stage = s;
            if (s > *nstages) *nstages = s;
        }
        for (int i = 0; i < n->noutputs; i++) vstage[n->outputs[i]->id] = s;
    }
    qf_free(vstage);
    return QF_OK;
}

/* One run over the first n samples: of f (hook_f) or of q (hook_q, the layers of r->stage). */
static qf_status bc_pass(qf_graph *g, const qf_data_source *data, int64_t n, int64_t batch, bc_run *r,
                         qf_plan_hook hook)
{
    qf_tensor views[QF_QUANT_MAX_INPUTS];
    const qf_tensor *ptrs[QF_QUANT_MAX_INPUTS];
    for (int i = 0; i < data->ninputs; i++) {
        const qf_tensor *d = data->inputs[i];
        int64_t dims[QF_MAX_DIMS];
        memcpy(dims, d->dims, sizeof dims);
        if (d->ndim >= 1 && dims[0] > n) dims[0] = n;
        qf_tensor_view(&views[i], d->dtype, d->ndim, dims, d->data);
        ptrs[i] = &views[i];
    }
    r->data = data;
    qf_data_source src = {.ninputs = data->ninputs, .inputs = ptrs, .read = bc_read, .ud = r};
    qf_batch_options bo = {.batch = batch, .hook = hook, .hook_ud = r, .widen = true};
    return qf_run_source(g, &src, &bo);
}

static void bc_free(bc_run *r)
{
    for (int k = 0; r->layers && k < r->nlayers; k++) {
        qf_free(r->layers[k].sum_q);
        qf_free(r->layers[k].sum_f);
    }
    qf_free(r->layers);
    qf_free(r->by_node);
    qf_free(r->by_fval);
    memset(r, 0, sizeof *r);
}

/* Layers found, float means taken (r ready for the q runs). */
static qf_status bc_prepare(qf_graph *q, qf_graph *f, const qf_data_source *data, int64_t n, int64_t batch,
                            bc_run *r, int *nstages, qf_quant_bc_stats *stats)
{
    int ndata = data->ninputs;
    if (ndata < 1 || ndata > QF_QUANT_MAX_INPUTS)
        return qf_error(QF_ERR_INVALID, "bias correction: %d calibration inputs", ndata);
    QF_TRY(qf_graph_toposort(q));
    QF_TRY(bc_find_layers(q, f, r, stats, true));
    QF_TRY(bc_stages(q, r, nstages));
    r->nfval = (uint32_t)f->nvalues;
    r->by_fval = qf_calloc(r->nfval ? r->nfval : 1, sizeof *r->by_fval);
    if (!r->by_fval) return QF_ERR_NOMEM;
    for (int k = 0; k < r->nlayers; k++) r->by_fval[r->layers[k].f_id] = (uint32_t)k + 1;
    if (!r->nlayers) return QF_OK;
    r->stage = 0;
    return bc_pass(f, data, n, batch, r, bc_hook_f);
}

static double bc_mean(const double *sum, int64_t c, int64_t count) { return count ? sum[c] / (double)count : 0.0; }

/* Subtract e[c] (output units) from layer l's int32 bias, channel by channel. */
static qf_status bc_apply_errors(bc_layer *l, const double *err, qf_quant_bc_stats *stats)
{
    qf_value *bq = (qf_value *)bc_dq_const(l->node->inputs[2], 0);
    const qf_value *bs = bc_dq_const(l->node->inputs[2], 1);
    int64_t ns = qf_tensor_numel(&bs->type);
    const float *scale = bs->type.data;
    qf_tensor t;
    QF_TRY(qf_tensor_copy(&t, &bq->type));
    int32_t *d = t.data;
    for (int64_t c = 0; c < l->channels; c++) {
        double e = err[c];
        double s = (double)scale[ns == 1 ? 0 : c];
        d[c] = qf_saturate_s32_f64(qf_round_half_even_f64((double)d[c] - e / s));
        double a = fabs(e);
        if (a > stats->max_abs_error) stats->max_abs_error = a;
    }
    qf_value_set_data(bq, &t);
    stats->layers++;
    return QF_OK;
}

/* Subtract layer l's measured mean error from its int32 bias. */
static qf_status bc_apply(bc_layer *l, qf_quant_bc_stats *stats)
{
    double *e = qf_malloc(sizeof *e * (size_t)l->channels);
    if (!e) return QF_ERR_NOMEM;
    for (int64_t c = 0; c < l->channels; c++)
        e[c] = bc_mean(l->sum_q, c, l->count_q) - bc_mean(l->sum_f, c, l->count_f);
    qf_status st = bc_apply_errors(l, e, stats);
    qf_free(e);
    return st;
}

qf_status qf_quant_bias_correct(qf_graph *q, qf_graph *f, const qf_data_source *data, int64_t max_samples,
                                int64_t batch, qf_quant_bc_stats *stats)
{
    memset(stats, 0, sizeof *stats);
    int64_t n = data->ninputs >= 1 && data->inputs[0]->ndim >= 1 ? data->inputs[0]->dims[0] : 0;
    if (max_samples > 0 && max_samples < n) n = max_samples;
    if (n < 1) return qf_error(QF_ERR_SHAPE, "bias correction: the calibration data holds no samples");
    bc_run r = {0};
    int nstages = 0;
    qf_status st = bc_prepare(q, f, data, n, batch, &r, &nstages, stats);
    for (int s = 1; s <= nstages && st == QF_OK; s++) {
        r.stage = s;
        st = bc_pass(q, data, n, batch, &r, bc_hook_q);
        stats->passes++;
        for (int k = 0; k < r.nlayers && st == QF_OK; k++)
            if (r.layers[k].stage == s) st = bc_apply(&r.layers[k], stats);
    }
    stats->samples = n;
    bc_free(&r);
    return st;
}

void qf_quant_bias_errors_free(qf_quant_bias_error *e, int count)
{
    for (int i = 0; e && i < count; i++) {
        qf_free(e[i].name);
        qf_free(e[i].mean_error);
        qf_free(e[i].bias_scale);
    }
    qf_free(e);
}

qf_status qf_quant_bias_errors(qf_graph *q, qf_graph *f, const qf_data_source *data, int64_t max_samples,
                               int64_t batch, qf_quant_bias_error **out, int *count)
{
    *out = NULL;
    *count = 0;
    int64_t n = data->ninputs >= 1 && data->inputs[0]->ndim >= 1 ? data->inputs[0]->dims[0] : 0;
    if (max_samples > 0 && max_samples < n) n = max_samples;
    if (n < 1) return qf_error(QF_ERR_SHAPE, "bias errors: the data holds no samples");
    /* Every layer in one run of q: stage 0 marks them all. */
    bc_run r = {0};
    int nstages = 0;
    qf_quant_bc_stats stats = {0};
    /* on a copy: a layer without a bias gets one of zeros (the same outputs) */
    qf_graph *qc = NULL;
    qf_status st = qf_graph_clone(q, &qc);
    if (st == QF_OK) st = bc_prepare(qc, f, data, n, batch, &r, &nstages, &stats);
    for (int k = 0; k < r.nlayers; k++) r.layers[k].stage = 1;
    r.stage = 1;
    if (st == QF_OK && r.nlayers) st = bc_pass(qc, data, n, batch, &r, bc_hook_q);
    qf_quant_bias_error *e = st == QF_OK ? qf_calloc((size_t)(r.nlayers ? r.nlayers : 1), sizeof *e) : NULL;
    if (st == QF_OK && !e) st = QF_ERR_NOMEM;
    for (int k = 0; k < r.nlayers && st == QF_OK; k++) {
        bc_layer *l = &r.layers[k];
        const qf_value *bs = bc_dq_const(l->node->inputs[2], 1);
        int64_t ns = qf_tensor_numel(&bs->type);
        e[k].name = qf_strdup(l->node->name);
        e[k].channels = l->channels;
        e[k].mean_error = qf_malloc(sizeof *e[k].mean_error * (size_t)l->channels);
        e[k].bias_scale = qf_malloc(sizeof *e[k].bias_scale * (size_t)l->channels);
        *count = k + 1;
        if (!e[k].name || !e[k].mean_error || !e[k].bias_scale) {
            st = QF_ERR_NOMEM;
            break;
        }
        for (int64_t c = 0; c < l->channels; c++) {
            e[k].mean_error[c] = bc_mean(l->sum_q, c, l->count_q) - bc_mean(l->sum_f, c, l->count_f);
            e[k].bias_scale[c] = ((const float *)bs->type.data)[ns == 1 ? 0 : c];
        }
    }
    bc_free(&r);
    qf_graph_free(qc);
    if (st != QF_OK) {
        qf_quant_bias_errors_free(e, *count);
        *count = 0;
        return st;
    }
    *out = e;
    return QF_OK;
}

/* ---- The data-free form (Nagel et al. 2019, section 4.2) ----
 *
 * A layer y = W x + b quantized to y_q = W_q x + b has the mean error
 * E[y_q - y] = (W_q - W) E[x] per output channel from its own weights (the
 * activation grids' rounding averages out; the errors of the layers before
 * it are the empirical form's). E[x] without data: when x is the output of
 * a layer whose BatchNorm the fold consumed, that output is, per channel,
 * N(beta, gamma'^2) (gamma' = |gamma| sqrt(var / (var + eps)), what the
 * BatchNorm makes of an input with its running statistics); through
 * clip(., lo, hi) (ReLU: [0, inf), ReLU6: [0, 6], Clip) its mean is the
 * clipped normal's:
 *
 *   E[clip(X, lo, hi)] = lo Phi(a) + hi (1 - Phi(b)) + m (Phi(b) - Phi(a)) + s (phi(a) - phi(b)),
 *   a = (lo - m) / s, b = (hi - m) / s
 *
 * and an average pool or a Flatten keeps each channel's mean. Padding is
 * ignored (a border output's sum has fewer taps), as in the paper.
 *
 * Cross-layer equalization runs after the fold and rescales a channel's
 * output (W[c] / s_c, b[c] / s_c): the statistics follow it through the
 * ratio of the float graph's bias to the bias the fold wrote (the anchor). */

static void bn_entry_free(qf_quant_bn_entry *e)
{
    qf_free(e->name);
    qf_free(e->input);
    qf_free(e->mean);
    qf_free(e->std);
    qf_free(e->anchor);
}

void qf_quant_bn_stats_free(qf_quant_bn_stats *s)
{
    if (!s) return;
    for (int i = 0; i < s->count; i++) bn_entry_free(&s->entries[i]);
    qf_free(s->entries);
    qf_free(s);
}

static bool bn_is_layer(qf_op op)
{
    return op == QF_OP_CONV || op == QF_OP_CONV_TRANSPOSE || op == QF_OP_GEMM || op == QF_OP_MATMUL ||
           op == QF_OP_LINEAR;
}

static qf_status bn_stats_alloc(qf_quant_bn_stats **out, int cap)
{
    *out = qf_calloc(1, sizeof **out);
    if (!*out) return QF_ERR_NOMEM;
    (*out)->entries = qf_calloc((size_t)(cap > 0 ? cap : 1), sizeof *(*out)->entries);
    if (!(*out)->entries) {
        qf_free(*out);
        *out = NULL;
        return QF_ERR_NOMEM;
    }
    return QF_OK;
}

qf_status qf_quant_bn_stats_collect(const qf_graph *g, qf_quant_bn_stats **out)
{
    QF_TRY(bn_stats_alloc(out, g->nnodes));
    qf_quant_bn_stats *s = *out;
    for (const qf_node *n = g->first; n; n = n->next) {
        if (n->op != QF_OP_BATCH_NORM || n->ninputs < 5 || n->noutputs != 1) continue;
        if (qf_node_attr_int(n, "training_mode", 0)) continue;
        const qf_value *x = n->inputs[0];
        if (!x || !x->producer || !bn_is_layer(x->producer->op) || x->nuses != 1 || x->is_output) continue;
        bool consts = true;
        for (int i = 1; i < 5; i++) consts = consts && n->inputs[i] && qf_value_is_const(n->inputs[i]);
        if (!consts) continue;
        int64_t c = qf_tensor_numel(&n->inputs[1]->type);
        for (int i = 2; i < 5; i++) consts = consts && qf_tensor_numel(&n->inputs[i]->type) == c;
        if (!consts || c < 1) continue;
        qf_quant_bn_entry *e = &s->entries[s->count];
        e->name = qf_strdup(n->outputs[0]->name);
        e->input = qf_strdup(x->name);
        e->channels = c;
        e->mean = qf_malloc(sizeof *e->mean * (size_t)c);
        e->std = qf_malloc(sizeof *e->std * (size_t)c);
        if (!e->name || !e->input || !e->mean || !e->std) {
            bn_entry_free(e);
            qf_quant_bn_stats_free(s);
            *out = NULL;
            return QF_ERR_NOMEM;
        }
        double eps = (double)qf_node_attr_float(n, "epsilon", 1e-5f);
        bool finite = true;
        for (int64_t k = 0; k < c; k++) {
            double gamma = qf_tensor_get_f64(&n->inputs[1]->type, k), var = qf_tensor_get_f64(&n->inputs[4]->type, k);
            e->mean[k] = qf_tensor_get_f64(&n->inputs[2]->type, k);
            e->std[k] = fabs(gamma) * sqrt(var / (var + eps));
            finite = finite && isfinite(e->mean[k]) && isfinite(e->std[k]) && var + eps > 0;
        }
        if (!finite) {
            bn_entry_free(e);
            memset(e, 0, sizeof *e);
            continue;
        }
        s->count++;
    }
    return QF_OK;
}

/* The folded layer's output in g: the name the fold kept (the BatchNorm's
 * output's, or its input's when the BatchNorm output was a graph output). */
static const qf_value *bn_entry_value(const qf_graph *g, const qf_quant_bn_entry *e)
{
    const qf_value *v = qf_graph_find_value(g, e->name);
    if (!v || !v->producer || !bn_is_layer(v->producer->op)) v = qf_graph_find_value(g, e->input);
    return v && v->producer && bn_is_layer(v->producer->op) ? v : NULL;
}

/* The constant float bias of layer n (its input 2), or NULL. */
static const qf_value *bn_layer_bias(const qf_node *n)
{
    const qf_value *b = n && n->ninputs > 2 ? n->inputs[2] : NULL;
    return b && qf_value_is_const(b) && b->type.dtype == QF_DTYPE_F32 ? b : NULL;
}

qf_status qf_quant_bn_stats_anchor(const qf_quant_bn_stats *s, const qf_graph *g, qf_quant_bn_stats **out)
{
    QF_TRY(bn_stats_alloc(out, s->count));
    qf_quant_bn_stats *a = *out;
    qf_status st = QF_OK;
    for (int i = 0; i < s->count && st == QF_OK; i++) {
        const qf_quant_bn_entry *e = &s->entries[i];
        qf_quant_bn_entry *d = &a->entries[a->count++];
        size_t sz = sizeof(double) * (size_t)e->channels;
        d->name = qf_strdup(e->name);
        d->input = qf_strdup(e->input);
        d->channels = e->channels;
        d->mean = qf_malloc(sz);
        d->std = qf_malloc(sz);
        if (!d->name || !d->input || !d->mean || !d->std) {
            st = QF_ERR_NOMEM;
            break;
        }
        memcpy(d->mean, e->mean, sz);
        memcpy(d->std, e->std, sz);
        const qf_value *v = bn_entry_value(g, e);
        const qf_value *b = v ? bn_layer_bias(v->producer) : NULL;
        if (!b || qf_tensor_numel(&b->type) != e->channels) continue;
        d->anchor = qf_malloc(sz);
        if (!d->anchor) st = QF_ERR_NOMEM;
        for (int64_t k = 0; st == QF_OK && k < e->channels; k++) d->anchor[k] = ((const float *)b->type.data)[k];
    }
    if (st != QF_OK) {
        qf_quant_bn_stats_free(a);
        *out = NULL;
    }
    return st;
}

static double bn_phi(double x) { return exp(-0.5 * x * x) * 0.39894228040143267794; /* 1 / sqrt(2 pi) */ }
static double bn_Phi(double x) { return 0.5 * erfc(-x / sqrt(2.0)); }

/* E[clip(X, lo, hi)] for X ~ N(m, s^2) (lo / hi may be -inf / inf). */
static double bn_clipped_mean(double m, double s, double lo, double hi)
{
    if (!(s > 0)) return m < lo ? lo : m > hi ? hi : m;
    double a = (lo - m) / s, b = (hi - m) / s;
    double Pa = isinf(lo) ? 0.0 : bn_Phi(a), Pb = isinf(hi) ? 1.0 : bn_Phi(b);
    double pa = isinf(lo) ? 0.0 : bn_phi(a), pb = isinf(hi) ? 0.0 : bn_phi(b);
    double r = m * (Pb - Pa) + s * (pa - pb);
    if (!isinf(lo)) r += lo * Pa;
    if (!isinf(hi)) r += hi * (1.0 - Pb);
    return r;
}

/* A scalar float constant input i of n (or dflt when absent). */
static bool bn_scalar_input(const qf_node *n, int i, double dflt, double *v)
{
    *v = dflt;
    if (i >= n->ninputs || !n->inputs[i]) return true;
    const qf_value *c = n->inputs[i];
    if (!qf_value_is_const(c) || qf_tensor_numel(&c->type) != 1) return false;
    *v = qf_tensor_get_f64(&c->type, 0);
    return true;
}

/* The expected value of every feature of float layer fn's input: E[x][k]
 * for k < K (the input's axis-1 size); false when it has no statistics. */
static bool bn_expected_input(const qf_node *fn, const qf_quant_bn_stats *bn, int64_t K, double *ex)
{
    const qf_value *v = fn->inputs[0];
    double lo = -INFINITY, hi = INFINITY;
    bool clipped = false;
    /* Walk back: the mean-keeping ops (pools, Flatten) only above any clip
     * (the mean of a clip is not the clip of a mean). */
    for (int steps = 0; v && v->producer && steps < 16; steps++) {
        const qf_node *p = v->producer;
        double a, b;
        if (p->op == QF_OP_RELU) {
            lo = lo > 0 ? lo : 0;
        } else if (p->op == QF_OP_RELU6) {
            lo = lo > 0 ? lo : 0;
            hi = hi < 6 ? hi : 6;
        } else if (p->op == QF_OP_CLIP && bn_scalar_input(p, 1, (double)qf_node_attr_float(p, "min", -INFINITY), &a) &&
                   bn_scalar_input(p, 2, (double)qf_node_attr_float(p, "max", INFINITY), &b)) {
            lo = lo > a ? lo : a;
            hi = hi < b ? hi : b;
        } else if (!clipped && (p->op == QF_OP_AVG_POOL || p->op == QF_OP_GLOBAL_AVG_POOL || p->op == QF_OP_FLATTEN ||
                                p->op == QF_OP_RESHAPE)) {
            v = p->inputs[0];
            continue;
        } else {
            break;
        }
        clipped = true;
        v = p->inputs[0];
    }
    if (!v || !v->producer || v->producer->op == QF_OP_BATCH_NORM || !bn_is_layer(v->producer->op)) return false;
    const qf_quant_bn_entry *e = NULL;
    for (int i = 0; i < bn->count && !e; i++)
        if (!strcmp(bn->entries[i].name, v->name) || !strcmp(bn->entries[i].input, v->name)) e = &bn->entries[i];
    if (!e || K % e->channels) return false;
    const qf_value *b = bn_layer_bias(v->producer);
    int64_t per = K / e->channels;
    for (int64_t c = 0; c < e->channels; c++) {
        /* the channel's rescaling since the fold (equalization): its bias's */
        double r = 1.0;
        if (e->anchor && b && qf_tensor_numel(&b->type) == e->channels && e->anchor[c] != 0.0) {
            r = ((const float *)b->type.data)[c] / e->anchor[c];
            if (!(r > 0) || !isfinite(r)) return false;
        }
        double m = bn_clipped_mean(e->mean[c] * r, e->std[c] * r, lo, hi);
        for (int64_t k = 0; k < per; k++) ex[c * per + k] = m;
    }
    return true;
}

/* The dequantized weight W_q of a DequantizeLinear of constants (axis as ONNX: default 1). */
static qf_status bn_dequantized(const qf_value *w, double **out)
{
    const qf_node *dq = w->producer;
    const qf_tensor *q = &dq->inputs[0]->type, *s = &dq->inputs[1]->type;
    const qf_tensor *z = dq->ninputs > 2 && dq->inputs[2] && qf_value_is_const(dq->inputs[2]) ? &dq->inputs[2]->type
                                                                                                 : NULL;
    int64_t n = qf_tensor_numel(q), ns = qf_tensor_numel(s);
    int axis = (int)qf_node_attr_int(dq, "axis", 1);
    if (axis < 0) axis += q->ndim;
    int64_t inner = 1;
    for (int d = axis + 1; d < q->ndim; d++) inner *= q->dims[d];
    if (ns > 1 && (axis < 0 || axis >= q->ndim || q->dims[axis] != ns))
        return qf_error(QF_ERR_SHAPE, "bias correction: weight scale of %lld entries on axis %d of '%s'",
                        (long long)ns, axis, w->name);
    double *d = qf_malloc(sizeof *d * (size_t)(n ? n : 1));
    if (!d) return QF_ERR_NOMEM;
    for (int64_t i = 0; i < n; i++) {
        int64_t c = ns > 1 ? (i / inner) % ns : 0;
        double zp = z ? qf_tensor_get_f64(z, qf_tensor_numel(z) > 1 ? c : 0) : 0.0;
        d[i] = (qf_tensor_get_f64(q, i) - zp) * (double)((const float *)s->data)[c];
    }
    *out = d;
    return QF_OK;
}

/* e[o] = sum (W_q - W)[o, ...] E[x] for layer l (fn: its float node);
 * false when the layer's form is not one this handles. */
static qf_status bn_layer_error(const bc_layer *l, const qf_node *fn, const double *ex, int64_t K, double *e,
                                bool *ok)
{
    *ok = false;
    const qf_value *wf = fn->ninputs > 1 ? fn->inputs[1] : NULL;
    const qf_value *wq = l->node->inputs[1];
    const qf_tensor *qt = &wq->producer->inputs[0]->type;
    if (!wf || !qf_value_is_const(wf) || wf->type.dtype != QF_DTYPE_F32 || wf->type.ndim != qt->ndim ||
        qf_tensor_numel(&wf->type) != qf_tensor_numel(qt))
        return QF_OK;
    int64_t O = l->channels, n = qf_tensor_numel(qt);
    double alpha = 1.0;
    bool trans = false; /* W stored [K, O] */
    int64_t per_group_in = 0, per_group_out = 1, taps = 1;
    if (l->node->op == QF_OP_CONV) {
        int64_t groups = qf_node_attr_int(l->node, "group", 1);
        if (qt->ndim < 3 || qt->dims[0] != O || groups < 1 || O % groups || qt->dims[1] * groups != K) return QF_OK;
        per_group_in = qt->dims[1];
        per_group_out = O / groups;
        taps = n / (O * per_group_in);
    } else if (l->node->op == QF_OP_GEMM) {
        if (qf_node_attr_int(l->node, "transA", 0) || qf_node_attr_float(l->node, "beta", 1.0f) != 1.0f) return QF_OK;
        alpha = qf_node_attr_float(l->node, "alpha", 1.0f);
        trans = !qf_node_attr_int(l->node, "transB", 0);
        per_group_in = K;
        per_group_out = O;
    } else if (l->node->op == QF_OP_MATMUL) {
        trans = true;
        per_group_in = K;
        per_group_out = O;
    } else if (l->node->op == QF_OP_LINEAR) {
        per_group_in = K;
        per_group_out = O;
    } else {
        return QF_OK; /* ConvTranspose: a varying number of taps per output position */
    }
    if (qt->ndim == 2 && qt->dims[trans ? 0 : 1] != K) return QF_OK;
    double *w = NULL;
    QF_TRY(bn_dequantized(wq, &w));
    const float *wfd = wf->type.data;
    for (int64_t o = 0; o < O; o++) {
        int64_t base = (o / per_group_out) * per_group_in;
        double acc = 0.0;
        for (int64_t ci = 0; ci < per_group_in; ci++)
            for (int64_t t = 0; t < taps; t++) {
                int64_t i = trans ? ci * O + o : (o * per_group_in + ci) * taps + t;
                acc += (w[i] - (double)wfd[i]) * ex[base + ci];
            }
        e[o] = alpha * acc;
    }
    qf_free(w);
    *ok = true;
    return QF_OK;
}

qf_status qf_quant_bias_correct_analytic(qf_graph *q, const qf_graph *f, const qf_quant_bn_stats *bn,
                                         qf_quant_bc_stats *stats)
{
    memset(stats, 0, sizeof *stats);
    bc_run r = {0};
    qf_status st = qf_graph_toposort(q);
    if (st == QF_OK) st = bc_find_layers(q, f, &r, stats, false);
    bool added = false;
    for (int k = 0; k < r.nlayers && st == QF_OK; k++) {
        bc_layer *l = &r.layers[k];
        const qf_node *fn = f->values[l->f_id]->producer;
        const qf_value *x = l->node->inputs[0];
        int64_t K = x->type.ndim >= 2 ? x->type.dims[1] : 0;
        double *ex = K > 0 ? qf_malloc(sizeof *ex * (size_t)K) : NULL;
        double *e = qf_malloc(sizeof *e * (size_t)l->channels);
        bool ok = false;
        if (K > 0 && (!ex || !e)) st = QF_ERR_NOMEM;
        if (st == QF_OK && ex && bn && bn_expected_input(fn, bn, K, ex)) st = bn_layer_error(l, fn, ex, K, e, &ok);
        if (st == QF_OK && ok && l->need_bias) {
            st = bc_add_bias(q, l->node, l->channels);
            stats->added++;
            added = true;
        }
        if (st == QF_OK && ok) st = bc_apply_errors(l, e, stats);
        if (st == QF_OK && !ok) stats->skipped++;
        qf_free(ex);
        qf_free(e);
    }
    if (st == QF_OK && added) st = qf_graph_toposort(q);
    if (st == QF_OK && added) st = qf_graph_infer_shapes(q);
    bc_free(&r);
    return st;
}
