/* The training loop (qfold/train.h): batches, the loss node, the backward
 * tape, the optimizer, validation.
 *
 * qf_train works on the caller's graph and leaves it as an inference graph
 * again (same inputs, outputs and shapes as before):
 *
 *   inputs x ... ──▶ (the model) ──▶ output 0 ──▶ loss ◀── qf_train_labels
 *                                                   │         (a graph input
 *                                                   ▼          added here)
 *                                                 scalar
 *
 * The loss node (SoftmaxCrossEntropyLoss with int64 labels, or the internal
 * mse_loss, both with mean reduction as torch's defaults) and the labels input
 * are appended at the start and removed at the end, whatever happens in
 * between. The graph's batch dimension is set to the batch size; a training
 * plan (qf_grad_plan) is built for it, and another for the epoch's last,
 * shorter batch (torch's drop_last=False): the graph's shapes may not change
 * under a plan, so the plans take turns, the second built only when an epoch
 * reaches its short batch. Validation runs the same plan in inference mode,
 * its last batch padded by repeating the last sample (rows are independent in
 * inference), so it needs no plan of its own.
 *
 * Parameters (QF_VALUE_PARAMETER constants minus the frozen names) are
 * updated in place in their values' payloads by the optimizer; buffers (BN
 * running statistics) by the training forward. Every such payload is made
 * writable first (a borrowed, shared one is copied). A step whose loss or
 * gradient is NaN / Inf stops training before the optimizer writes anything:
 * the buffers the forward already updated are put back from a copy taken
 * before the step, so g holds the values before that step.
 *
 * The shuffled order is a Fisher-Yates shuffle driven by splitmix64 (see
 * qf_train_order): the same seed gives the same order, on every machine.
 */
#include <math.h>
#include <string.h>

#include "core/rand.h"
#include "core/clock.h"
#include "qfold/schema.h"
#include "qfold/train.h"

#define QF_TRAIN_MAX_INPUTS 16

qf_train_config qf_train_defaults(void)
{
    return (qf_train_config){
        .epochs = 1,
        .batch = 32,
        .optim = {.kind = QF_OPTIM_SGD, .lr = 0.01},
        .sched = {.kind = QF_SCHED_CONSTANT},
        .loss = QF_LOSS_CROSS_ENTROPY,
        .seed = 0,
        .shuffle = true,
    };
}

/* --- the random order --------------------------------------------------------- */

/* The sample order of one epoch: file order without shuffling; else the
 * previous epoch's order shuffled by Fisher-Yates (for i = n-1 down to 1,
 * swap i with a uniform j in [0, i]), the generator seeded once with the
 * run's seed and continued from epoch to epoch. */
static void qf_train_order(int64_t *order, int64_t n, bool shuffle, uint64_t *rng)
{
    if (!shuffle) {
        for (int64_t i = 0; i < n; i++) order[i] = i;
        return;
    }
    qf_rand_shuffle(order, n, rng);
}

/* Dropout's stream of step `step`: the run's seed and the step, mixed. */
static uint64_t qf_train_step_seed(uint64_t seed, int64_t step)
{
    uint64_t s = seed ^ 0xd1b54a32d192ed03ull;
    s += (uint64_t)step * QF_SPLITMIX_GAMMA;
    return qf_splitmix64(&s);
}

/* --- the trainer's state ------------------------------------------------------ */

typedef struct qf_trainer {
    qf_graph *g;
    const qf_train_config *c;
    int nin;                      /* data inputs (the graph's inputs before the labels) */
    int64_t n;                    /* training samples */
    int64_t batch;                /* the configured batch size, at most n */
    int64_t classes;              /* cross-entropy: output 0's dims[1] */
    int64_t label_elems;          /* label elements per sample (1 for cross-entropy) */
    size_t label_bytes;           /* per sample */
    size_t row_bytes[QF_TRAIN_MAX_INPUTS];
    int in_ndim[QF_TRAIN_MAX_INPUTS];
    int64_t in_dims[QF_TRAIN_MAX_INPUTS][QF_MAX_DIMS]; /* the inputs' dims as found */
    int64_t data_dims[QF_TRAIN_MAX_INPUTS][QF_MAX_DIMS]; /* the data's (sample dims) */
    qf_value *labels_in;          /* the added graph input */
    qf_node *loss;                /* the added loss node */
    qf_value **params;            /* trained (not frozen), value id order */
    qf_tensor **ptensors;         /* their payloads, for the optimizer */
    const qf_tensor **grads;      /* their gradients of the current step */
    int nparams;
    qf_value **buffers;           /* BN running statistics */
    int nbuffers;
    qf_tensor *snap;              /* the buffers before the current step */
    qf_optimizer *opt;
    qf_grad_plan *gp;
    int64_t gp_batch;             /* the batch size gp was built for (0: none) */
    void *xbuf[QF_TRAIN_MAX_INPUTS]; /* one batch of each input */
    void *ybuf;                   /* one batch of labels */
    int64_t *order;
} qf_trainer;

