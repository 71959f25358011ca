/* Running a graph over a data set in batches (calibration, eval). */
#include <string.h>

#include "exec_impl.h"
#include "qfold/exec.h"

/* The dims every input had before the run (a dynamic batch is -1), put back
 * before each new batch size and at the end (then every shape is inferred
 * again), so that the graph is left as it was found. */
typedef struct batch_state {
    qf_graph *g;
    int64_t (*dims)[QF_MAX_DIMS];
} batch_state;

static void batch_restore(batch_state *s)
{
    for (int i = 0; i < s->g->ninputs; i++)
        memcpy(s->g->inputs[i]->type.dims, s->dims[i], sizeof s->dims[i]);
}

qf_status qf_data_check(const qf_value *v, const qf_tensor *d)
{
    char want[160], got[160];
    int64_t dims[QF_MAX_DIMS];
    memcpy(dims, v->type.dims, sizeof dims);
    dims[0] = -1; /* the sample count: the data's own */
    bool ok = d->dtype == v->type.dtype && d->ndim == v->type.ndim && d->ndim >= 1;
    for (int k = 1; ok && k < d->ndim; k++) ok = dims[k] < 0 || dims[k] == d->dims[k];
    if (!ok)
        return qf_error(d->dtype == v->type.dtype ? QF_ERR_SHAPE : QF_ERR_INVALID,
                        "input '%s' expects %s %s (samples first), the data is %s %s", v->name,
                        qf_dtype_name(v->type.dtype), qf_shape_str(v->type.ndim, dims, want, sizeof want),
                        qf_dtype_name(d->dtype), qf_shape_str(d->ndim, d->dims, got, sizeof got));
    if (d->dims[0] < 1)
        return qf_error(QF_ERR_SHAPE, "input '%s' expects %s %s (samples first), the data holds no samples (%s)",
                        v->name, qf_dtype_name(v->type.dtype), qf_shape_str(v->type.ndim, dims, want, sizeof want),
                        qf_shape_str(d->ndim, d->dims, got, sizeof got));
    return QF_OK;
}

/* Data tensor d for graph input v, n samples as the first input's. */
static qf_status batch_check(const qf_value *v, const qf_tensor *d, int64_t n)
{
    QF_TRY(qf_data_check(v, d));
    if (d->dims[0] != n)
        return qf_error(QF_ERR_SHAPE, "input '%s': the data holds %lld samples, the first input's %lld", v->name,
                        (long long)d->dims[0], (long long)n);
    return QF_OK;
}

static qf_status batch_tensor_read(const qf_data_source *src, int64_t first, int64_t count, const void **rows)
{
    (void)count;
    for (int i = 0; i < src->ninputs; i++) {
        const qf_tensor *d = src->inputs[i];
        size_t sample = d->dims[0] ? qf_tensor_nbytes(d) / (size_t)d->dims[0] : 0;
        rows[i] = (const char *)d->data + (size_t)first * sample;
    }
    return QF_OK;
}

qf_data_source qf_data_source_tensors(const qf_tensor *const *data, int ndata)
{
    return (qf_data_source){.ninputs = ndata, .inputs = data, .read = batch_tensor_read, .ud = NULL};
}

/* The batcher: g run on rows its caller read, a plan per batch size. */
struct qf_batcher {
    qf_graph *g;
    int ndata;
    const qf_tensor *const *data; /* [N, ...] descriptions of the inputs */
    int64_t fixed;                /* the graph's own batch size, or <= 0 */
    qf_batch_options opt;
    batch_state s;
    qf_tensor *views;
    const qf_tensor **feed;
    void **pad;                   /* a short batch of a fixed-batch graph, padded */
    qf_plan *plan;
    int64_t planned;              /* the rows `plan` runs (0: none yet) */
    qf_batch_widen *widen;        /* opt.widen and a fixed batch: may it grow? */
    int64_t checked;              /* the last size asked about (0: none) */
    bool checked_ok;
};

/* The graph as found: input dims, and a widened batch's Reshape shapes. */
static void batch_unwiden(qf_batcher *b)
{
    qf_batch_widen_end(b->widen);
    batch_restore(&b->s);
}

