/* Quantization-aware training (qfold/qat.h): the prepare pipeline, the
 * observers' calibration, qf_train with the QAT schedules, the finalize
 * pipeline.
 *
 *   float model ─qat_prepare─▶ x ─[fq]─ Conv(FQ(W·s)) ─/s─ BN(train) ─ Relu ─[fq]─ ...
 *               ─calibrate──▶ the observers' ranges (BN frozen, no step)
 *               ─qf_train───▶ parameters, BN statistics, observer ranges
 *                             (--freeze-bn / --freeze-observers flip the
 *                              run-time attributes between two steps)
 *               ─qat_finalize▶ Conv(DQ(int8 W')) ... the folded int8 QDQ model
 *
 * The schedules need no new plan: BatchNormalization reads qfold_frozen and
 * fake_quant reads observe when they run (src/ops/ref/norm.c, fake_quant.c), so
 * flipping them between two optimizer steps changes the next step of the
 * same training plan.
 */
#include <stdlib.h>
#include <string.h>

#include "qfold/qat.h"
#include "qfold/schema.h"

qf_qat_config qf_qat_defaults(void)
{
    return (qf_qat_config){
        .train = qf_train_defaults(),
        .prepare = "qat_prepare",
        .finalize = "qat_finalize",
        .passes = {.verify = true},
        .calib_count = 256,
    };
}

/* --- schedules --------------------------------------------------------------------- */

qf_status qf_qat_when_parse(const char *s, qf_qat_when *out)
{
    if (!s || !*s) return qf_error(QF_ERR_INVALID, "a schedule point is empty: give steps (500), epochs (2ep) or never");
    if (strcmp(s, "never") == 0) {
        *out = (qf_qat_when){QF_QAT_NEVER, 0};
        return QF_OK;
    }
    char *end = NULL;
    long long v = *s >= '0' && *s <= '9' ? strtoll(s, &end, 10) : -1;
    qf_qat_unit u = QF_QAT_STEPS;
    if (v >= 0 && end && strcmp(end, "ep") == 0) u = QF_QAT_EPOCHS;
    else if (v < 0 || !end || *end) v = -1;
    if (v < 0 || v > (1ll << 40))
        return qf_error(QF_ERR_INVALID, "'%s' is no schedule point: give optimizer steps (500), epochs (2ep) or never",
                        s);
    *out = (qf_qat_when){u, v};
    return QF_OK;
}

int64_t qf_qat_when_step(const qf_qat_when *w, int64_t steps_per_epoch)
{
    switch (w->unit) {
    case QF_QAT_STEPS:
        return w->at;
    case QF_QAT_EPOCHS:
        return w->at * steps_per_epoch;
    default:
        return -1;
    }
}

int qf_qat_set_bn_frozen(qf_graph *g, bool frozen)
{
    int n = 0;
    qf_graph_for_each_node(g, nd)
    {
        /* the exact form's BatchNorm is qat_bn_exact, its running statistics'
         * update qat_bn_stats: both read the flag too */
        if (nd->op != QF_OP_BATCH_NORM && nd->op != QF_OP_QAT_BN_EXACT && nd->op != QF_OP_QAT_BN_STATS) continue;
        if (frozen) {
            if (qf_node_set_attr_int(g, nd, "qfold_frozen", 1) != QF_OK) return -1;
        } else {
            qf_node_remove_attr(nd, "qfold_frozen");
        }
        n++;
    }
    return n;
}

int qf_qat_set_observe(qf_graph *g, bool observe)
{
    int n = 0;
    qf_graph_for_each_node(g, nd)
    {
        if (nd->op != QF_OP_FAKE_QUANT) continue;
        if (qf_node_set_attr_int(g, nd, "observe", observe) != QF_OK) return -1;
        n++;
    }
    return n;
}

/* --- prepare, finalize ------------------------------------------------------------- */