static const char *qf_train_loss_name(qf_loss_kind k)
{
    return k == QF_LOSS_MSE ? "mse" : "cross-entropy";
}

/* --- checks of the inputs ----------------------------------------------------- */

static qf_status qf_train_check_config(const qf_train_config *c)
{
    if (c->epochs < 1) return qf_error(QF_ERR_INVALID, "epochs must be at least 1, got %d", c->epochs);
    if (c->batch < 1) return qf_error(QF_ERR_INVALID, "the batch size must be at least 1, got %lld", (long long)c->batch);
    if (!(c->optim.lr > 0) || !isfinite(c->optim.lr))
        return qf_error(QF_ERR_INVALID, "the learning rate must be a positive number, got %g", c->optim.lr);
    if (c->clip_norm < 0 || isnan(c->clip_norm))
        return qf_error(QF_ERR_INVALID, "the gradient clipping norm must be positive (0: no clipping), got %g",
                        c->clip_norm);
    if (c->loss != QF_LOSS_CROSS_ENTROPY && c->loss != QF_LOSS_MSE)
        return qf_error(QF_ERR_INVALID, "unknown loss %d", (int)c->loss);
    return QF_OK;
}

/* The data of a source against the graph's inputs: one source input per
 * graph input, qf_data_check's dtype and sample dims, the same sample count
 * everywhere. `what` names the set in messages ("data", "validation data"). */
static qf_status qf_train_check_source(const qf_trainer *t, const qf_data_source *src, const char *what)
{
    const qf_graph *g = t->g;
    if (src->ninputs != t->nin)
        return qf_error(QF_ERR_INVALID, "%s: the graph has %d input%s, the data %d", what, t->nin,
                        t->nin == 1 ? "" : "s", src->ninputs);
    int64_t n = src->inputs[0]->ndim >= 1 ? src->inputs[0]->dims[0] : 0;
    for (int i = 0; i < t->nin; i++) {
        qf_status st = qf_data_check(g->inputs[i], src->inputs[i]);
        if (st != QF_OK) return qf_error_prefix(st, "%s: ", what);
        if (src->inputs[i]->dims[0] != n)
            return qf_error(QF_ERR_SHAPE, "%s: input '%s' has %lld samples, input '%s' %lld", what,
                            g->inputs[i]->name, (long long)src->inputs[i]->dims[0], g->inputs[0]->name, (long long)n);
    }
    return QF_OK;
}

/* Labels for n samples: int64 [n] class indices in [0, classes) for
 * cross-entropy, float32 [n, output 0's sample dims] for MSE. */
static qf_status qf_train_check_labels(const qf_trainer *t, const qf_tensor *y, int64_t n, const char *what)
{
    char got[160], want[160];
    const qf_tensor *o = &t->g->outputs[0]->type;
    if (t->c->loss == QF_LOSS_CROSS_ENTROPY) {
        if (y->dtype != QF_DTYPE_I64)
            return qf_error(QF_ERR_INVALID, "%s: dtype %s, expected int64 class indices", what,
                            qf_dtype_name(y->dtype));
        if (y->ndim != 1 || y->dims[0] != n)
            return qf_error(QF_ERR_SHAPE, "%s: shape %s, expected [%lld] (one class index per sample)", what,
                            qf_shape_str(y->ndim, y->dims, got, sizeof got), (long long)n);
        const int64_t *l = y->data;
        for (int64_t i = 0; i < n; i++)
            if (l[i] < 0 || l[i] >= t->classes)
                return qf_error(QF_ERR_INVALID, "%s: label %lld of sample %lld is out of range: the model has %lld "
                                "classes", what, (long long)l[i], (long long)i, (long long)t->classes);
        return QF_OK;
    }
    int64_t dims[QF_MAX_DIMS];
    memcpy(dims, o->dims, sizeof dims);
    dims[0] = n;
    if (y->dtype != QF_DTYPE_F32)
        return qf_error(QF_ERR_INVALID, "%s: dtype %s, expected float32 targets", what, qf_dtype_name(y->dtype));
    if (!qf_shape_equal(y->ndim, y->dims, o->ndim, dims))
        return qf_error(QF_ERR_SHAPE, "%s: shape %s, expected %s (the model's output '%s' per sample)", what,
                        qf_shape_str(y->ndim, y->dims, got, sizeof got), qf_shape_str(o->ndim, dims, want, sizeof want),
                        t->g->outputs[0]->name);
    const float *f = y->data;
    for (int64_t i = 0, m = qf_tensor_numel(y); i < m; i++)
        if (!isfinite(f[i]))
            return qf_error(QF_ERR_NUMERIC, "%s: element %lld is %s", what, (long long)i, isnan(f[i]) ? "NaN" : "infinite");
    return QF_OK;
}

