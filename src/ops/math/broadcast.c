/* numpy broadcasting: output shapes and the row iterator (see broadcast.h). */
#include <assert.h>
#include <string.h>

#include "ops/math/broadcast.h"

bool qf_broadcast_shape(int na, const int64_t *a, int nb, const int64_t *b, int *nout,
                        int64_t out[QF_MAX_DIMS])
{
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        /* Right-aligned: dim i of the output is dim i - (n - na) of a. */
        int ia = i - (n - na), ib = i - (n - nb);
        int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
        int64_t d;
        if (da == db) d = da;
        else if (da == 1) d = db;
        else if (db == 1) d = da;
        /* A symbolic dim facing a known k > 1 must be 1 or k: the result is k. */
        else if (da < 0) d = db;
        else if (db < 0) d = da;
        else return false;
        out[i] = d;
    }
    *nout = n;
    return true;
}

qf_status qf_broadcast_infer(const qf_node *n, int na, const int64_t *a, int nb, const int64_t *b,
                             int *nout, int64_t out[QF_MAX_DIMS])
{
    if (qf_broadcast_shape(na, a, nb, b, nout, out)) return QF_OK;
    char sa[128], sb[128];
    const char *op = qf_op_onnx_name(n->op) ? qf_op_onnx_name(n->op) : qf_op_name(n->op);
    return qf_error(QF_ERR_SHAPE, "node '%s' (%s): shapes %s and %s cannot be broadcast together",
                    n->name, op, qf_shape_str(na, a, sa, sizeof sa), qf_shape_str(nb, b, sb, sizeof sb));
}

bool qf_broadcast_to_ok(int nfrom, const int64_t *from, int nto, const int64_t *to)
{
    if (nfrom > nto) return false;
    for (int i = 0; i < nfrom; i++) {
        int64_t f = from[i], t = to[i + nto - nfrom];
        if (f != 1 && f >= 0 && t >= 0 && f != t) return false;
    }
    return true;
}

void qf_broadcast_strides(int n, const int64_t *dims, int nout, const int64_t *out, int64_t *strides)
{
    int64_t s = 1;
    for (int i = nout - 1; i >= 0; i--) {
        int j = i - (nout - n);
        if (j < 0 || dims[j] == 1) {
            strides[i] = 0;
        } else {
            assert(dims[j] == out[i]);
            (void)out; /* only checked in debug builds */
            strides[i] = s;
            s *= dims[j];
        }
    }
}

void qf_bcast_iter_init(qf_bcast_iter *it, int nout, const int64_t *out, int nops,
                        const qf_tensor *const *ops)
{
    assert(nops >= 1 && nops <= QF_BCAST_MAX_OPS && nout <= QF_MAX_DIMS);
    memset(it, 0, sizeof *it);
    it->nops = nops;

    int64_t full[QF_BCAST_MAX_OPS][QF_MAX_DIMS];
    bool empty = false;
    for (int k = 0; k < nops; k++) qf_broadcast_strides(ops[k]->ndim, ops[k]->dims, nout, out, full[k]);

    /* Collapse: drop size-1 dims, then merge dim j into the previous kept dim
     * p when every operand's stride satisfies s[p] == s[j] * d[j] — true when
     * the operand walks both contiguously, and when it broadcasts both
     * (0 == 0 * d). The merged dim keeps dim j's strides. */
    int nd = 0;
    int64_t d[QF_MAX_DIMS], s[QF_BCAST_MAX_OPS][QF_MAX_DIMS];
    for (int j = 0; j < nout; j++) {
        if (out[j] == 0) empty = true;
        if (out[j] == 1) continue;
        bool merge = nd > 0;
        for (int k = 0; k < nops && merge; k++) merge = s[k][nd - 1] == full[k][j] * out[j];
        if (merge) {
            d[nd - 1] *= out[j];
            for (int k = 0; k < nops; k++) s[k][nd - 1] = full[k][j];
        } else {
            d[nd] = out[j];
            for (int k = 0; k < nops; k++) s[k][nd] = full[k][j];
            nd++;
        }
    }

    if (nd == 0) {
        /* Scalar output (or all dims 1): one row of one element. */
        it->rows = empty ? 0 : 1;
        it->len = 1;
        return;
    }
    it->len = d[nd - 1];
    for (int k = 0; k < nops; k++) {
        it->step[k] = s[k][nd - 1];
        assert(it->step[k] == 0 || it->step[k] == 1);
    }
    it->nouter = nd - 1;
    it->rows = empty ? 0 : 1;
    for (int j = 0; j < nd - 1; j++) {
        it->dims[j] = d[j];
        it->rows *= d[j];
        for (int k = 0; k < nops; k++) it->strides[k][j] = s[k][j];
    }
}

void qf_bcast_iter_next(qf_bcast_iter *it)
{
    /* Odometer: bump the innermost outer dim; on wrap, rewind it and carry. */
    for (int j = it->nouter - 1; j >= 0; j--) {
        if (++it->idx[j] < it->dims[j]) {
            for (int k = 0; k < it->nops; k++) it->off[k] += it->strides[k][j];
            return;
        }
        it->idx[j] = 0;
        for (int k = 0; k < it->nops; k++) it->off[k] -= it->strides[k][j] * (it->dims[j] - 1);
    }
}

void qf_bcast_iter_seek(qf_bcast_iter *it, int64_t row)
{
    for (int k = 0; k < it->nops; k++) it->off[k] = 0;
    for (int j = it->nouter - 1; j >= 0; j--) {
        it->idx[j] = row % it->dims[j];
        row /= it->dims[j];
        for (int k = 0; k < it->nops; k++) it->off[k] += it->idx[j] * it->strides[k][j];
    }
}

void qf_bcast_reduce_f32(int nout, const int64_t *out, const float *g, float scale, qf_tensor *d)
{
    float *pd = d->data;
    const int64_t nd = qf_tensor_numel(d), ny = qf_shape_numel(nout, out);
    if (nd == ny) {
        /* Broadcasting only adds elements: same count, same layout. */
        for (int64_t i = 0; i < nd; i++) pd[i] = scale * g[i];
        return;
    }
    if (nd > 0) memset(pd, 0, sizeof *pd * (size_t)nd);
    const qf_tensor *ops[1] = {d};
    qf_bcast_iter it;
    qf_bcast_iter_init(&it, nout, out, 1, ops);
    for (int64_t r = 0; r < it.rows; r++, qf_bcast_iter_next(&it)) {
        const float *gr = g + r * it.len;
        float *dr = pd + it.off[0];
        if (it.step[0]) {
            for (int64_t i = 0; i < it.len; i++) dr[i] += gr[i];
        } else {
            double s = 0.0;
            for (int64_t i = 0; i < it.len; i++) s += gr[i];
            dr[0] += (float)s;
        }
    }
    if (scale != 1.0f)
        for (int64_t i = 0; i < nd; i++) pd[i] *= scale;
}
