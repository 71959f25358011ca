/* Matrix products: Gemm, MatMul (numpy matmul) and the internal `linear`
 * (ATen: y = x W^T + b with W [out, in]). Everything goes through
 * qf_sgemm / qf_dgemm (ops/gemm.h), row-major.
 */
#include <limits.h>
#include <string.h>

#include "ops/math/broadcast.h"
#include "ops/math/gemm.h"
#include "ops/kernels.h"

/* Inputs [0, required) present, float32 / float64, all present ones of one
 * dtype. */
static qf_status linear_check_float_inputs(const qf_node *n, int required)
{
    for (int i = 0; i < required; i++)
        if (i >= n->ninputs || !n->inputs[i])
            return qf_error(QF_ERR_INVALID, "node '%s' (%s): input %d is missing", n->name, qf_op_label(n), i);
    qf_dtype dt = n->inputs[0]->type.dtype;
    if (dt != QF_DTYPE_F32 && dt != QF_DTYPE_F64)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): dtype %s is not supported (float32, float64)",
                        n->name, qf_op_label(n), qf_dtype_name(dt));
    for (int i = 1; i < n->ninputs; i++)
        if (n->inputs[i] && n->inputs[i]->type.dtype != dt)
            return qf_error(QF_ERR_INVALID, "node '%s' (%s): input %d has dtype %s, input 0 has %s", n->name,
                            qf_op_label(n), i, qf_dtype_name(n->inputs[i]->type.dtype), qf_dtype_name(dt));
    return QF_OK;
}

static bool linear_dims_differ(int64_t a, int64_t b) { return a >= 0 && b >= 0 && a != b; }

/* One row-major GEMM: C = alpha * op(A) op(B) + beta * C, C is [M, N] with
 * leading dimension N. Leading dimensions >= 1 even for empty operands. */
static qf_status gemm_call(const qf_node *n, qf_dtype dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                           double alpha, const void *A, int64_t lda, const void *B, int64_t ldb, double beta,
                           void *C)
{
    if (M == 0 || N == 0) return QF_OK;
    lda = lda < 1 ? 1 : lda;
    ldb = ldb < 1 ? 1 : ldb;
    if (dt == QF_DTYPE_F32)
        return qf_sgemm(n, &(qf_sgemm_args){.ta = ta, .tb = tb, .m = M, .n = N, .k = K, .alpha = (float)alpha,
                                            .a = A, .lda = lda, .b = B, .ldb = ldb, .beta = (float)beta, .c = C,
                                            .ldc = N});
    return qf_dgemm(n, &(qf_dgemm_args){.ta = ta, .tb = tb, .m = M, .n = N, .k = K, .alpha = alpha, .a = A,
                                        .lda = lda, .b = B, .ldb = ldb, .beta = beta, .c = C, .ldc = N});
}

/* y = src broadcast to y's shape (y contiguous, same dtype). */
static void linear_broadcast_fill(const qf_tensor *src, qf_tensor *y)
{
    size_t es = qf_dtype_size(y->dtype);
    int64_t ny = qf_tensor_numel(y);
    if (qf_tensor_numel(src) == ny) {
        memcpy(y->data, src->data, (size_t)ny * es);
        return;
    }
    const qf_tensor *ops[1] = {src};
    qf_bcast_iter it;
    qf_bcast_iter_init(&it, y->ndim, y->dims, 1, ops);
    char *py = y->data;
    const char *ps = src->data;
    for (int64_t r = 0; r < it.rows; r++, qf_bcast_iter_next(&it)) {
        char *row = py + (size_t)(r * it.len) * es;
        if (it.step[0]) {
            memcpy(row, ps + (size_t)it.off[0] * es, (size_t)it.len * es);
        } else {
            for (int64_t i = 0; i < it.len; i++) memcpy(row + (size_t)i * es, ps + (size_t)it.off[0] * es, es);
        }
    }
}

/* --- backward helpers ------------------------------------------------------ */

/* The backward kernels compute in float32 (the gradients are float32): a
 * float64 graph cannot be trained through. */
