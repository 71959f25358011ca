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

qf_status qf_run_batches(qf_graph *g, const qf_tensor *const *data, int ndata, const qf_batch_options *opt)
{
    qf_data_source src = qf_data_source_tensors(data, ndata);
    return qf_run_source(g, &src, opt);
}

qf_status qf_run_source(qf_graph *g, const qf_data_source *src, const qf_batch_options *opt)
{
    int64_t batch = opt->batch ? opt->batch : 32;
    int ndata = src->ninputs;
    const qf_tensor *const *data = src->inputs;
    if (ndata != g->ninputs)
        return qf_error(QF_ERR_INVALID, "the graph has %d input%s, %d data set%s given", g->ninputs,
                        g->ninputs == 1 ? "" : "s", ndata, ndata == 1 ? "" : "s");
    if (ndata == 0) return qf_error(QF_ERR_INVALID, "the graph has no inputs to feed");
    int64_t n = data[0]->ndim >= 1 ? data[0]->dims[0] : 0;
    if (n < 1) return qf_error(QF_ERR_SHAPE, "input '%s': the data holds no samples", g->inputs[0]->name);
    for (int i = 0; i < ndata; i++) QF_TRY(batch_check(g->inputs[i], data[i], n));
    /* A graph with a fixed batch size runs that size (the last batch padded
     * by repeating its last sample); a dynamic one the size asked for. */
    int64_t fixed = g->inputs[0]->type.dims[0];
    if (fixed > 0) batch = fixed;
    if (batch < 1) return qf_error(QF_ERR_INVALID, "batch size %lld", (long long)batch);

    batch_state s = {g, qf_malloc(sizeof *s.dims * (size_t)ndata)};
    qf_tensor *views = qf_calloc((size_t)ndata, sizeof *views);
    const qf_tensor **feed = qf_calloc((size_t)ndata, sizeof *feed);
    void **pad = qf_calloc((size_t)ndata, sizeof *pad);
    const void **rows = qf_calloc((size_t)ndata, sizeof *rows);
    if (!s.dims || !views || !feed || !pad || !rows) {
        qf_free(s.dims);
        qf_free(views);
        qf_free(feed);
        qf_free(pad);
        qf_free(rows);
        return QF_ERR_NOMEM;
    }
    for (int i = 0; i < ndata; i++) memcpy(s.dims[i], g->inputs[i]->type.dims, sizeof s.dims[i]);
    qf_plan *plan = NULL;
    int64_t planned = 0;
    qf_status st = QF_OK;
    for (int64_t first = 0; first < n && st == QF_OK; first += batch) {
        int64_t count = n - first < batch ? n - first : batch;
        int64_t rows_run = fixed > 0 ? fixed : count;
        if (rows_run != planned) {
            qf_plan_free(plan);
            plan = NULL;
            batch_restore(&s);
            for (int i = 0; i < ndata && st == QF_OK; i++) {
                int64_t dims[QF_MAX_DIMS];
                memcpy(dims, data[i]->dims, sizeof dims);
                dims[0] = rows_run;
                st = qf_graph_set_input_shape(g, i, data[i]->ndim, dims);
            }
            /* A hook sees every node's output: such plans run without
             * NHWC and fusion. An observer sees the values it asks for:
             * the plan keeps those unfused, and the rest as qf_plan_init. */
            if (st == QF_OK)
                st = opt->observer ? qf_plan_init_observed(&plan, g, opt->observer)
                     : opt->hook   ? qf_plan_init_plain(&plan, g)
                                   : qf_plan_init(&plan, g);
            if (st != QF_OK) break;
            qf_plan_set_hook(plan, opt->hook, opt->hook_ud);
            planned = rows_run;
        }
        st = src->read(src, first, count, rows);
        for (int i = 0; i < ndata && st == QF_OK; i++) {
            size_t sample = qf_tensor_nbytes(data[i]) / (size_t)n;
            int64_t dims[QF_MAX_DIMS];
            memcpy(dims, data[i]->dims, sizeof dims);
            dims[0] = rows_run;
            const char *p = rows[i];
            if (count < rows_run) {
                /* Pad a short last batch of a fixed-batch graph. */
                if (!pad[i] && !(pad[i] = qf_malloc(sample * (size_t)rows_run))) {
                    st = QF_ERR_NOMEM;
                    break;
                }
                memcpy(pad[i], p, sample * (size_t)count);
                for (int64_t r = count; r < rows_run; r++)
                    memcpy((char *)pad[i] + (size_t)r * sample, p + (size_t)(count - 1) * sample, sample);
                p = pad[i];
            }
            qf_tensor_view(&views[i], data[i]->dtype, data[i]->ndim, dims, (void *)p);
            feed[i] = &views[i];
        }
        if (st == QF_OK) st = qf_plan_run(plan, feed, ndata);
        if (st == QF_OK && opt->on_batch) st = opt->on_batch(opt->ud, first, count, plan);
    }
    qf_plan_free(plan);
    batch_restore(&s);
    /* Every other value's shape follows the inputs' again (an exported
     * graph must not keep the last batch size in its output shapes). */
    if (planned) {
        qf_status ist = qf_graph_infer_shapes(g);
        if (st == QF_OK) st = ist;
    }
    for (int i = 0; i < ndata; i++) qf_free(pad[i]);
    qf_free(pad);
    qf_free(rows);
    qf_free(s.dims);
    qf_free(views);
    qf_free(feed);
    return st;
}