/* --- the graph: batch size, loss node, parameters ---------------------------- */

/* Every data input's batch dimension set to `count` (written directly: a
 * model exported with a fixed batch trains at any batch size), every shape
 * inferred again. */
static qf_status qf_train_set_batch(qf_trainer *t, int64_t count)
{
    qf_graph *g = t->g;
    for (int i = 0; i < t->nin; i++) {
        qf_value *v = g->inputs[i];
        memcpy(v->type.dims, t->data_dims[i], sizeof v->type.dims);
        v->type.dims[0] = count;
    }
    if (t->labels_in) t->labels_in->type.dims[0] = count;
    qf_status st = qf_graph_infer_shapes(g);
    if (st != QF_OK) return qf_error_prefix(st, "at batch size %lld: ", (long long)count);
    return QF_OK;
}

/* Output 0 as the loss needs it; t->classes for cross-entropy. */
static qf_status qf_train_check_output(qf_trainer *t)
{
    const qf_value *o = t->g->outputs[0];
    char got[160];
    if (o->type.dtype != QF_DTYPE_F32)
        return qf_error(QF_ERR_UNSUPPORTED, "output '%s' is %s: training needs float32 outputs", o->name,
                        qf_dtype_name(o->type.dtype));
    if (t->c->loss == QF_LOSS_CROSS_ENTROPY) {
        if (o->type.ndim != 2 || o->type.dims[1] < 1)
            return qf_error(QF_ERR_UNSUPPORTED, "output '%s' has shape %s: the cross-entropy loss needs class scores "
                            "[batch, classes]", o->name, qf_shape_str(o->type.ndim, o->type.dims, got, sizeof got));
        t->classes = o->type.dims[1];
        t->label_elems = 1;
        t->label_bytes = sizeof(int64_t);
    } else {
        if (o->type.ndim < 1)
            return qf_error(QF_ERR_UNSUPPORTED, "output '%s' is a scalar: the MSE loss needs a batch dimension", o->name);
        t->label_elems = qf_shape_numel(o->type.ndim - 1, o->type.dims + 1);
        t->label_bytes = (size_t)t->label_elems * sizeof(float);
    }
    return QF_OK;
}

/* The labels input and the loss node reading output 0 (batch `count`). */
static qf_status qf_train_attach_loss(qf_trainer *t, int64_t count)
{
    qf_graph *g = t->g;
    const qf_tensor *o = &g->outputs[0]->type;
    int64_t dims[QF_MAX_DIMS];
    memcpy(dims, o->dims, sizeof dims);
    dims[0] = count;
    bool ce = t->c->loss == QF_LOSS_CROSS_ENTROPY;
    t->labels_in = qf_graph_add_input(g, "qf_train_labels", ce ? QF_DTYPE_I64 : QF_DTYPE_F32, ce ? 1 : o->ndim, dims);
    if (!t->labels_in) return QF_ERR_NOMEM;
    qf_value *in[2] = {g->outputs[0], t->labels_in};
    t->loss = qf_graph_add_node(g, ce ? QF_OP_SOFTMAX_CE_LOSS : QF_OP_MSE_LOSS, "qf_train_loss", 2, in, 1);
    if (!t->loss) return QF_ERR_NOMEM;
    qf_status st = qf_node_infer(g, t->loss);
    if (st != QF_OK) return qf_error_prefix(st, "the %s loss: ", qf_train_loss_name(t->c->loss));
    return QF_OK;
}

/* Puts g back as it was found: no loss node, no labels input, the inputs'
 * dims restored and every shape inferred from them. */
static qf_status qf_train_detach(qf_trainer *t)
{
    qf_graph *g = t->g;
    qf_grad_plan_free(t->gp);
    t->gp = NULL;
    t->gp_batch = 0;
    if (t->loss) qf_graph_remove_node(g, t->loss);
    t->loss = NULL;
    if (t->labels_in) qf_graph_remove_value(g, t->labels_in);
    t->labels_in = NULL;
    for (int i = 0; i < t->nin && i < g->ninputs; i++) {
        g->inputs[i]->type.ndim = t->in_ndim[i];
        memcpy(g->inputs[i]->type.dims, t->in_dims[i], sizeof t->in_dims[i]);
    }
    return qf_graph_infer_shapes(g);
}

static bool qf_train_frozen(const qf_train_config *c, const char *name)
{
    for (const char *const *f = c->freeze; f && *f; f++)
        if (strcmp(*f, name) == 0) return true;
    return false;
}

/* A payload the trainer may write: owned, or borrowed and writable; any
 * other is copied first (the caller's bytes are never written). */