/* A BatchNormalization QAT can train: the simulated fusion divides by
 * sqrt(running_var + epsilon) and training moves the running statistics by
 * momentum, so both must be written in the model (the values it was trained
 * with: ONNX's defaults may not be them, and PyTorch always writes both),
 * epsilon a small positive number and momentum (ONNX's: 1 - PyTorch's)
 * within [0, 1]. */
static qf_status qat_check_bn(const qf_node *n)
{
    const qf_attr *e = qf_node_attr(n, "epsilon"), *m = qf_node_attr(n, "momentum");
    if (!e || !m)
        return qf_error(QF_ERR_INVALID, "node '%s' (BatchNormalization): no %s attribute: QAT needs the value the "
                        "model was trained with (ONNX's default may not be it)", n->name, !e ? "epsilon" : "momentum");
    const double eps = e->type == QF_ATTR_FLOAT ? e->f : (double)e->i;
    const double mom = m->type == QF_ATTR_FLOAT ? m->f : (double)m->i;
    if (!(eps > 0 && eps <= 0.5))
        return qf_error(QF_ERR_INVALID, "node '%s' (BatchNormalization): epsilon %g is absurd: QAT divides by "
                        "sqrt(running_var + epsilon), which needs a small positive epsilon (PyTorch's default 1e-5)",
                        n->name, eps);
    if (!(mom >= 0 && mom <= 1))
        return qf_error(QF_ERR_INVALID, "node '%s' (BatchNormalization): momentum %g is outside [0, 1] (ONNX's "
                        "momentum is 1 - PyTorch's; 0.9 by default)", n->name, mom);
    return QF_OK;
}

qf_status qf_qat_prepare(qf_graph *g, const qf_qat_config *c, qf_pass_report **rep)
{
    qf_pass_report *r = NULL;
    if (rep) *rep = NULL;
    qf_graph_for_each_node(g, n)
    {
        if (n->op == QF_OP_BATCH_NORM) QF_TRY(qat_check_bn(n));
    }
    QF_TRY(qf_graph_toposort(g));
    QF_TRY(qf_graph_infer_shapes(g));
    qf_status st = qf_pipeline_run(g, c->prepare ? c->prepare : "qat_prepare", &c->passes, &r);
    if (rep) *rep = r;
    else qf_pass_report_free(r);
    return st;
}

qf_status qf_qat_finalize(qf_graph *g, const qf_qat_config *c, qf_pass_report **rep)
{
    qf_pass_report *r = NULL;
    const char *name = c->finalize ? c->finalize : "qat_finalize";
    qf_status st = qf_pipeline_run(g, name, &c->passes, &r);
    if (rep) *rep = r;
    else qf_pass_report_free(r);
    QF_TRY(st);
    QF_TRY(qf_graph_infer_shapes(g));
    qf_graph_for_each_node(g, n)
    {
        if (n->op == QF_OP_FAKE_QUANT || n->op == QF_OP_QAT_BN_WEIGHT || n->op == QF_OP_QAT_BN_OUTPUT ||
            n->op == QF_OP_QAT_BN_STATS || n->op == QF_OP_QAT_BN_EXACT)
            return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): left by the pipeline '%s': the model is not an int8 "
                            "QDQ model", n->name, qf_op_label(n), name);
    }
    return QF_OK;
}

/* --- calibration ---------------------------------------------------------------------- */

/* The first n samples of data and labels: views of the same rows (at most
 * 16 inputs, as training takes). */
typedef struct qat_rows {
    qf_tensor views[16], lab;
    const qf_tensor *ptrs[16];
    qf_data_source src;
} qat_rows;

static void qat_first_rows(const qf_data_source *data, const qf_tensor *labels, int64_t n, qat_rows *r)
{
    for (int i = 0; i < data->ninputs; i++) {
        const qf_tensor *d = data->inputs[i];
        int64_t dims[QF_MAX_DIMS];
        memcpy(dims, d->dims, sizeof dims);
        dims[0] = n;
        qf_tensor_view(&r->views[i], d->dtype, d->ndim, dims, d->data);
        r->ptrs[i] = &r->views[i];
    }
    r->src = (qf_data_source){.ninputs = data->ninputs, .inputs = r->ptrs, .read = data->read, .ud = data->ud};
    int64_t ldims[QF_MAX_DIMS];
    memcpy(ldims, labels->dims, sizeof ldims);
    if (labels->ndim >= 1 && ldims[0] > n) ldims[0] = n;
    qf_tensor_view(&r->lab, labels->dtype, labels->ndim, ldims, labels->data);
}

