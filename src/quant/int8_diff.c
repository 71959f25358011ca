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
    qf_batcher *sim;        /* (b): the graph as written, run in step with (a) */
    const void **rows;      /* the rows (a) ran on (the wrapped source's last read) */
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
    QF_TRY(qf_batcher_run(s->sim, s->rows, count));
    int64_t rows_run = qf_batcher_rows(s->sim, count);
    const qf_plan *sim = qf_batcher_plan(s->sim);
    for (int k = 0; k < s->nnames; k++) {
        if (s->idx_ref[k] < 0) continue;
        const qf_tensor *a = qf_plan_output(ref, s->idx_ref[k]), *b = qf_plan_output(sim, s->idx_sim[k]);
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
    qf_status st = idx && in && lim && s.rows ? QF_OK : QF_ERR_NOMEM;
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
        s.idx_ref = idx;
        s.idx_sim = idx + nnames;
        qf_data_source wrap = {.ninputs = ni, .inputs = in, .read = diff_read, .ud = &s};
        st = qf_batcher_open(&s.sim, sim, in, ni, &(qf_batch_options){0});
        if (st == QF_OK)
            st = qf_run_source(ref, &wrap, &(qf_batch_options){.batch = 16, .on_batch = diff_batch, .ud = &s});
    }
    qf_status cst = qf_batcher_close(s.sim);
    if (st == QF_OK) st = cst;
    qf_free(s.rows);
    qf_free(in);
    qf_free(lim);
    qf_free(idx);
    qf_graph_free(ref);
    qf_graph_free(sim);
    return st;
}