static qf_status linear_bwd_check(const qf_kernel_io *io)
{
    qf_dtype dt = io->out[0]->dtype;
    if (dt != QF_DTYPE_F32)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): backward of dtype %s is not supported (float32)",
                        io->node->name, qf_op_label(io->node), qf_dtype_name(dt));
    return QF_OK;
}

/* din[i] (when wanted) = 0: no gradient reaches the output. */
static void linear_bwd_zero(const qf_kernel_io *io)
{
    for (int i = 0; i < io->nin; i++)
        if (io->din[i]) memset(io->din[i]->data, 0, qf_tensor_nbytes(io->din[i]));
}

/* --- Gemm ------------------------------------------------------------------ */

static qf_status qf_gemm_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    QF_TRY(linear_check_float_inputs(n, 2));
    const qf_tensor *a = &n->inputs[0]->type, *b = &n->inputs[1]->type;
    const qf_tensor *c = n->ninputs > 2 && n->inputs[2] ? &n->inputs[2]->type : NULL;
    char sa[128], sb[128];
    if (a->ndim != 2 || b->ndim != 2)
        return qf_error(QF_ERR_SHAPE, "node '%s' (Gemm): A and B must be 2-D, have shapes %s and %s", n->name,
                        qf_shape_str(a->ndim, a->dims, sa, sizeof sa), qf_shape_str(b->ndim, b->dims, sb, sizeof sb));
    bool ta = qf_node_attr_int(n, "transA", 0) != 0, tb = qf_node_attr_int(n, "transB", 0) != 0;
    int64_t M = a->dims[ta ? 1 : 0], K = a->dims[ta ? 0 : 1];
    int64_t Kb = b->dims[tb ? 1 : 0], N = b->dims[tb ? 0 : 1];
    if (linear_dims_differ(K, Kb))
        return qf_error(QF_ERR_SHAPE, "node '%s' (Gemm): inner dimensions differ: A %s (transA=%d) and B %s (transB=%d)",
                        n->name, qf_shape_str(a->ndim, a->dims, sa, sizeof sa), ta,
                        qf_shape_str(b->ndim, b->dims, sb, sizeof sb), tb);
    int64_t y[2] = {M, N};
    if (c && !qf_broadcast_to_ok(c->ndim, c->dims, 2, y))
        return qf_error(QF_ERR_SHAPE, "node '%s' (Gemm): C %s cannot be broadcast to the output %s", n->name,
                        qf_shape_str(c->ndim, c->dims, sa, sizeof sa), qf_shape_str(2, y, sb, sizeof sb));
    qf_set_output(n, 0, a->dtype, 2, y);
    return QF_OK;
}

/* What prepare keeps for Gemm: its attributes, decoded once. */
typedef struct gemm_state {
    bool ta, tb;
    double alpha, beta;
} gemm_state;

static qf_status qf_gemm_prepare(const qf_kernel_io *io, void *state)
{
    gemm_state *st = state;
    st->ta = qf_node_attr_int(io->node, "transA", 0) != 0;
    st->tb = qf_node_attr_int(io->node, "transB", 0) != 0;
    st->alpha = qf_node_attr_float(io->node, "alpha", 1.0f);
    st->beta = qf_node_attr_float(io->node, "beta", 1.0f);
    return QF_OK;
}

static qf_status qf_gemm_forward_f32(const qf_kernel_io *io)
{
    const qf_tensor *a = io->in[0], *b = io->in[1];
    const qf_tensor *c = io->nin > 2 ? io->in[2] : NULL;
    qf_tensor *y = io->out[0];
    const gemm_state *st = io->state;
    bool ta = st->ta, tb = st->tb;
    double alpha = st->alpha, beta = st->beta;
    int64_t M = y->dims[0], N = y->dims[1], K = a->dims[ta ? 0 : 1];
    /* Y starts as C (broadcast), and the GEMM adds alpha * A'B' to beta * Y.
     * With no C, beta 0 makes it ignore Y's (uninitialised) contents. */
    if (c && beta != 0.0 && qf_tensor_numel(y) > 0) linear_broadcast_fill(c, y);
    else beta = 0.0;
    return gemm_call(io->node, y->dtype, ta, tb, M, N, K, alpha, a->data, a->dims[1], b->data, b->dims[1], beta,
                     y->data);
}