static qf_status qf_train_make_writable(qf_value *v)
{
    if (v->type.owns || v->type.writable) return QF_OK;
    qf_tensor copy;
    QF_TRY(qf_tensor_copy(&copy, &v->type));
    qf_value_set_data(v, &copy);
    return QF_OK;
}

/* The training forward updates a BatchNorm's running statistics in place:
 * each must be a buffer of its own. torch.onnx.export merges equal
 * initializers, so a freshly initialized model (running variance = scale =
 * ones, running mean = shift = zeros) comes with one tensor in several slots,
 * the statistics read through Identity nodes: training would write the
 * running variance over the scale. Such a statistic gets a buffer of its own
 * here, a copy of the tensor, named as the Identity's output was (the name
 * torch gave the statistic); the Identity goes when nothing else reads it.
 * A statistic computed by other nodes is refused. */
/* v, a BatchNorm's running statistic, is a buffer that the BN alone
 * updates: the BN reads it once, and every other reader is QAT's simulated
 * fusion (qat_bn_weight / qat_bn_output read the running variance and must
 * see each update, as PyTorch's ConvBn2d reads bn.running_var). */
static bool qf_train_bn_stat_own(const qf_value *v)
{
    if (v->kind != QF_VALUE_BUFFER || !v->type.data) return false;
    int bn_reads = 0;
    for (int u = 0; u < v->nuses; u++) {
        qf_op op = v->uses[u].node->op;
        if (op == QF_OP_BATCH_NORM) bn_reads++;
        else if (op != QF_OP_QAT_BN_WEIGHT && op != QF_OP_QAT_BN_OUTPUT) return false;
    }
    return bn_reads == 1;
}

static qf_status qf_train_own_bn_stats(qf_graph *g)
{
    static const char *const what[5] = {"", "scale", "shift", "running mean", "running variance"};
    qf_graph_for_each_node(g, n)
    {
        if (n->op != QF_OP_BATCH_NORM || n->ninputs < 5) continue;
        for (int i = 3; i < 5; i++) {
            qf_value *v = n->inputs[i];
            if (!v || qf_train_bn_stat_own(v)) continue;
            qf_node *id = v->producer && v->producer->op == QF_OP_IDENTITY ? v->producer : NULL;
            const qf_value *src = id ? id->inputs[0] : v;
            if (!qf_value_is_const(src) || v->is_output)
                return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (BatchNormalization): its %s '%s' is computed by "
                                "the graph: training updates it in place, so it must be an initializer", n->name,
                                what[i], v->name);
            qf_tensor copy;
            QF_TRY(qf_tensor_copy(&copy, &src->type));
            qf_value *own = qf_graph_add_constant(g, NULL, QF_VALUE_BUFFER, &copy);
            if (!own) {
                qf_tensor_free(&copy);
                return QF_ERR_NOMEM;
            }
            const char *name = v->name;
            QF_TRY(qf_node_set_input(g, n, i, own));
            if (id && !v->nuses) {
                qf_graph_remove_node(g, id);
                QF_TRY(qf_graph_rename_value(g, own, name));
            }
        }
    }
    return QF_OK;
}

/* The parameters to train (value id order: the model's initializer order),
 * the buffers, every freeze name checked. */
static qf_status qf_train_collect(qf_trainer *t)
{
    qf_graph *g = t->g;
    const qf_train_config *c = t->c;
    QF_TRY(qf_train_own_bn_stats(g));
    for (const char *const *f = c->freeze; f && *f; f++) {
        const qf_value *v = qf_graph_find_value(g, *f);
        if (!v || !v->type.data || (v->kind != QF_VALUE_PARAMETER && v->kind != QF_VALUE_BUFFER))
            return qf_error(QF_ERR_INVALID, "freeze: the model has no parameter named '%s'", *f);
        if (v->kind == QF_VALUE_BUFFER)
            return qf_error(QF_ERR_INVALID, "freeze: '%s' is a buffer (a BatchNorm running statistic), not a "
                            "parameter: the training forward updates it", *f);
    }
    t->params = qf_calloc((size_t)g->nvalues + 1, sizeof *t->params);
    t->buffers = qf_calloc((size_t)g->nvalues + 1, sizeof *t->buffers);
    if (!t->params || !t->buffers) return QF_ERR_NOMEM;
    for (int i = 0; i < g->nvalues; i++) {
        qf_value *v = g->values[i];
        if (!v || !v->type.data || !v->nuses) continue;
        if (v->kind != QF_VALUE_PARAMETER && v->kind != QF_VALUE_BUFFER) continue;
        if (v->kind == QF_VALUE_PARAMETER && qf_train_frozen(c, v->name)) continue;
        if (v->type.dtype != QF_DTYPE_F32)
            return qf_error(QF_ERR_UNSUPPORTED, "%s '%s' is %s: training needs float32 (freeze it to keep it as is)",
                            v->kind == QF_VALUE_PARAMETER ? "parameter" : "buffer", v->name, qf_dtype_name(v->type.dtype));
        QF_TRY(qf_train_make_writable(v));
        if (v->kind == QF_VALUE_PARAMETER)
            t->params[t->nparams++] = v;
        else
            t->buffers[t->nbuffers++] = v;
    }
    if (!t->nparams)
        return qf_error(QF_ERR_INVALID, "nothing to train: the model has no parameters%s",
                        c->freeze && *c->freeze ? " that are not frozen" : "");
    t->snap = qf_calloc((size_t)t->nbuffers + 1, sizeof *t->snap);
    if (!t->snap) return QF_ERR_NOMEM;
    for (int i = 0; i < t->nbuffers; i++) QF_TRY(qf_tensor_copy(&t->snap[i], &t->buffers[i]->type));
    return QF_OK;
}

