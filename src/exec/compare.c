/* Model vs model: run a reference graph and a candidate graph (fused,
 * quantized, trained) on the same inputs and compare every output. The
 * comparison `qfold fuse --verify` prints; quantize, qat and eval reuse it.
 * Loading the models and formatting the result is the caller's. */
#include <math.h>
#include <string.h>

#include "core/rand.h"
#include "qfold/exec.h"

#define QF_COMPARE_DEFAULT_TOL  1e-4
#define QF_COMPARE_DEFAULT_SEED 0x5eedf00dull


qf_status qf_compare_make_inputs(const qf_graph *g, uint64_t seed, int batch, qf_tensor *ts)
{
    if (!seed) seed = QF_COMPARE_DEFAULT_SEED;
    for (int i = 0; i < g->ninputs; i++) memset(&ts[i], 0, sizeof ts[i]);
    for (int i = 0; i < g->ninputs; i++) {
        const qf_value *v = g->inputs[i];
        int64_t dims[QF_MAX_DIMS];
        for (int d = 0; d < v->type.ndim; d++) dims[d] = v->type.dims[d] < 0 ? 1 : v->type.dims[d];
        qf_status st = qf_tensor_init(&ts[i], v->type.dtype, v->type.ndim, dims);
        if (st != QF_OK) {
            for (int k = 0; k < i; k++) qf_tensor_free(&ts[k]);
            return st;
        }
        /* One stream per input and batch; batch 0 is seed + i. */
        uint64_t s = seed + (uint64_t)i + (uint64_t)batch * QF_SPLITMIX_GAMMA;
        int64_t n = qf_tensor_numel(&ts[i]);
        for (int64_t k = 0; k < n; k++) {
            double x = (double)(qf_splitmix64(&s) >> 11) / (double)(1ull << 52) - 1.0;
            if (v->type.dtype == QF_DTYPE_F32)
                ((float *)ts[i].data)[k] = (float)x;
            else if (v->type.dtype == QF_DTYPE_F64)
                ((double *)ts[i].data)[k] = x;
        }
    }
    return QF_OK;
}

void qf_compare_result_free(qf_compare_result *r)
{
    if (!r) return;
    for (int i = 0; i < r->noutputs; i++) qf_free((void *)r->outputs[i].name);
    qf_free(r->outputs);
    memset(r, 0, sizeof *r);
    r->worst = -1;
}

/* Bind one batch into g as `qfold run` does: int64 inputs become constants
 * (first batch; later batches must repeat them), the others fix the input
 * shapes. feed[] gets the tensors to run with, *nfeed their count. */
static qf_status qf_compare_bind(qf_graph *g, const qf_tensor *const *ts,
                                 const qf_tensor *const *first, int n, const qf_tensor **feed,
                                 int *nfeed)
{
    *nfeed = 0;
    if (first) {
        /* Later batch: the int64 inputs are constants by now. */
        for (int i = 0; i < n; i++) {
            if (ts[i]->dtype != QF_DTYPE_I64) {
                feed[*nfeed] = ts[i];
                QF_TRY(qf_graph_set_input_shape(g, *nfeed, ts[i]->ndim, ts[i]->dims));
                ++*nfeed;
                continue;
            }
            if (!qf_shape_equal(ts[i]->ndim, ts[i]->dims, first[i]->ndim, first[i]->dims) ||
                memcmp(ts[i]->data, first[i]->data, qf_tensor_nbytes(ts[i])) != 0)
                return qf_error(QF_ERR_UNSUPPORTED,
                                "input %d (int64) differs from the first batch: int64 inputs "
                                "are bound as constants, every batch must repeat them",
                                i);
        }
        return QF_OK;
    }
    if (n != g->ninputs)
        return qf_error(QF_ERR_MISMATCH, "%d inputs given, the model has %d", n, g->ninputs);
    for (int i = 0; i < n; i++) {
        const qf_value *v = g->inputs[i];
        if (ts[i]->dtype != v->type.dtype || ts[i]->ndim != v->type.ndim)
            return qf_error(QF_ERR_INVALID, "input '%s' wants %s of rank %d, got %s of rank %d",
                            v->name, qf_dtype_name(v->type.dtype), v->type.ndim,
                            qf_dtype_name(ts[i]->dtype), ts[i]->ndim);
    }
    for (int i = 0; i < n; i++) {
        if (ts[i]->dtype == QF_DTYPE_I64) continue;
        QF_TRY(qf_graph_set_input_shape(g, i, ts[i]->ndim, ts[i]->dims));
        feed[(*nfeed)++] = ts[i];
    }
    /* Backwards: binding input i removes it, shifting the ones after it. */
    for (int i = n - 1; i >= 0; i--) {
        if (ts[i]->dtype != QF_DTYPE_I64) continue;
        qf_tensor c;
        QF_TRY(qf_tensor_copy(&c, ts[i]));
        qf_status st = qf_graph_bind_input(g, i, &c);
        qf_tensor_free(&c);
        QF_TRY(st);
    }
    return QF_OK;
}