/* Y = alpha op(A) op(B) + beta C, G = dL/dY [M, N]:
 *   d op(A) = alpha G op(B)^T, d op(B) = alpha op(A)^T G, dC = beta * G
 * summed over the dims C broadcasts (torch's addmm backward, sum_to). With
 * transA the stored A is op(A)^T, so dA = alpha op(B) G^T [K, M]; with
 * transB, dB = alpha G^T op(A) [N, K]. Reads A and B (bwd_in bits 0, 1). */
static qf_status qf_gemm_backward_f32(const qf_kernel_io *io)
{
    QF_TRY(linear_bwd_check(io));
    if (!io->dout[0]) {
        linear_bwd_zero(io);
        return QF_OK;
    }
    const qf_tensor *a = io->in[0], *b = io->in[1], *gt = io->dout[0];
    const gemm_state *st = io->state;
    const bool ta = st->ta, tb = st->tb;
    const double alpha = st->alpha, beta = st->beta;
    const int64_t M = gt->dims[0], N = gt->dims[1], K = a->dims[ta ? 0 : 1];
    const int64_t lda = a->dims[1], ldb = b->dims[1];
    const float *g = gt->data;
    qf_tensor *da = io->din[0], *db = io->din[1], *dc = io->nin > 2 ? io->din[2] : NULL;
    if (da) {
        if (!ta)
            QF_TRY(gemm_call(io->node, QF_DTYPE_F32, false, !tb, M, K, N, alpha, g, N, b->data, ldb, 0.0,
                             da->data));
        else
            QF_TRY(gemm_call(io->node, QF_DTYPE_F32, tb, true, K, M, N, alpha, b->data, ldb, g, N, 0.0,
                             da->data));
    }
    if (db) {
        if (!tb)
            QF_TRY(gemm_call(io->node, QF_DTYPE_F32, !ta, false, K, N, M, alpha, a->data, lda, g, N, 0.0,
                             db->data));
        else
            QF_TRY(gemm_call(io->node, QF_DTYPE_F32, true, ta, N, K, M, alpha, g, N, a->data, lda, 0.0,
                             db->data));
    }
    if (dc) qf_bcast_reduce_f32(2, gt->dims, g, (float)beta, dc);
    return QF_OK;
}

/* --- MatMul ------------------------------------------------------------------ */

/* numpy matmul's view of the operands: A [..., M, K], B [..., K, N]; a 1-D A
 * is [1, K] and a 1-D B is [K, 1], and those dims are dropped from the
 * output. The batch dims (all but the last two) broadcast. */
typedef struct mm_dims {
    int64_t M, K, Kb, N;
    int na, nb;                      /* batch ranks */
    const int64_t *ba, *bb;          /* batch dims */
} mm_dims;

static void mm_dims_get(const qf_tensor *a, const qf_tensor *b, mm_dims *d)
{
    d->M = a->ndim >= 2 ? a->dims[a->ndim - 2] : 1;
    d->K = a->dims[a->ndim - 1];
    d->Kb = b->ndim >= 2 ? b->dims[b->ndim - 2] : b->dims[0];
    d->N = b->ndim >= 2 ? b->dims[b->ndim - 1] : 1;
    d->na = a->ndim > 2 ? a->ndim - 2 : 0;
    d->nb = b->ndim > 2 ? b->ndim - 2 : 0;
    d->ba = a->dims;
    d->bb = b->dims;
}

static qf_status qf_matmul_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    QF_TRY(linear_check_float_inputs(n, 2));
    const qf_tensor *a = &n->inputs[0]->type, *b = &n->inputs[1]->type;
    char sa[128], sb[128];
    if (a->ndim < 1 || b->ndim < 1)
        return qf_error(QF_ERR_SHAPE, "node '%s' (MatMul): operands must have rank >= 1, have shapes %s and %s",
                        n->name, qf_shape_str(a->ndim, a->dims, sa, sizeof sa),
                        qf_shape_str(b->ndim, b->dims, sb, sizeof sb));
    mm_dims d;
    mm_dims_get(a, b, &d);
    int ny;
    int64_t y[QF_MAX_DIMS];
    if (linear_dims_differ(d.K, d.Kb) || !qf_broadcast_shape(d.na, d.ba, d.nb, d.bb, &ny, y))
        return qf_error(QF_ERR_SHAPE, "node '%s' (MatMul): shapes %s and %s do not fit (%s)", n->name,
                        qf_shape_str(a->ndim, a->dims, sa, sizeof sa), qf_shape_str(b->ndim, b->dims, sb, sizeof sb),
                        linear_dims_differ(d.K, d.Kb) ? "inner dimensions differ" : "batch dimensions do not broadcast");
    if (a->ndim >= 2) y[ny++] = d.M;
    if (b->ndim >= 2) y[ny++] = d.N;
    qf_set_output(n, 0, a->dtype, ny, y);
    return QF_OK;
}