/* The training plan for batch size `count` (rebuilt when it changes). */
static qf_status qf_train_use_batch(qf_trainer *t, int64_t count)
{
    if (t->gp && t->gp_batch == count) return QF_OK;
    qf_grad_plan_free(t->gp);
    t->gp = NULL;
    t->gp_batch = 0;
    QF_TRY(qf_train_set_batch(t, count));
    qf_grad_options o = {.loss = t->loss->outputs[0], .nparams = t->nparams,
                         .params = (const qf_value *const *)t->params};
    QF_TRY(qf_grad_plan_init(&t->gp, t->g, &o));
    t->gp_batch = count;
    return QF_OK;
}

/* --- one batch ------------------------------------------------------------------ */

/* Samples idx[0 .. count-1] of src (and their labels from y) into the batch
 * buffers, then rows count .. rows-1 repeating the last one (validation's
 * padding). Consecutive indices are read at once. */
static qf_status qf_train_gather(qf_trainer *t, const qf_data_source *src, const qf_tensor *y, const int64_t *idx,
                                 int64_t count, int64_t rows)
{
    const void *r[QF_TRAIN_MAX_INPUTS];
    for (int64_t k = 0; k < count;) {
        int64_t run = 1;
        while (k + run < count && idx[k + run] == idx[k] + run) run++;
        QF_TRY(src->read(src, idx[k], run, r));
        for (int i = 0; i < t->nin; i++)
            memcpy((char *)t->xbuf[i] + (size_t)k * t->row_bytes[i], r[i], (size_t)run * t->row_bytes[i]);
        memcpy((char *)t->ybuf + (size_t)k * t->label_bytes, (const char *)y->data + (size_t)idx[k] * t->label_bytes,
               (size_t)run * t->label_bytes);
        k += run;
    }
    for (int64_t k = count; k < rows; k++) {
        for (int i = 0; i < t->nin; i++)
            memcpy((char *)t->xbuf[i] + (size_t)k * t->row_bytes[i],
                   (char *)t->xbuf[i] + (size_t)(count - 1) * t->row_bytes[i], t->row_bytes[i]);
        memcpy((char *)t->ybuf + (size_t)k * t->label_bytes, (char *)t->ybuf + (size_t)(count - 1) * t->label_bytes,
               t->label_bytes);
    }
    return QF_OK;
}

/* The forward's inputs: views of the batch buffers, `rows` samples. */
static void qf_train_feed(const qf_trainer *t, int64_t rows, qf_tensor *views, const qf_tensor **feed)
{
    for (int i = 0; i < t->nin; i++) {
        int64_t dims[QF_MAX_DIMS];
        memcpy(dims, t->data_dims[i], sizeof dims);
        dims[0] = rows;
        qf_tensor_view(&views[i], t->g->inputs[i]->type.dtype, t->in_ndim[i], dims, t->xbuf[i]);
        feed[i] = &views[i];
    }
    const qf_tensor *l = &t->labels_in->type;
    int64_t dims[QF_MAX_DIMS];
    memcpy(dims, l->dims, sizeof dims);
    dims[0] = rows;
    qf_tensor_view(&views[t->nin], l->dtype, l->ndim, dims, t->ybuf);
    feed[t->nin] = &views[t->nin];
}

/* Sum of per-sample losses and top-1 hits of rows 0 .. count-1 of output 0
 * against the batch's labels, in double (validation's loss, every step's
 * accuracy): cross-entropy log(sum exp(s)) - s[label] with the maximum
 * subtracted first, MSE the mean square over a sample's elements. */