qf_status qf_batcher_open(qf_batcher **out, qf_graph *g, const qf_tensor *const *data, int ndata,
                          const qf_batch_options *opt)
{
    *out = NULL;
    if (ndata != g->ninputs)
        return qf_error(QF_ERR_INVALID, "the graph has %d input%s, %d data set%s given", g->ninputs,
                        g->ninputs == 1 ? "" : "s", ndata, ndata == 1 ? "" : "s");
    if (ndata == 0) return qf_error(QF_ERR_INVALID, "the graph has no inputs to feed");
    int64_t n = data[0]->ndim >= 1 ? data[0]->dims[0] : 0;
    if (n < 1) return qf_error(QF_ERR_SHAPE, "input '%s': the data holds no samples", g->inputs[0]->name);
    for (int i = 0; i < ndata; i++) QF_TRY(batch_check(g->inputs[i], data[i], n));
    qf_batcher *b = qf_calloc(1, sizeof *b);
    if (!b) return QF_ERR_NOMEM;
    *b = (qf_batcher){.g = g, .ndata = ndata, .data = data, .fixed = g->inputs[0]->type.dims[0], .opt = *opt};
    b->s = (batch_state){g, qf_malloc(sizeof *b->s.dims * (size_t)ndata)};
    b->views = qf_calloc((size_t)ndata, sizeof *b->views);
    b->feed = qf_calloc((size_t)ndata, sizeof *b->feed);
    b->pad = qf_calloc((size_t)ndata, sizeof *b->pad);
    if (!b->s.dims || !b->views || !b->feed || !b->pad) {
        qf_free(b->s.dims);
        qf_free(b->views);
        qf_free(b->feed);
        qf_free(b->pad);
        qf_free(b);
        return QF_ERR_NOMEM;
    }
    for (int i = 0; i < ndata; i++) memcpy(b->s.dims[i], g->inputs[i]->type.dims, sizeof b->s.dims[i]);
    qf_status st = b->fixed > 0 && opt->widen ? qf_batch_widen_init(&b->widen, g) : QF_OK;
    if (st != QF_OK) {
        qf_batcher_close(b);
        return st;
    }
    *out = b;
    return QF_OK;
}

int64_t qf_batcher_rows(qf_batcher *b, int64_t count)
{
    if (b->fixed <= 0) return count;
    if (!b->widen || count == b->fixed || count < 1) return b->fixed;
    if (count != b->checked) {
        /* Asked at this size, then the graph put back as the current plan
         * needs it (widened to its size, which passed before, or as found). */
        bool ok = false;
        qf_status st = qf_batch_widen_begin(b->widen, count, &ok);
        if (st == QF_OK && b->planned && b->planned != b->fixed) {
            bool again = false;
            st = qf_batch_widen_begin(b->widen, b->planned, &again);
        } else if (st == QF_OK) {
            qf_batch_widen_end(b->widen);
        }
        if (st != QF_OK) { /* out of memory: the size the graph fixes */
            qf_error_clear();
            ok = false;
        }
        b->checked = count;
        b->checked_ok = ok;
    }
    return b->checked_ok ? count : b->fixed;
}

const char *qf_batcher_why(const qf_batcher *b)
{
    return b->widen ? qf_batch_widen_why(b->widen) : NULL;
}