/* Bind, plan and run one graph on one batch; the caller frees *plan. */
static qf_status qf_compare_run(qf_graph *g, const qf_tensor *const *ts,
                                const qf_tensor *const *first, int n, const qf_tensor **feed,
                                const char *name, qf_plan **plan)
{
    int nfeed = 0;
    qf_status st = qf_compare_bind(g, ts, first, n, feed, &nfeed);
    if (st == QF_OK) st = qf_plan_init(plan, g);
    if (st == QF_OK) st = qf_plan_run(*plan, feed, nfeed);
    if (st != QF_OK) qf_error_prefix(st, "running the %s model: ", name);
    return st;
}

/* Fold one batch of output a (reference) vs b (candidate) into d. */
static void qf_compare_tensors(const qf_tensor *a, const qf_tensor *b, int batch,
                               qf_compare_output *d)
{
    int64_t n = qf_tensor_numel(a);
    for (int64_t i = 0; i < n; i++) {
        double x = qf_tensor_get_f64(a, i), y = qf_tensor_get_f64(b, i);
        double diff;
        if (isnan(x) || isnan(y)) {
            if (isnan(x) && isnan(y)) continue;
            diff = INFINITY;
        } else {
            diff = fabs(x - y);
            d->max_ref = fmax(d->max_ref, fabs(x));
        }
        if (diff > d->max_abs) {
            d->max_abs = diff;
            d->worst_batch = batch;
            d->worst_index = i;
            d->worst_ref = x;
            d->worst_cand = y;
        }
    }
}