static void qf_train_score(const qf_trainer *t, const qf_tensor *out, int64_t count, double *loss_sum, int64_t *hits)
{
    const float *s = out->data;
    if (t->c->loss == QF_LOSS_CROSS_ENTROPY) {
        const int64_t *lab = t->ybuf;
        int64_t c = t->classes;
        for (int64_t b = 0; b < count; b++) {
            const float *row = s + b * c;
            int64_t best = 0;
            double m = row[0];
            for (int64_t k = 1; k < c; k++) {
                if (row[k] > row[best]) best = k;
                if (row[k] > m) m = row[k];
            }
            double z = 0;
            for (int64_t k = 0; k < c; k++) z += exp((double)row[k] - m);
            *loss_sum += log(z) + m - row[lab[b]];
            *hits += best == lab[b];
        }
        return;
    }
    const float *y = t->ybuf;
    int64_t e = t->label_elems;
    for (int64_t b = 0; b < count; b++) {
        double sq = 0;
        for (int64_t k = 0; k < e; k++) {
            double d = (double)s[b * e + k] - y[b * e + k];
            sq += d * d;
        }
        *loss_sum += e ? sq / (double)e : 0;
    }
}

static void qf_train_snapshot(qf_trainer *t, bool restore)
{
    for (int i = 0; i < t->nbuffers; i++) {
        qf_tensor *v = &t->buffers[i]->type;
        if (restore)
            memcpy(v->data, t->snap[i].data, qf_tensor_nbytes(v));
        else
            memcpy(t->snap[i].data, v->data, qf_tensor_nbytes(v));
    }
}

/* The first non-finite gradient's parameter, for the message. */
static const char *qf_train_bad_grad(const qf_trainer *t, const qf_tensor *const *grads)
{
    for (int i = 0; i < t->nparams; i++) {
        const float *d = grads[i]->data;
        for (int64_t k = 0, m = qf_tensor_numel(grads[i]); k < m; k++)
            if (!isfinite(d[k])) return t->params[i]->name;
    }
    return "?";
}

/* The first parameter with a non-finite element after an update, or NULL:
 * an update of finite gradients can still overflow (a learning rate of
 * 1e308), and a model of -inf weights must not be written. A read of every
 * parameter per step, small next to the step's forward and backward. */
static const qf_value *qf_train_bad_param(const qf_trainer *t)
{
    for (int i = 0; i < t->nparams; i++) {
        const qf_tensor *p = &t->params[i]->type;
        if (p->dtype != QF_DTYPE_F32) continue;
        const float *d = p->data;
        for (int64_t k = 0, m = qf_tensor_numel(p); k < m; k++)
            if (!isfinite(d[k])) return t->params[i];
    }
    return NULL;
}

/* Validation: every sample of val in batches of the training batch size, in
 * inference mode (BN on its running statistics, Dropout off). */
static qf_status qf_train_validate(qf_trainer *t, const qf_data_source *val, const qf_tensor *val_labels,
                                   double *loss, double *acc)
{
    int64_t n = val->inputs[0]->dims[0], b = t->batch;
    QF_TRY(qf_train_use_batch(t, b));
    int64_t *idx = qf_malloc(sizeof *idx * (size_t)b);
    if (!idx) return QF_ERR_NOMEM;
    qf_tensor views[QF_TRAIN_MAX_INPUTS + 1];
    const qf_tensor *feed[QF_TRAIN_MAX_INPUTS + 1];
    double sum = 0;
    int64_t hits = 0;
    qf_status st = QF_OK;
    for (int64_t first = 0; first < n && st == QF_OK; first += b) {
        int64_t count = n - first < b ? n - first : b;
        for (int64_t k = 0; k < count; k++) idx[k] = first + k;
        st = qf_train_gather(t, val, val_labels, idx, count, b);
        qf_train_feed(t, b, views, feed);
        if (st == QF_OK) st = qf_grad_plan_forward(t->gp, feed, t->nin + 1, false);
        if (st == QF_OK) qf_train_score(t, qf_grad_plan_output(t->gp, 0), count, &sum, &hits);
    }
    qf_free(idx);
    *loss = sum / (double)n;
    *acc = t->c->loss == QF_LOSS_CROSS_ENTROPY ? (double)hits / (double)n : -1;
    if (st != QF_OK) qf_error_prefix(st, "validation: ");
    return st;
}

/* --- the loop ------------------------------------------------------------------- */