static qf_status qf_matmul_forward_f32(const qf_kernel_io *io)
{
    const qf_tensor *a = io->in[0], *b = io->in[1];
    qf_tensor *y = io->out[0];
    mm_dims d;
    mm_dims_get(a, b, &d);
    size_t es = qf_dtype_size(y->dtype);
    int64_t nbatch_b = qf_shape_numel(d.nb, d.bb);
    if (qf_tensor_numel(y) == 0) return QF_OK;

    /* B shared by every batch (2-D, or leading 1s): A's rows are contiguous,
     * so the whole batch is one GEMM with M * batch rows. */
    if (nbatch_b == 1) {
        int64_t rows = qf_shape_numel(d.na, d.ba) * d.M;
        return gemm_call(io->node, y->dtype, false, false, rows, d.N, d.K, 1.0, a->data, d.K, b->data, d.N, 0.0,
                         y->data);
    }

    /* One GEMM per output batch entry; the batch index walks A's and B's
     * (broadcast) batch dims like an elementwise op over the batch shapes. */
    int nyb;
    int64_t yb[QF_MAX_DIMS];
    qf_broadcast_shape(d.na, d.ba, d.nb, d.bb, &nyb, yb);
    qf_tensor va, vb;
    qf_tensor_view(&va, a->dtype, d.na, d.ba, NULL);
    qf_tensor_view(&vb, b->dtype, d.nb, d.bb, NULL);
    const qf_tensor *ops[2] = {&va, &vb};
    qf_bcast_iter it;
    qf_bcast_iter_init(&it, nyb, yb, 2, ops);
    const char *pa = a->data, *pb = b->data;
    char *py = y->data;
    size_t sa = (size_t)(d.M * d.K) * es, sb = (size_t)(d.K * d.N) * es, sy = (size_t)(d.M * d.N) * es;
    for (int64_t r = 0; r < it.rows; r++, qf_bcast_iter_next(&it)) {
        for (int64_t i = 0; i < it.len; i++) {
            int64_t ia = it.off[0] + i * it.step[0], ib = it.off[1] + i * it.step[1], iy = r * it.len + i;
            QF_TRY(gemm_call(io->node, y->dtype, false, false, d.M, d.N, d.K, 1.0, pa + (size_t)ia * sa, d.K,
                             pb + (size_t)ib * sb, d.N, 0.0, py + (size_t)iy * sy));
        }
    }
    return QF_OK;
}

/* G = dL/dY. Per batch entry: dA_b = G_b B_b^T, dB_b = A_b^T G_b (a 1-D A
 * is [1, K], a 1-D B [K, 1]: the same memory), summed over the batch
 * entries that read the same A_b / B_b (broadcast batch dims), as torch's
 * matmul backward reduces with sum_to. Reads A and B (bwd_in bits 0, 1). */