static qf_status qf_compare_batch(qf_graph *ref, qf_graph *cand, const qf_tensor *const *ts,
                                  const qf_tensor *const *first, int n, int batch,
                                  const qf_compare_options *o, qf_compare_result *out, int *bad)
{
    qf_plan *p0 = NULL, *p1 = NULL;
    const qf_tensor **feed = qf_calloc((size_t)(n ? n : 1), sizeof *feed);
    if (!feed) return qf_error(QF_ERR_NOMEM, "out of memory");
    qf_status st = qf_compare_run(ref, ts, first, n, feed, o->ref_name, &p0);
    if (st == QF_OK) st = qf_compare_run(cand, ts, first, n, feed, o->cand_name, &p1);
    int nout = st == QF_OK ? qf_plan_num_outputs(p0) : 0;
    if (st == QF_OK && !out->outputs) {
        out->outputs = qf_calloc((size_t)(nout ? nout : 1), sizeof *out->outputs);
        if (!out->outputs) st = qf_error(QF_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; st == QF_OK && i < nout; i++) {
        const qf_tensor *a = qf_plan_output(p0, i), *b = qf_plan_output(p1, i);
        qf_compare_output *d = &out->outputs[i];
        if (i == out->noutputs) {
            d->name = qf_strdup(ref->outputs[i]->name);
            if (!d->name) {
                st = qf_error(QF_ERR_NOMEM, "out of memory");
                break;
            }
            d->worst_index = -1;
            out->noutputs = i + 1;
        }
        if (!qf_shape_equal(a->ndim, a->dims, b->ndim, b->dims)) {
            char sa[128], sb[128];
            *bad = i;
            st = qf_error(QF_ERR_MISMATCH, "output '%s': shape %s before, %s after %s", d->name,
                          qf_shape_str(a->ndim, a->dims, sa, sizeof sa),
                          qf_shape_str(b->ndim, b->dims, sb, sizeof sb), o->change);
            break;
        }
        qf_compare_tensors(a, b, batch, d);
    }
    qf_plan_free(p0);
    qf_plan_free(p1);
    qf_free(feed);
    return st;
}

qf_status qf_compare_graphs(qf_graph *ref, qf_graph *cand, const qf_tensor *const *inputs,
                            int ninputs, const qf_compare_options *opt, qf_compare_result *out)
{
    qf_compare_options o = opt ? *opt : (qf_compare_options){0};
    if (!(o.tolerance > 0)) o.tolerance = QF_COMPARE_DEFAULT_TOL;
    if (o.batches <= 0) o.batches = 1;
    if (!o.ref_name) o.ref_name = "reference";
    if (!o.cand_name) o.cand_name = "candidate";
    if (!o.change) o.change = "the rewrite";
    memset(out, 0, sizeof *out);
    out->worst = -1;
    int n = ref->ninputs;
    if (inputs && ninputs != n)
        return qf_error(QF_ERR_MISMATCH, "%d inputs given, the %s model has %d", ninputs,
                        o.ref_name, n);
    if (cand->ninputs != n)
        return qf_error(QF_ERR_MISMATCH, "%s model has %d inputs, %s %d", o.cand_name,
                        cand->ninputs, o.ref_name, n);
    if (cand->noutputs != ref->noutputs)
        return qf_error(QF_ERR_MISMATCH, "%s model has %d outputs, %s %d", o.cand_name,
                        cand->noutputs, o.ref_name, ref->noutputs);
    /* Generated batches live here one at a time; first keeps batch 0 (the
     * int64 inputs later batches must repeat). */
    qf_tensor *gen = qf_calloc((size_t)(2 * n + 1), sizeof *gen);
    const qf_tensor **ts = qf_calloc((size_t)(2 * n + 1), sizeof *ts);
    qf_status st = gen && ts ? QF_OK : qf_error(QF_ERR_NOMEM, "out of memory");
    const qf_tensor **first = ts ? ts + n : NULL;
    int bad = -1; /* the output whose shape differs */
    for (int b = 0; st == QF_OK && b < o.batches; b++) {
        qf_tensor *batch_gen = b == 0 ? gen : gen + n;
        if (inputs) {
            for (int i = 0; i < n; i++) ts[i] = inputs[(size_t)b * (size_t)n + (size_t)i];
        } else {
            if (b > 0)
                for (int i = 0; i < n; i++) qf_tensor_free(&batch_gen[i]);
            st = qf_compare_make_inputs(ref, o.seed, b, batch_gen);
            for (int i = 0; st == QF_OK && i < n; i++) ts[i] = &batch_gen[i];
        }
        if (st == QF_OK && b == 0)
            for (int i = 0; i < n; i++) first[i] = ts[i];
        if (st == QF_OK)
            st = qf_compare_batch(ref, cand, ts, b ? first : NULL, n, b, &o, out, &bad);
        if (st == QF_OK) out->batches = b + 1;
    }
    for (int i = 0; gen && i < 2 * n; i++) qf_tensor_free(&gen[i]);
    qf_free(gen);
    qf_free(ts);
    out->ok = st == QF_OK;
    double worst = -1;
    for (int i = 0; i < out->noutputs; i++) {
        qf_compare_output *d = &out->outputs[i];
        d->max_rel = d->max_abs / fmax(1e-6, d->max_ref);
        d->ok = i != bad && d->max_rel <= o.tolerance;
        out->ok &= d->ok;
        if (d->max_rel > worst) {
            worst = d->max_rel;
            out->worst = i;
        }
    }
    return st;
}