static qf_status qf_train_setup(qf_trainer *t, const qf_data_source *data, const qf_tensor *labels,
                                const qf_data_source *val, const qf_tensor *val_labels)
{
    qf_graph *g = t->g;
    const qf_train_config *c = t->c;
    QF_TRY(qf_train_check_config(c));
    if (g->noutputs < 1) return qf_error(QF_ERR_INVALID, "the model has no outputs");
    if (g->ninputs < 1 || g->ninputs > QF_TRAIN_MAX_INPUTS)
        return qf_error(QF_ERR_UNSUPPORTED, "the model has %d inputs: training takes 1 to %d", g->ninputs,
                        QF_TRAIN_MAX_INPUTS);
    if ((val == NULL) != (val_labels == NULL))
        return qf_error(QF_ERR_INVALID, "validation needs both data and labels");
    t->nin = g->ninputs;
    for (int i = 0; i < t->nin; i++) {
        t->in_ndim[i] = g->inputs[i]->type.ndim;
        memcpy(t->in_dims[i], g->inputs[i]->type.dims, sizeof t->in_dims[i]);
    }
    QF_TRY(qf_train_check_source(t, data, "data"));
    if (val) QF_TRY(qf_train_check_source(t, val, "validation data"));
    t->n = data->inputs[0]->dims[0];
    t->batch = c->batch < t->n ? c->batch : t->n;
    for (int i = 0; i < t->nin; i++) {
        memcpy(t->data_dims[i], data->inputs[i]->dims, sizeof t->data_dims[i]);
        t->row_bytes[i] = qf_tensor_nbytes(data->inputs[i]) / (size_t)t->n;
    }
    QF_TRY(qf_graph_toposort(g));
    QF_TRY(qf_train_set_batch(t, t->batch));
    QF_TRY(qf_train_check_output(t));
    QF_TRY(qf_train_check_labels(t, labels, t->n, "labels"));
    if (val) QF_TRY(qf_train_check_labels(t, val_labels, val->inputs[0]->dims[0], "validation labels"));
    QF_TRY(qf_train_collect(t));
    QF_TRY(qf_train_attach_loss(t, t->batch));
    t->ptensors = qf_calloc((size_t)t->nparams, sizeof *t->ptensors);
    t->grads = qf_calloc((size_t)t->nparams, sizeof *t->grads);
    t->order = qf_malloc(sizeof *t->order * (size_t)t->n);
    t->ybuf = qf_malloc(t->label_bytes * (size_t)t->batch);
    if (!t->ptensors || !t->grads || !t->order || !t->ybuf) return QF_ERR_NOMEM;
    for (int i = 0; i < t->nin; i++)
        if (!(t->xbuf[i] = qf_malloc(t->row_bytes[i] * (size_t)t->batch + 1))) return QF_ERR_NOMEM;
    for (int i = 0; i < t->nparams; i++) t->ptensors[i] = &t->params[i]->type;
    for (int64_t i = 0; i < t->n; i++) t->order[i] = i;
    QF_TRY(qf_optim_init(&t->opt, &c->optim, t->nparams, t->ptensors));
    return QF_OK;
}

static void qf_train_release(qf_trainer *t)
{
    qf_optim_free(t->opt);
    for (int i = 0; i < t->nin; i++) qf_free(t->xbuf[i]);
    qf_free(t->ybuf);
    qf_free(t->order);
    if (t->snap)
        for (int i = 0; i < t->nbuffers; i++) qf_tensor_free(&t->snap[i]);
    qf_free(t->snap);
    qf_free(t->params);
    qf_free(t->ptensors);
    qf_free(t->grads);
    qf_free(t->buffers);
}

/* One optimizer step on samples order[first .. first+count-1]: forward in
 * training mode, the loss checked, backward, the gradients checked and
 * clipped, the optimizer (with c->forward_only: the forward and the loss
 * check alone). Nothing of g is changed when it fails (the
 * buffers the forward updated are put back). */
static qf_status qf_train_step(qf_trainer *t, const qf_data_source *data, const qf_tensor *labels, int64_t first,
                               int64_t count, int64_t step, qf_train_step_info *info)
{
    const qf_train_config *c = t->c;
    QF_TRY(qf_train_use_batch(t, count));
    QF_TRY(qf_train_gather(t, data, labels, t->order + first, count, count));
    qf_tensor views[QF_TRAIN_MAX_INPUTS + 1];
    const qf_tensor *feed[QF_TRAIN_MAX_INPUTS + 1];
    qf_train_feed(t, count, views, feed);
    qf_train_snapshot(t, false);
    qf_grad_plan_seed(t->gp, qf_train_step_seed(c->seed, step));
    qf_status st = qf_grad_plan_forward(t->gp, feed, t->nin + 1, true);
    double loss = st == QF_OK ? qf_grad_plan_loss(t->gp) : 0;
    if (st == QF_OK && !isfinite(loss))
        st = qf_error(QF_ERR_DIVERGED, "step %lld: loss is %s", (long long)step + 1,
                      isnan(loss) ? "nan" : "inf");
    /* Numeric trouble inside the training forward (a BatchNorm whose batch
     * variance is NaN) is the same divergence seen earlier: the loss would
     * be NaN. The data were checked finite and the parameters after every
     * update, so it is not the input's fault. */
    if (st == QF_ERR_NUMERIC)
        st = qf_error_prefix(QF_ERR_DIVERGED, "step %lld: loss is nan: ", (long long)step + 1);
    const bool update = !c->forward_only;
    if (st == QF_OK && update) st = qf_grad_plan_backward(t->gp);
    double norm = 0;
    if (st == QF_OK && update) {
        for (int i = 0; i < t->nparams; i++) t->grads[i] = qf_grad_plan_grad(t->gp, i);
        /* The gradients live in the plan's arena, which is the trainer's
         * to change: clipping scales them in place. */
        norm = qf_clip_grad_norm((qf_tensor *const *)t->grads, t->nparams, c->clip_norm > 0 ? c->clip_norm : INFINITY);
        if (!isfinite(norm))
            st =
                qf_error(QF_ERR_DIVERGED, "step %lld: the gradient of '%s' is not finite (loss %g)",
                         (long long)step + 1, qf_train_bad_grad(t, t->grads), loss);
    }
    if (st != QF_OK) {
        qf_train_snapshot(t, true);
        return st;
    }
    info->lr = update ? qf_schedule_lr(&c->sched, c->optim.lr, step) : 0;
    if (update) {
        QF_TRY(qf_optim_step(t->opt, t->grads, info->lr));
        const qf_value *bad = qf_train_bad_param(t);
        if (bad)
            return qf_error(
                QF_ERR_DIVERGED,
                "step %lld: parameter '%s' is not finite after the update (lr %g, loss %g)",
                (long long)step + 1, bad->name, info->lr, loss);
    }
    double sum = 0;
    int64_t hits = 0;
    if (c->loss == QF_LOSS_CROSS_ENTROPY) qf_train_score(t, qf_grad_plan_output(t->gp, 0), count, &sum, &hits);
    info->step = step + 1;
    info->loss = loss;
    info->accuracy = c->loss == QF_LOSS_CROSS_ENTROPY ? (double)hits / (double)count : -1;
    return QF_OK;
}