static qf_status qf_matmul_backward_f32(const qf_kernel_io *io)
{
    QF_TRY(linear_bwd_check(io));
    if (!io->dout[0]) {
        linear_bwd_zero(io);
        return QF_OK;
    }
    const qf_tensor *a = io->in[0], *b = io->in[1];
    qf_tensor *da = io->din[0], *db = io->din[1];
    const float *g = io->dout[0]->data;
    mm_dims d;
    mm_dims_get(a, b, &d);
    const int64_t nbatch_a = qf_shape_numel(d.na, d.ba), nbatch_b = qf_shape_numel(d.nb, d.bb);

    /* B shared by every batch entry: as in the forward, the batch is one
     * GEMM over M * batch rows, and dB sums over them in its K dim. */
    if (nbatch_b == 1) {
        int64_t rows = nbatch_a * d.M;
        if (da) QF_TRY(gemm_call(io->node, QF_DTYPE_F32, false, true, rows, d.K, d.N, 1.0, g, d.N, b->data, d.N, 0.0,
                                 da->data));
        if (db) QF_TRY(gemm_call(io->node, QF_DTYPE_F32, true, false, d.K, d.N, rows, 1.0, a->data, d.K, g, d.N, 0.0,
                                 db->data));
        return QF_OK;
    }

    int nyb;
    int64_t yb[QF_MAX_DIMS];
    qf_broadcast_shape(d.na, d.ba, d.nb, d.bb, &nyb, yb);
    const int64_t nbatch_y = qf_shape_numel(nyb, yb);
    /* An operand whose batch is not broadcast is written once per entry
     * (beta 0); a broadcast one accumulates (zeroed, beta 1). */
    const double beta_a = nbatch_a == nbatch_y ? 0.0 : 1.0, beta_b = nbatch_b == nbatch_y ? 0.0 : 1.0;
    if (da && beta_a != 0.0) memset(da->data, 0, qf_tensor_nbytes(da));
    if (db && beta_b != 0.0) memset(db->data, 0, qf_tensor_nbytes(db));
    qf_tensor va, vb;
    qf_tensor_view(&va, a->dtype, d.na, d.ba, NULL);
    qf_tensor_view(&vb, b->dtype, d.nb, d.bb, NULL);
    const qf_tensor *ops[2] = {&va, &vb};
    qf_bcast_iter it;
    qf_bcast_iter_init(&it, nyb, yb, 2, ops);
    const float *pa = a->data, *pb = b->data;
    const int64_t sa = d.M * d.K, sb = d.K * d.N, sy = d.M * d.N;
    for (int64_t r = 0; r < it.rows; r++, qf_bcast_iter_next(&it)) {
        for (int64_t i = 0; i < it.len; i++) {
            int64_t ia = it.off[0] + i * it.step[0], ib = it.off[1] + i * it.step[1], iy = r * it.len + i;
            if (da)
                QF_TRY(gemm_call(io->node, QF_DTYPE_F32, false, true, d.M, d.K, d.N, 1.0, g + iy * sy, d.N,
                                 pb + ib * sb, d.N, beta_a, (float *)da->data + ia * sa));
            if (db)
                QF_TRY(gemm_call(io->node, QF_DTYPE_F32, true, false, d.K, d.N, d.M, 1.0, pa + ia * sa, d.K,
                                 g + iy * sy, d.N, beta_b, (float *)db->data + ib * sb));
        }
    }
    return QF_OK;
}

/* --- linear (ATen) --------------------------------------------------------- */

static qf_status qf_linear_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    QF_TRY(linear_check_float_inputs(n, 2));
    const qf_tensor *x = &n->inputs[0]->type, *w = &n->inputs[1]->type;
    const qf_tensor *b = n->ninputs > 2 && n->inputs[2] ? &n->inputs[2]->type : NULL;
    char sx[128], sw[128];
    if (x->ndim < 1 || w->ndim != 2 || linear_dims_differ(x->dims[x->ndim - 1], w->dims[1]))
        return qf_error(QF_ERR_SHAPE, "node '%s' (linear): input %s does not fit weight %s ([out, in])", n->name,
                        qf_shape_str(x->ndim, x->dims, sx, sizeof sx), qf_shape_str(w->ndim, w->dims, sw, sizeof sw));
    if (b && (b->ndim != 1 || linear_dims_differ(b->dims[0], w->dims[0])))
        return qf_error(QF_ERR_SHAPE, "node '%s' (linear): bias %s does not fit weight %s ([out, in])", n->name,
                        qf_shape_str(b->ndim, b->dims, sx, sizeof sx), qf_shape_str(w->ndim, w->dims, sw, sizeof sw));
    int64_t y[QF_MAX_DIMS];
    memcpy(y, x->dims, sizeof(int64_t) * (size_t)x->ndim);
    y[x->ndim - 1] = w->dims[0];
    qf_set_output(n, 0, x->dtype, x->ndim, y);
    return QF_OK;
}