static int64_t qat_samples(const qf_data_source *data)
{
    return data->ninputs >= 1 && data->inputs[0]->ndim >= 1 ? data->inputs[0]->dims[0] : 0;
}

qf_status qf_qat_calibrate(qf_graph *g, const qf_data_source *data, const qf_tensor *labels, const qf_qat_config *c,
                           int64_t *samples)
{
    if (samples) *samples = 0;
    int64_t n = qat_samples(data);
    if (c->calib_count < 0) return qf_error(QF_ERR_INVALID, "calibration: %lld samples", (long long)c->calib_count);
    if (c->calib_count < n) n = c->calib_count;
    if (n < 1) return QF_OK;
    if (data->ninputs > 16)
        return qf_error(QF_ERR_UNSUPPORTED, "calibration: the model has %d inputs, training takes 1 to 16",
                        data->ninputs);
    /* The first n samples: the same source with n rows. */
    qat_rows rows;
    qat_first_rows(data, labels, n, &rows);

    qf_train_config tc = c->train;
    tc.epochs = 1;
    tc.shuffle = false;
    tc.forward_only = true;
    tc.on_step = NULL;
    tc.on_epoch = NULL;
    if (qf_qat_set_bn_frozen(g, true) < 0 || qf_qat_set_observe(g, true) < 0) return QF_ERR_NOMEM;
    qf_status st = qf_train(g, &rows.src, &rows.lab, NULL, NULL, &tc, NULL);
    qf_qat_set_bn_frozen(g, false);
    if (st != QF_OK) return qf_error_prefix(st, "calibration: ");
    if (samples) *samples = n;
    return QF_OK;
}

/* --- BatchNorm re-estimation -------------------------------------------------------- */

/* The nodes that hold running statistics and update them in a training
 * forward: BatchNormalization (the approximate form's, and a BN no conv
 * owns) and the exact form's qat_bn_stats. */
static bool qat_updates_stats(const qf_node *n)
{
    return n->op == QF_OP_BATCH_NORM || n->op == QF_OP_QAT_BN_STATS;
}

typedef struct qat_reest {
    qf_graph *g;
    qf_node **bn;
    int nbn;
} qat_reest;

/* The momentum (ONNX's m: running = running·m + batch·(1 − m)) of the batch
 * after k done: m = k / (k + 1) makes the running statistics after batch k
 * the plain mean of the k batch statistics (k = 0: the first batch's
 * statistics, the old ones forgotten), PyTorch's cumulative moving average
 * (momentum None: factor 1 / num_batches_tracked). */
static qf_status qat_reest_momentum(qat_reest *r, int64_t k)
{
    const float m = (float)((double)k / (double)(k + 1));
    for (int i = 0; i < r->nbn; i++) QF_TRY(qf_node_set_attr_float(r->g, r->bn[i], "momentum", m));
    return QF_OK;
}

static qf_status qat_reest_on_step(void *ud, qf_train_step_info *info)
{
    return qat_reest_momentum(ud, info->step);
}

