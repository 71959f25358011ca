/* The export report's per-op LSB figure: run a QDQ graph twice on the same
 * data, (a) as the integer reference (lowered by qf_quant_lower_int8 with
 * TFLite's fixed-point requantization: what the exported .tflite computes)
 * and (b) as written (Q / DQ in float: the simulation `qfold run --simulate`
 * computes), and keep, per named int8 value, the largest |a - b| over every
 * element of every sample.
 *
 * The named values are made graph outputs of both copies before the
 * lowering: a graph output keeps its name through qf_graph_replace_uses, so
 * the lowered group's output answers to the Q output's name. Both copies run
 * batch by batch in step (one batch of each in memory). */
#include <stdlib.h>
#include <string.h>

#include "qfold/exec.h"
#include "qfold/quant.h"

typedef struct diff_state {
    const qf_data_source *src;
    qf_graph *sim;          /* (b): the graph as written */
    qf_plan *plan;          /* its plan, for `planned` rows */
    int64_t planned;
    const void **rows;      /* the rows (a) ran on (the wrapped source's last read) */
    void **pad;             /* a short last batch of a fixed-batch graph, padded */
    qf_tensor *views;
    const qf_tensor **feed;
    int nnames;
    const int *idx_ref, *idx_sim; /* output index per name, -1: not measured */
    int32_t *max_lsb;
} diff_state;

static qf_status diff_read(const qf_data_source *src, int64_t first, int64_t count, const void **rows)
{
    diff_state *s = src->ud;
    QF_TRY(s->src->read(s->src, first, count, rows));
    for (int i = 0; i < src->ninputs; i++) s->rows[i] = rows[i];
    return QF_OK;
}

/* The batch (a) just ran: run (b) on the same rows, compare the outputs. */
static qf_status diff_batch(void *ud, int64_t first, int64_t count, const qf_plan *ref)
{
    (void)first;
    diff_state *s = ud;
    const qf_data_source *src = s->src;
    int64_t rows_run = s->sim->inputs[0]->type.dims[0] > 0 ? s->sim->inputs[0]->type.dims[0] : count;
    if (rows_run != s->planned) {
        qf_plan_free(s->plan);
        s->plan = NULL;
        s->planned = 0;
        for (int i = 0; i < src->ninputs; i++) {
            int64_t dims[QF_MAX_DIMS];
            memcpy(dims, src->inputs[i]->dims, sizeof dims);
            dims[0] = rows_run;
            QF_TRY(qf_graph_set_input_shape(s->sim, i, src->inputs[i]->ndim, dims));
        }
        QF_TRY(qf_graph_infer_shapes(s->sim));
        QF_TRY(qf_plan_init(&s->plan, s->sim));
        s->planned = rows_run;
    }
    for (int i = 0; i < src->ninputs; i++) {
        const qf_tensor *d = src->inputs[i];
        size_t sample = qf_tensor_nbytes(d) / (size_t)d->dims[0];
        const char *p = s->rows[i];
        if (count < rows_run) {
            if (!s->pad[i] && !(s->pad[i] = qf_malloc(sample * (size_t)rows_run))) return QF_ERR_NOMEM;
            memcpy(s->pad[i], p, sample * (size_t)count);
            for (int64_t r = count; r < rows_run; r++)
                memcpy((char *)s->pad[i] + (size_t)r * sample, p + (size_t)(count - 1) * sample, sample);
            p = s->pad[i];
        }
        int64_t dims[QF_MAX_DIMS];
        memcpy(dims, d->dims, sizeof dims);
        dims[0] = rows_run;
        qf_tensor_view(&s->views[i], d->dtype, d->ndim, dims, (void *)p);
        s->feed[i] = &s->views[i];
    }
    QF_TRY(qf_plan_run(s->plan, s->feed, src->ninputs));
    for (int k = 0; k < s->nnames; k++) {
        if (s->idx_ref[k] < 0) continue;
        const qf_tensor *a = qf_plan_output(ref, s->idx_ref[k]), *b = qf_plan_output(s->plan, s->idx_sim[k]);
        int64_t n = qf_tensor_numel(a);
        if (a->dtype != QF_DTYPE_I8 || b->dtype != QF_DTYPE_I8 || qf_tensor_numel(b) != n) continue;
        /* Only the rows of real samples (a padded batch repeats the last). */
        if (a->ndim >= 1 && a->dims[0] == rows_run) n = n / rows_run * count;
        const int8_t *pa = a->data, *pb = b->data;
        int32_t m = s->max_lsb[k];
        for (int64_t e = 0; e < n; e++) {
            int32_t d = abs((int32_t)pa[e] - (int32_t)pb[e]);
            if (d > m) m = d;
        }
        s->max_lsb[k] = m;
    }
    return QF_OK;
}