qf_status qf_train(qf_graph *g, const qf_data_source *data, const qf_tensor *labels, const qf_data_source *val,
                   const qf_tensor *val_labels, const qf_train_config *c, qf_train_result *res)
{
    qf_engine_prefer_training();
    qf_train_result r = {.val_accuracy = -1};
    qf_trainer t = {.g = g, .c = c};
    qf_status st = qf_train_setup(&t, data, labels, val, val_labels);
    int64_t spe = st == QF_OK ? (t.n + t.batch - 1) / t.batch : 0, total = spe * c->epochs;
    qf_train_config cc = *c;
    /* Cosine annealing runs over the steps after warm-up unless told. */
    if (cc.sched.kind == QF_SCHED_COSINE && cc.sched.total <= 0)
        cc.sched.total = total - cc.sched.warmup > 1 ? total - cc.sched.warmup : 1;
    t.c = &cc;
    uint64_t rng = c->seed;
    int64_t step = 0;
    for (int e = 0; e < c->epochs && st == QF_OK; e++) {
        double t0 = qf_clock_seconds(), loss_sum = 0, hit_sum = 0;
        qf_train_order(t.order, t.n, c->shuffle, &rng);
        qf_train_step_info info = {.epoch = e, .steps_per_epoch = spe, .total_steps = total};
        for (int64_t first = 0; first < t.n && st == QF_OK; first += t.batch, step++) {
            int64_t count = t.n - first < t.batch ? t.n - first : t.batch;
            st = qf_train_step(&t, data, labels, first, count, step, &info);
            if (st != QF_OK) break;
            r.steps = step + 1;
            r.final_loss = info.loss;
            loss_sum += info.loss * (double)count;
            hit_sum += info.accuracy * (double)count;
            if (c->on_step) st = c->on_step(c->ud, &info);
        }
        if (st != QF_OK) break;
        qf_train_epoch_info ei = {.epoch = e, .train_loss = loss_sum / (double)t.n,
                                  .train_accuracy = c->loss == QF_LOSS_CROSS_ENTROPY ? hit_sum / (double)t.n : -1,
                                  .val_loss = -1, .val_accuracy = -1};
        if (val) st = qf_train_validate(&t, val, val_labels, &ei.val_loss, &ei.val_accuracy);
        if (st == QF_OK && val && !isfinite(ei.val_loss))
            st = qf_error(QF_ERR_DIVERGED, "epoch %d (step %lld): validation loss is %s", e + 1,
                          (long long)step, isnan(ei.val_loss) ? "nan" : "inf");
        if (st != QF_OK) break;
        ei.seconds = qf_clock_seconds() - t0;
        r.epochs_done = e + 1;
        r.val_accuracy = ei.val_accuracy;
        if (c->on_epoch) st = c->on_epoch(c->ud, &ei);
    }
    r.nparams = t.nparams;
    for (int i = 0; i < t.nparams; i++) r.nweights += qf_tensor_numel(&t.params[i]->type);
    /* g goes back to an inference graph whatever happened; the first error
     * is the one reported. */
    if (t.nin) {
        qf_status dst = qf_train_detach(&t);
        if (st == QF_OK) st = dst;
    }
    qf_train_release(&t);
    if (res) *res = r;
    return st;
}