qf_status qf_qat_bn_reestimate(qf_graph *g, const qf_data_source *data, const qf_tensor *labels,
                               const qf_qat_config *c, int64_t count, int *bns, int64_t *samples)
{
    if (bns) *bns = 0;
    if (samples) *samples = 0;
    if (count < 0) return qf_error(QF_ERR_INVALID, "BN re-estimation: %lld samples", (long long)count);
    int64_t n = qat_samples(data);
    if (count < n) n = count;
    /* A last batch of one sample has no batch variance (BatchNorm1d refuses
     * it in training, as torch does): it is left out. */
    const int64_t b = c->train.batch < n ? c->train.batch : n;
    if (n > 1 && b > 1 && n % b == 1) n--;
    if (data->ninputs > 16)
        return qf_error(QF_ERR_UNSUPPORTED, "BN re-estimation: the model has %d inputs, training takes 1 to 16",
                        data->ninputs);
    qat_reest r = {.g = g};
    qf_graph_for_each_node(g, nd) r.nbn += qat_updates_stats(nd);
    if (n < 1 || r.nbn == 0) return QF_OK;
    /* Each node's momentum and each fake_quant's observe, put back after. */
    int nfq = 0;
    qf_graph_for_each_node(g, nd) nfq += nd->op == QF_OP_FAKE_QUANT;
    r.bn = qf_malloc(sizeof *r.bn * (size_t)r.nbn);
    qf_attr *mom = qf_malloc(sizeof *mom * (size_t)r.nbn);
    int64_t *obs = qf_malloc(sizeof *obs * (size_t)(nfq + 1));
    float *avg = qf_malloc(sizeof *avg * (size_t)(nfq + 1));
    qf_status st = r.bn && mom && obs && avg ? QF_OK : QF_ERR_NOMEM;
    int i = 0, f = 0;
    if (st == QF_OK) {
        qf_graph_for_each_node(g, nd)
        {
            if (nd->op == QF_OP_FAKE_QUANT) {
                avg[f] = qf_node_attr_float(nd, "averaging_constant", -1.0f);
                obs[f++] = qf_node_attr_int(nd, "observe", -1);
            }
            if (!qat_updates_stats(nd)) continue;
            const qf_attr *a = qf_node_attr(nd, "momentum");
            mom[i] = a ? *a : (qf_attr){.name = NULL}; /* no name: none */
            r.bn[i++] = nd;
        }
    }
    /* Training mode, no optimizer step: the batch statistics of the
     * fake-quantized model as trained; BatchNorm must not be frozen. The
     * activations' observers stop: their scales stay what training learnt.
     * A weight's fake_quant sees W·γ/sqrt(running_var + ε) (the simulated
     * fold), which moves with the statistics re-estimated here, and the fold
     * after puts the new ones into it: its observer follows the product at
     * once (averaging constant 1: the min / max of this batch's W·s). With
     * the trained moving average (0.01) its grid would lag and clamp a W·s
     * whose statistics moved by much (running_var 10 times too large: the
     * re-estimated variance off by 76 %). */
    if (st == QF_OK && (qf_qat_set_bn_frozen(g, false) < 0 || qf_qat_set_observe(g, false) < 0)) st = QF_ERR_NOMEM;
    qf_graph_for_each_node(g, nd)
    {
        if (st != QF_OK || nd->op != QF_OP_FAKE_QUANT || !qf_node_attr_int(nd, "weight", 0)) continue;
        st = qf_node_set_attr_int(g, nd, "observe", 1);
        if (st == QF_OK) st = qf_node_set_attr_float(g, nd, "averaging_constant", 1.0f);
    }
    if (st == QF_OK) st = qat_reest_momentum(&r, 0);
    if (st == QF_OK) {
        qat_rows rows;
        qat_first_rows(data, labels, n, &rows);
        qf_train_config tc = c->train;
        tc.epochs = 1;
        tc.shuffle = false;
        tc.forward_only = true;
        tc.on_step = qat_reest_on_step;
        tc.on_epoch = NULL;
        tc.ud = &r;
        st = qf_train(g, &rows.src, &rows.lab, NULL, NULL, &tc, NULL);
        if (st != QF_OK) st = qf_error_prefix(st, "BN re-estimation: ");
    }
    /* The attributes as they were (whatever happened: the graph goes on). */
    if (obs && avg) {
        f = 0;
        qf_graph_for_each_node(g, nd)
        {
            if (nd->op != QF_OP_FAKE_QUANT) continue;
            const int64_t o = obs[f];
            const float ac = avg[f++];
            if (o < 0) qf_node_remove_attr(nd, "observe");
            else if (qf_node_set_attr_int(g, nd, "observe", o) != QF_OK && st == QF_OK) st = QF_ERR_NOMEM;
            if (ac < 0) qf_node_remove_attr(nd, "averaging_constant");
            else if (qf_node_set_attr_float(g, nd, "averaging_constant", ac) != QF_OK && st == QF_OK)
                st = QF_ERR_NOMEM;
        }
    }
    for (int k = 0; mom && k < i; k++) {
        qf_status s2 = QF_OK;
        if (!mom[k].name) qf_node_remove_attr(r.bn[k], "momentum");
        else if (mom[k].type == QF_ATTR_FLOAT) s2 = qf_node_set_attr_float(g, r.bn[k], "momentum", mom[k].f);
        else if (mom[k].type == QF_ATTR_INT) s2 = qf_node_set_attr_int(g, r.bn[k], "momentum", mom[k].i);
        if (s2 != QF_OK && st == QF_OK) st = s2;
    }
    qf_free(avg);
    qf_free(obs);
    qf_free(mom);
    qf_free(r.bn);
    if (st != QF_OK) return st;
    if (bns) *bns = r.nbn;
    if (samples) *samples = n;
    return QF_OK;
}