qf_status qf_batcher_run(qf_batcher *b, const void *const *rows, int64_t count)
{
    int64_t rows_run = qf_batcher_rows(b, count);
    /* A short last batch of a widened graph refused at its own size (its
     * rules held at the full size): padded to the plan's. */
    if (count > rows_run && b->widen && b->planned >= count) rows_run = b->planned;
    if (count < 1 || count > rows_run)
        return qf_error(QF_ERR_INVALID, "a batch of %lld samples for a graph that runs %lld at a time", (long long)count,
                        (long long)rows_run);
    if (rows_run != b->planned) {
        qf_plan_free(b->plan);
        b->plan = NULL;
        b->planned = 0;
        batch_unwiden(b);
        if (b->fixed > 0 && rows_run != b->fixed) {
            bool ok = false;
            QF_TRY(qf_batch_widen_begin(b->widen, rows_run, &ok));
            if (!ok)
                return qf_error(QF_ERR_INTERNAL, "a batch of %lld refused after it was accepted",
                                (long long)rows_run);
        }
        for (int i = 0; i < b->ndata; i++) {
            int64_t dims[QF_MAX_DIMS];
            memcpy(dims, b->data[i]->dims, sizeof dims);
            dims[0] = rows_run;
            QF_TRY(qf_graph_set_input_shape(b->g, i, b->data[i]->ndim, dims));
        }
        /* A hook sees every node's output: such plans run without NHWC and
         * fusion. An observer sees the values it asks for: the plan keeps
         * those unfused, and the rest as qf_plan_init. */
        QF_TRY(b->opt.observer ? qf_plan_init_observed(&b->plan, b->g, b->opt.observer)
               : b->opt.hook   ? qf_plan_init_plain(&b->plan, b->g)
                               : qf_plan_init(&b->plan, b->g));
        qf_plan_set_hook(b->plan, b->opt.hook, b->opt.hook_ud);
        b->planned = rows_run;
    }
    for (int i = 0; i < b->ndata; i++) {
        const qf_tensor *d = b->data[i];
        size_t sample = qf_tensor_nbytes(d) / (size_t)d->dims[0];
        int64_t dims[QF_MAX_DIMS];
        memcpy(dims, d->dims, sizeof dims);
        dims[0] = rows_run;
        const char *p = rows[i];
        if (count < rows_run) {
            /* Pad a short last batch of a fixed-batch graph. */
            if (!b->pad[i] && !(b->pad[i] = qf_malloc(sample * (size_t)rows_run))) return QF_ERR_NOMEM;
            memcpy(b->pad[i], p, sample * (size_t)count);
            for (int64_t r = count; r < rows_run; r++)
                memcpy((char *)b->pad[i] + (size_t)r * sample, p + (size_t)(count - 1) * sample, sample);
            p = b->pad[i];
        }
        qf_tensor_view(&b->views[i], d->dtype, d->ndim, dims, (void *)p);
        b->feed[i] = &b->views[i];
    }
    return qf_plan_run(b->plan, b->feed, b->ndata);
}

const qf_plan *qf_batcher_plan(const qf_batcher *b)
{
    return b->plan;
}

qf_status qf_batcher_close(qf_batcher *b)
{
    if (!b) return QF_OK;
    qf_plan_free(b->plan);
    batch_unwiden(b);
    qf_batch_widen_free(b->widen);
    /* Every other value's shape follows the inputs' again (an exported
     * graph must not keep the last batch size in its output shapes). */
    qf_status st = b->planned || b->widen ? qf_graph_infer_shapes(b->g) : QF_OK;
    for (int i = 0; i < b->ndata; i++) qf_free(b->pad[i]);
    qf_free(b->pad);
    qf_free(b->s.dims);
    qf_free(b->views);
    qf_free(b->feed);
    qf_free(b);
    return st;
}

qf_status qf_run_source(qf_graph *g, const qf_data_source *src, const qf_batch_options *opt)
{
    int64_t batch = opt->batch ? opt->batch : 32;
    qf_batcher *b;
    QF_TRY(qf_batcher_open(&b, g, src->inputs, src->ninputs, opt));
    /* A graph with a fixed batch size runs that size (the last batch padded
     * by repeating its last sample) unless it may grow (opt->widen); a
     * dynamic one the size asked for. */
    qf_status st = batch < 1 ? qf_error(QF_ERR_INVALID, "batch size %lld", (long long)batch) : QF_OK;
    if (st == QF_OK) batch = qf_batcher_rows(b, batch);
    const void **rows = qf_calloc((size_t)src->ninputs, sizeof *rows);
    if (!rows) st = QF_ERR_NOMEM;
    int64_t n = src->inputs[0]->dims[0];
    for (int64_t first = 0; first < n && st == QF_OK; first += batch) {
        int64_t count = n - first < batch ? n - first : batch;
        st = src->read(src, first, count, rows);
        if (st == QF_OK) st = qf_batcher_run(b, rows, count);
        if (st == QF_OK && opt->on_batch) st = opt->on_batch(opt->ud, first, count, b->plan);
    }
    qf_free(rows);
    qf_status cst = qf_batcher_close(b);
    return st == QF_OK ? cst : st;
}