/* Make value `name` of g a graph output (if it is a non-constant int8
 * value); its output index, or -1. */
static int track(qf_graph *g, const char *name, qf_status *st)
{
    qf_value *v = qf_graph_find_value(g, name);
    if (!v || qf_value_is_const(v) || v->type.dtype != QF_DTYPE_I8) return -1;
    for (int i = 0; i < g->noutputs; i++)
        if (g->outputs[i] == v) return i;
    if ((*st = qf_graph_add_output(g, v)) != QF_OK) return -1;
    return g->noutputs - 1;
}

qf_status qf_quant_int8_diff(const qf_graph *qdq, const qf_data_source *src, int64_t count, int nnames,
                             const char *const *names, int32_t *max_lsb)
{
    for (int k = 0; k < nnames; k++) max_lsb[k] = -1;
    if (nnames == 0) return QF_OK;
    qf_graph *ref = NULL, *sim = NULL;
    int *idx = qf_calloc((size_t)nnames * 2, sizeof *idx);
    int ni = src->ninputs;
    const qf_tensor **in = qf_calloc((size_t)ni + 1, sizeof *in);
    qf_tensor *lim = qf_calloc((size_t)ni + 1, sizeof *lim);
    diff_state s = {.src = src, .nnames = nnames, .max_lsb = max_lsb};
    s.rows = qf_calloc((size_t)ni + 1, sizeof *s.rows);
    s.pad = qf_calloc((size_t)ni + 1, sizeof *s.pad);
    s.views = qf_calloc((size_t)ni + 1, sizeof *s.views);
    s.feed = qf_calloc((size_t)ni + 1, sizeof *s.feed);
    qf_status st = idx && in && lim && s.rows && s.pad && s.views && s.feed ? QF_OK : QF_ERR_NOMEM;
    if (st == QF_OK) st = qf_graph_clone(qdq, &ref);
    if (st == QF_OK) st = qf_graph_clone(qdq, &sim);
    for (int k = 0; k < nnames && st == QF_OK; k++) {
        idx[k] = track(ref, names[k], &st);
        idx[nnames + k] = st == QF_OK ? track(sim, names[k], &st) : -1;
        if (idx[k] < 0 || idx[nnames + k] < 0) idx[k] = idx[nnames + k] = -1;
    }
    if (st == QF_OK) st = qf_quant_lower_int8(ref, NULL, QF_REQUANT_FIXED_POINT, NULL);
    if (st == QF_OK) st = qf_graph_infer_shapes(ref);
    /* The lowering keeps the output list (replaced values take the outputs'
     * places and names); a value it could not keep is not measured. */
    for (int k = 0; k < nnames && st == QF_OK; k++)
        if (idx[k] >= 0 && strcmp(ref->outputs[idx[k]]->name, names[k]) != 0) idx[k] = idx[nnames + k] = -1;
    if (st == QF_OK) {
        /* At most `count` samples (0: all): the same source, fewer rows. */
        int64_t n = src->inputs[0]->ndim >= 1 ? src->inputs[0]->dims[0] : 0;
        if (count > 0 && count < n) n = count;
        for (int i = 0; i < ni; i++) {
            lim[i] = *src->inputs[i];
            lim[i].data = NULL;
            lim[i].owns = false;
            if (lim[i].ndim >= 1) lim[i].dims[0] = n;
            in[i] = &lim[i];
        }
        s.sim = sim;
        s.idx_ref = idx;
        s.idx_sim = idx + nnames;
        qf_data_source wrap = {.ninputs = ni, .inputs = in, .read = diff_read, .ud = &s};
        st = qf_run_source(ref, &wrap, &(qf_batch_options){.batch = 16, .on_batch = diff_batch, .ud = &s});
    }
    qf_plan_free(s.plan);
    for (int i = 0; s.pad && i < ni; i++) qf_free(s.pad[i]);
    qf_free(s.pad);
    qf_free(s.rows);
    qf_free(s.views);
    qf_free(s.feed);
    qf_free(in);
    qf_free(lim);
    qf_free(idx);
    qf_graph_free(ref);
    qf_graph_free(sim);
    return st;
}