static qf_status qf_linear_forward_f32(const qf_kernel_io *io)
{
    const qf_tensor *x = io->in[0], *w = io->in[1];
    const qf_tensor *b = io->nin > 2 ? io->in[2] : NULL;
    qf_tensor *y = io->out[0];
    int64_t in = w->dims[1], out = w->dims[0];
    int64_t rows = out > 0 ? qf_tensor_numel(y) / out : 0;
    double beta = 0.0;
    /* Every row of y starts as the bias; the GEMM adds x W^T on top. */
    if (b && rows > 0) {
        size_t row = (size_t)out * qf_dtype_size(y->dtype);
        for (int64_t r = 0; r < rows; r++) memcpy((char *)y->data + (size_t)r * row, b->data, row);
        beta = 1.0;
    }
    return gemm_call(io->node, y->dtype, false, true, rows, out, in, 1.0, x->data, in, w->data, in, beta, y->data);
}

/* y = x W^T + b over rows of x: with G = dL/dy [rows, out], dx = G W,
 * dW = G^T x, db = the column sums of G (torch's linear backward). Reads x
 * and W (bwd_in bits 0, 1). */
static qf_status qf_linear_backward_f32(const qf_kernel_io *io)
{
    QF_TRY(linear_bwd_check(io));
    if (!io->dout[0]) {
        linear_bwd_zero(io);
        return QF_OK;
    }
    const qf_tensor *x = io->in[0], *w = io->in[1];
    qf_tensor *dx = io->din[0], *dw = io->din[1], *db = io->nin > 2 ? io->din[2] : NULL;
    const float *g = io->dout[0]->data;
    const int64_t in = w->dims[1], out = w->dims[0];
    const int64_t rows = out > 0 ? qf_tensor_numel(io->out[0]) / out : qf_tensor_numel(x) / (in > 0 ? in : 1);
    if (dx) QF_TRY(gemm_call(io->node, QF_DTYPE_F32, false, false, rows, in, out, 1.0, g, out, w->data, in, 0.0,
                             dx->data));
    if (dw) QF_TRY(gemm_call(io->node, QF_DTYPE_F32, true, false, out, in, rows, 1.0, g, out, x->data, in, 0.0,
                             dw->data));
    if (db) {
        /* Column sums in double (scratch: out doubles), rows outermost so
         * the inner loop runs over contiguous memory. */
        double *acc = io->scratch;
        float *pdb = db->data;
        for (int64_t o = 0; o < out; o++) acc[o] = 0.0;
        for (int64_t r = 0; r < rows; r++) {
            const float *gr = g + r * out;
            for (int64_t o = 0; o < out; o++) acc[o] += gr[o];
        }
        for (int64_t o = 0; o < out; o++) pdb[o] = (float)acc[o];
    }
    return QF_OK;
}

static size_t qf_linear_bwd_scratch(const qf_node *n, const void *state)
{
    (void)state;
    int64_t out = n->inputs[1]->type.dims[0];
    return out > 0 ? sizeof(double) * (size_t)out : 0;
}

/* --- op table columns (src/ops/op_table.h) --- */

const qf_op_kernels qf_gemm_kernels = {
    .infer = qf_gemm_infer,
    .prepare = qf_gemm_prepare,
    .state_size = sizeof(gemm_state),
    .forward_f32 = qf_gemm_forward_f32,
    .backward_f32 = qf_gemm_backward_f32,
    .bwd_in = (1u << 0) | (1u << 1),
};

const qf_op_kernels qf_matmul_kernels = {
    .infer = qf_matmul_infer,
    .forward_f32 = qf_matmul_forward_f32,
    .backward_f32 = qf_matmul_backward_f32,
    .bwd_in = (1u << 0) | (1u << 1),
};

const qf_op_kernels qf_linear_kernels = {
    .infer = qf_linear_infer,
    .forward_f32 = qf_linear_forward_f32,
    .backward_f32 = qf_linear_backward_f32,
    .bwd_in = (1u << 0) | (1u << 1),
    .bwd_scratch = qf_linear_bwd_scratch,
};