/* --- training with the schedules -------------------------------------------------------- */

typedef struct qat_sched {
    qf_graph *g;
    const qf_qat_config *c;
    int64_t bn_at, obs_at;    /* steps after which they switch (-1: never) */
    bool bn_done, obs_done;
} qat_sched;

/* Switches whose step has come: applied before the next step runs. */
static qf_status qat_apply(qat_sched *s, int64_t steps_done)
{
    if (!s->bn_done && s->bn_at >= 0 && steps_done >= s->bn_at) {
        if (qf_qat_set_bn_frozen(s->g, true) < 0) return QF_ERR_NOMEM;
        s->bn_done = true;
    }
    if (!s->obs_done && s->obs_at >= 0 && steps_done >= s->obs_at) {
        if (qf_qat_set_observe(s->g, false) < 0) return QF_ERR_NOMEM;
        s->obs_done = true;
    }
    return QF_OK;
}

static qf_status qat_on_step(void *ud, qf_train_step_info *info)
{
    qat_sched *s = ud;
    QF_TRY(qat_apply(s, info->step));
    return s->c->train.on_step ? s->c->train.on_step(s->c->train.ud, info) : QF_OK;
}

static qf_status qat_on_epoch(void *ud, const qf_train_epoch_info *info)
{
    qat_sched *s = ud;
    return s->c->train.on_epoch ? s->c->train.on_epoch(s->c->train.ud, info) : QF_OK;
}

qf_status qf_qat_train(qf_graph *g, const qf_data_source *data, const qf_tensor *labels, const qf_data_source *val,
                       const qf_tensor *val_labels, const qf_qat_config *c, qf_train_result *res)
{
    /* qf_train's epoch: ceil(N / min(batch, N)) steps. */
    int64_t n = data->ninputs >= 1 && data->inputs[0]->ndim >= 1 ? data->inputs[0]->dims[0] : 0;
    int64_t b = c->train.batch < n ? c->train.batch : n;
    int64_t spe = b > 0 ? (n + b - 1) / b : 0;
    qat_sched s = {.g = g, .c = c, .bn_at = qf_qat_when_step(&c->freeze_bn, spe),
                   .obs_at = qf_qat_when_step(&c->freeze_observers, spe)};
    if (qf_qat_set_observe(g, true) < 0) return QF_ERR_NOMEM;
    qf_status st = qat_apply(&s, 0);
    qf_train_config tc = c->train;
    tc.on_step = qat_on_step;
    tc.on_epoch = qat_on_epoch;
    tc.ud = &s;
    if (st == QF_OK) st = qf_train(g, data, labels, val, val_labels, &tc, res);
    /* The frozen flag is training state, not part of the model (export
     * would write it as an attribute ONNX does not know). */
    qf_qat_set_bn_frozen(g, false);
    return st;
}
