/* Elementwise arithmetic: Add, Sub, Mul, Div, Pow, Mod, Equal (numpy broadcasting), Max,
 * Min (any number of inputs, broadcasting) and Sqrt, Reciprocal, Neg, Abs, Not.
 *
 * Binary kernels work row by row (see broadcast.h): a row function gets two
 * operand pointers with steps 0 or 1 and specialises the four step patterns,
 * so same-shape, scalar and per-channel operands run without index math.
 * Integer arithmetic wraps like numpy (done in unsigned types: signed
 * overflow is undefined in C); integer division truncates toward zero and a
 * zero divisor is QF_ERR_NUMERIC.
 */
#include <math.h>
#include <string.h>

#include "ops/math/broadcast.h"
#include "core/parallel.h"
#include "ops/kernels.h"

static bool ew_dtype_in(qf_dtype dt, const qf_dtype *set, int count)
{
    for (int i = 0; i < count; i++)
        if (set[i] == dt) return true;
    return false;
}

static qf_status ew_unsupported_dtype(const qf_node *n, const char *what, qf_dtype dt)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): %s dtype %s is not supported", n->name, qf_op_label(n),
                    what, qf_dtype_name(dt));
}

/* ------------------------------------------------------------------------ */
/* shape inference                                                           */

static const qf_dtype arith_dtypes[] = {QF_DTYPE_F32, QF_DTYPE_F64, QF_DTYPE_I32,
                                        QF_DTYPE_I64, QF_DTYPE_I8, QF_DTYPE_U8};

static qf_status ew_binary_infer(qf_node *n)
{
    QF_TRY(qf_op_check_inputs(n, 2));
    const qf_tensor *a = &n->inputs[0]->type, *b = &n->inputs[1]->type;
    if (a->dtype != b->dtype)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): input dtypes differ (%s and %s)", n->name, qf_op_label(n),
                        qf_dtype_name(a->dtype), qf_dtype_name(b->dtype));
    if (!ew_dtype_in(a->dtype, arith_dtypes, 6)) return ew_unsupported_dtype(n, "input", a->dtype);
    int ny;
    int64_t y[QF_MAX_DIMS];
    QF_TRY(qf_broadcast_infer(n, a->ndim, a->dims, b->ndim, b->dims, &ny, y));
    qf_set_output(n, 0, a->dtype, ny, y);
    return QF_OK;
}

static qf_status qf_add_infer(qf_graph *g, qf_node *n) { (void)g; return ew_binary_infer(n); }
static qf_status qf_sub_infer(qf_graph *g, qf_node *n) { (void)g; return ew_binary_infer(n); }
static qf_status qf_mul_infer(qf_graph *g, qf_node *n) { (void)g; return ew_binary_infer(n); }
static qf_status qf_div_infer(qf_graph *g, qf_node *n) { (void)g; return ew_binary_infer(n); }

static const qf_dtype pow_base_dtypes[] = {QF_DTYPE_F32, QF_DTYPE_F64, QF_DTYPE_I32, QF_DTYPE_I64};

/* Pow (opset 12+) lets the exponent have its own dtype; the output has the
 * base's. */
static qf_status qf_pow_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    QF_TRY(qf_op_check_inputs(n, 2));
    const qf_tensor *a = &n->inputs[0]->type, *b = &n->inputs[1]->type;
    if (!ew_dtype_in(a->dtype, pow_base_dtypes, 4)) return ew_unsupported_dtype(n, "base", a->dtype);
    if (!ew_dtype_in(b->dtype, arith_dtypes, 6)) return ew_unsupported_dtype(n, "exponent", b->dtype);
    int ny;
    int64_t y[QF_MAX_DIMS];
    QF_TRY(qf_broadcast_infer(n, a->ndim, a->dims, b->ndim, b->dims, &ny, y));
    qf_set_output(n, 0, a->dtype, ny, y);
    return QF_OK;
}

static qf_status ew_unary_infer(qf_node *n, const qf_dtype *allowed, int count)
{
    QF_TRY(qf_op_check_inputs(n, 1));
    const qf_tensor *x = &n->inputs[0]->type;
    if (!ew_dtype_in(x->dtype, allowed, count)) return ew_unsupported_dtype(n, "input", x->dtype);
    qf_set_output(n, 0, x->dtype, x->ndim, x->dims);
    return QF_OK;
}

static const qf_dtype float_dtypes[] = {QF_DTYPE_F32, QF_DTYPE_F64};
static const qf_dtype signed_dtypes[] = {QF_DTYPE_F32, QF_DTYPE_F64, QF_DTYPE_I32, QF_DTYPE_I64, QF_DTYPE_I8};

static qf_status qf_sqrt_infer(qf_graph *g, qf_node *n) { (void)g; return ew_unary_infer(n, float_dtypes, 2); }
static qf_status qf_reciprocal_infer(qf_graph *g, qf_node *n) { (void)g; return ew_unary_infer(n, float_dtypes, 2); }
static qf_status qf_neg_infer(qf_graph *g, qf_node *n) { (void)g; return ew_unary_infer(n, signed_dtypes, 5); }

/* ------------------------------------------------------------------------ */
/* binary row functions                                                      */

/* y[i] = a[i * sa] OP b[i * sb] for i < n, sa and sb in {0, 1}. Returns false
 * only for an integer division by zero. */
typedef bool (*row_fn)(const void *a, int64_t sa, const void *b, int64_t sb, void *y, int64_t n);

/* A row function for `EXPR` (in terms of x = a element, z = b element), with
 * one loop per step pattern so that the compiler vectorises each. */
#define QF_ROW_(fname, T, EXPR)                                                           \
    static bool fname(const void *a_, int64_t sa, const void *b_, int64_t sb, void *y_,   \
                      int64_t n)                                                          \
    {                                                                                     \
        const T *a = a_, *b = b_;                                                         \
        T *y = y_;                                                                        \
        if (sa && sb) {                                                                   \
            for (int64_t i = 0; i < n; i++) { T x = a[i], z = b[i]; y[i] = (T)(EXPR); }   \
        } else if (sa) {                                                                  \
            const T z = b[0];                                                             \
            for (int64_t i = 0; i < n; i++) { T x = a[i]; y[i] = (T)(EXPR); }             \
        } else if (sb) {                                                                  \
            const T x = a[0];                                                             \
            for (int64_t i = 0; i < n; i++) { T z = b[i]; y[i] = (T)(EXPR); }             \
        } else {                                                                          \
            const T x = a[0], z = b[0];                                                   \
            const T v = (T)(EXPR);                                                        \
            for (int64_t i = 0; i < n; i++) y[i] = v;                                     \
        }                                                                                 \
        return true;                                                                      \
    }

/* Wrapping integer arithmetic through the unsigned type U. int8 / uint8
 * promote to int, which cannot overflow; the store truncates (wraps). */
#define QF_WRAP_(U, T, x, op, z) ((T)((U)(x) op (U)(z)))

QF_ROW_(add_f32, float, x + z)
QF_ROW_(add_f64, double, x + z)
QF_ROW_(add_i32, int32_t, QF_WRAP_(uint32_t, int32_t, x, +, z))
QF_ROW_(add_i64, int64_t, QF_WRAP_(uint64_t, int64_t, x, +, z))
QF_ROW_(add_i8, int8_t, x + z)
QF_ROW_(add_u8, uint8_t, x + z)
QF_ROW_(sub_f32, float, x - z)
QF_ROW_(sub_f64, double, x - z)
QF_ROW_(sub_i32, int32_t, QF_WRAP_(uint32_t, int32_t, x, -, z))
QF_ROW_(sub_i64, int64_t, QF_WRAP_(uint64_t, int64_t, x, -, z))
QF_ROW_(sub_i8, int8_t, x - z)
QF_ROW_(sub_u8, uint8_t, x - z)
QF_ROW_(mul_f32, float, x * z)
QF_ROW_(mul_f64, double, x * z)
QF_ROW_(mul_i32, int32_t, QF_WRAP_(uint32_t, int32_t, x, *, z))
QF_ROW_(mul_i64, int64_t, QF_WRAP_(uint64_t, int64_t, x, *, z))
QF_ROW_(mul_i8, int8_t, x * z)
QF_ROW_(mul_u8, uint8_t, x * z)
QF_ROW_(div_f32, float, x / z)
QF_ROW_(div_f64, double, x / z)
QF_ROW_(pow_f32, float, powf(x, z))
QF_ROW_(pow_f64, double, pow(x, z))

/* Integer division, truncating toward zero as C does. The one overflowing
 * case, MIN / -1, wraps to MIN (numpy's result) instead of trapping. */
#define QF_DIV_SIGNED_(fname, T, U)                                                       \
    static bool fname(const void *a_, int64_t sa, const void *b_, int64_t sb, void *y_,   \
                      int64_t n)                                                          \
    {                                                                                     \
        const T *a = a_, *b = b_;                                                         \
        T *y = y_;                                                                        \
        for (int64_t i = 0; i < n; i++) {                                                 \
            T x = a[i * sa], z = b[i * sb];                                               \
            if (z == 0) return false;                                                     \
            y[i] = z == -1 ? (T)(0u - (U)x) : (T)(x / z);                                 \
        }                                                                                 \
        return true;                                                                      \
    }

QF_DIV_SIGNED_(div_i32, int32_t, uint32_t)
QF_DIV_SIGNED_(div_i64, int64_t, uint64_t)
QF_DIV_SIGNED_(div_i8, int8_t, uint8_t)

static bool ew_div_u8(const void *a_, int64_t sa, const void *b_, int64_t sb, void *y_, int64_t n)
{
    const uint8_t *a = a_, *b = b_;
    uint8_t *y = y_;
    for (int64_t i = 0; i < n; i++) {
        uint8_t z = b[i * sb];
        if (z == 0) return false;
        y[i] = (uint8_t)(a[i * sa] / z);
    }
    return true;
}

/* Run a row function over y = a OP b, a and b broadcast to y's shape (y
 * may be a's memory when a has y's shape: each element is read before it is
 * written). */
static qf_status ew_binary_run_t(const qf_node *node, const qf_tensor *a, const qf_tensor *b, qf_tensor *y, row_fn fn)
{
    const char *pa = a->data, *pb = b->data;
    char *py = y->data;
    size_t ea = qf_dtype_size(a->dtype), eb = qf_dtype_size(b->dtype), ey = qf_dtype_size(y->dtype);
    int64_t na = qf_tensor_numel(a), nb = qf_tensor_numel(b), ny = qf_tensor_numel(y);
    bool ok = true;

    if (ny == 0) return QF_OK;
    /* Fast paths. An operand with as many elements as the output has the
     * output's layout (broadcasting only ever adds elements). */
    if (na == ny && nb == ny) ok = fn(pa, 1, pb, 1, py, ny);
    else if (na == ny && nb == 1) ok = fn(pa, 1, pb, 0, py, ny);
    else if (na == 1 && nb == ny) ok = fn(pa, 0, pb, 1, py, ny);
    else {
        const qf_tensor *ops[2] = {a, b};
        qf_bcast_iter it;
        qf_bcast_iter_init(&it, y->ndim, y->dims, 2, ops);
        for (int64_t r = 0; r < it.rows && ok; r++, qf_bcast_iter_next(&it))
            ok = fn(pa + (size_t)it.off[0] * ea, it.step[0], pb + (size_t)it.off[1] * eb, it.step[1],
                    py + (size_t)(r * it.len) * ey, it.len);
    }
    if (!ok)
        return qf_error(QF_ERR_NUMERIC, "node '%s' (%s): integer division by zero", node->name, qf_op_label(node));
    return QF_OK;
}

/* Run a row function over a broadcast binary op. */
static qf_status ew_binary_run(const qf_kernel_io *io, row_fn fn)
{
    return ew_binary_run_t(io->node, io->in[0], io->in[1], io->out[0], fn);
}

static qf_status ew_binary_dispatch(const qf_kernel_io *io, const row_fn fns[6])
{
    /* fns follows arith_dtypes: f32, f64, i32, i64, i8, u8. */
    for (int i = 0; i < 6; i++)
        if (io->in[0]->dtype == arith_dtypes[i] && io->in[1]->dtype == arith_dtypes[i])
            return ew_binary_run(io, fns[i]);
    return ew_unsupported_dtype(io->node, "input", io->in[0]->dtype);
}

static qf_status qf_add_forward_f32(const qf_kernel_io *io)
{
    static const row_fn fns[6] = {add_f32, add_f64, add_i32, add_i64, add_i8, add_u8};
    return ew_binary_dispatch(io, fns);
}

static qf_status qf_sub_forward_f32(const qf_kernel_io *io)
{
    static const row_fn fns[6] = {sub_f32, sub_f64, sub_i32, sub_i64, sub_i8, sub_u8};
    return ew_binary_dispatch(io, fns);
}

static qf_status qf_mul_forward_f32(const qf_kernel_io *io)
{
    static const row_fn fns[6] = {mul_f32, mul_f64, mul_i32, mul_i64, mul_i8, mul_u8};
    return ew_binary_dispatch(io, fns);
}

static qf_status qf_div_forward_f32(const qf_kernel_io *io)
{
    static const row_fn fns[6] = {div_f32, div_f64, div_i32, div_i64, div_i8, ew_div_u8};
    return ew_binary_dispatch(io, fns);
}

/* ------------------------------------------------------------------------ */
/* backward of Add, Sub, Mul, Div                                            */

/* Which partial derivative: of Y = A op B with respect to A or B. */
typedef enum ew_grad_kind {
    EW_GRAD_PASS,   /* dy: Add (both), Sub (A) */
    EW_GRAD_NEG,    /* -dy: Sub (B) */
    EW_GRAD_MUL_A,  /* dy * b */
    EW_GRAD_MUL_B,  /* dy * a */
    EW_GRAD_DIV_A,  /* dy / b */
    EW_GRAD_DIV_B,  /* -dy * (y / b), torch's -grad * ((a / b) / b) with y = a / b as the forward rounded it */
} ew_grad_kind;

/* One row of a partial derivative: v[i] from dy[i], a[i * sa], b[i * sb],
 * y[i] (sa, sb in {0, 1}); into d: d[i] = v[i] (sd 1, !acc), d[i] += v[i]
 * (sd 1, acc: several rows read the same elements of the operand) or d[0] +=
 * sum v (sd 0: the operand is broadcast along the row; summed in double). */
#define EW_GRAD_ROW_(EXPR)                                                     \
    do {                                                                       \
        if (sd && !acc) {                                                      \
            for (int64_t i = 0; i < n; i++) d[i] = (EXPR);                     \
        } else if (sd) {                                                       \
            for (int64_t i = 0; i < n; i++) d[i] += (EXPR);                    \
        } else {                                                               \
            double s_ = 0.0;                                                   \
            for (int64_t i = 0; i < n; i++) s_ += (double)(EXPR);              \
            d[0] += (float)s_;                                                 \
        }                                                                      \
    } while (0)

static void ew_grad_row(ew_grad_kind kind, const float *dy, const float *a, int64_t sa, const float *b,
                        int64_t sb, const float *y, float *d, int64_t sd, bool acc, int64_t n)
{
    switch (kind) {
    case EW_GRAD_PASS: EW_GRAD_ROW_(dy[i]); break;
    case EW_GRAD_NEG: EW_GRAD_ROW_(-dy[i]); break;
    case EW_GRAD_MUL_A: EW_GRAD_ROW_(dy[i] * b[i * sb]); break;
    case EW_GRAD_MUL_B: EW_GRAD_ROW_(dy[i] * a[i * sa]); break;
    case EW_GRAD_DIV_A: EW_GRAD_ROW_(dy[i] / b[i * sb]); break;
    case EW_GRAD_DIV_B: EW_GRAD_ROW_(-dy[i] * (y[i] / b[i * sb])); break;
    }
}

/* The no-broadcast case (the operand has Y's shape, the other Y's shape or
 * one element): one flat row, split across the threads. */
typedef struct ew_grad_job {
    ew_grad_kind kind;
    const float *dy, *a, *b, *y;
    int64_t sa, sb;
    float *d;
} ew_grad_job;

static void ew_grad_slice(void *ctx, int64_t lo, int64_t hi)
{
    const ew_grad_job *j = ctx;
    ew_grad_row(j->kind, j->dy + lo, j->a ? j->a + lo * j->sa : NULL, j->sa, j->b ? j->b + lo * j->sb : NULL, j->sb,
                j->y ? j->y + lo : NULL, j->d + lo, 1, false, hi - lo);
}

/* Rows [lo, hi) of Y through a broadcast iterator over (A, B). */
typedef struct ew_grad_rows_job {
    ew_grad_kind kind;
    const float *dy, *a, *b, *y;
    float *d;
    int t;
    bool acc;
    float *sums;      /* non-NULL: row r's sum goes to sums[r], not into d */
    qf_bcast_iter it; /* initialised, on row 0 */
} ew_grad_rows_job;

static void ew_grad_rows(void *ctx, int64_t lo, int64_t hi)
{
    const ew_grad_rows_job *j = ctx;
    qf_bcast_iter it = j->it;
    qf_bcast_iter_seek(&it, lo);
    for (int64_t r = lo; r < hi; r++, qf_bcast_iter_next(&it)) {
        const int64_t o = r * it.len;
        float *d = j->sums ? &j->sums[r] : j->d + it.off[j->t];
        if (j->sums) *d = 0.0f;
        ew_grad_row(j->kind, j->dy + o, j->a ? j->a + it.off[0] : NULL, it.step[0], j->b ? j->b + it.off[1] : NULL,
                    it.step[1], j->y ? j->y + o : NULL, d, it.step[j->t], j->acc, it.len);
    }
}

/* din[t] (operand t of 2) = the `kind` partial derivative, summed over the
 * dims where operand t is broadcast. The tensors a, b, y are the forward's
 * (their data may be NULL when the kind does not read them). */
static void ew_grad_operand(const qf_kernel_io *io, int t, ew_grad_kind kind)
{
    const qf_tensor *ta = io->in[0], *tb = io->in[1], *ty = io->out[0];
    const float *dy = io->dout[0]->data, *a = ta->data, *b = tb->data, *y = ty->data;
    qf_tensor *dt = io->din[t];
    float *d = dt->data;
    const int64_t ny = qf_tensor_numel(ty), nd = qf_tensor_numel(dt);
    const int64_t na = qf_tensor_numel(ta), nb = qf_tensor_numel(tb);
    if (ny == 0) {
        if (nd > 0) memset(d, 0, sizeof *d * (size_t)nd);
        return;
    }
    if (nd == ny && (na == ny || na == 1) && (nb == ny || nb == 1)) {
        ew_grad_job j = {kind, dy, a, b, y, na == ny, nb == ny, d};
        qf_parallel_for(ny, 32768, ew_grad_slice, &j);
        return;
    }
    /* Rows of Y; operand t's elements at off[t] + i * step[t]. Several rows
     * map onto the same elements unless t has Y's size: then accumulate.
     * Else every row writes its own elements: rows split across the
     * threads. An operand broadcast along the rows (a per-channel scale or
     * bias of [N, C, H, W]: step 0) gets its row sums in parallel into the
     * scratch, then added up serially, one per row. Any other accumulation
     * runs serially. */
    const qf_tensor *ops[2] = {ta, tb};
    ew_grad_rows_job j = {kind, dy, a, b, y, d, t, nd != ny, NULL, {0}};
    qf_bcast_iter_init(&j.it, ty->ndim, ty->dims, 2, ops);
    const int64_t grain = 1 + 32768 / j.it.len;
    if (!j.acc) {
        qf_parallel_for(j.it.rows, grain, ew_grad_rows, &j);
        return;
    }
    memset(d, 0, sizeof *d * (size_t)nd);
    if (j.it.step[t] == 0 && io->scratch && io->scratch_size >= sizeof(float) * (size_t)j.it.rows) {
        j.sums = io->scratch;
        qf_parallel_for(j.it.rows, grain, ew_grad_rows, &j);
        qf_bcast_iter it = j.it;
        for (int64_t r = 0; r < it.rows; r++, qf_bcast_iter_next(&it)) d[it.off[t]] += j.sums[r];
    } else {
        ew_grad_rows(&j, 0, j.it.rows);
    }
}

/* Scratch of the broadcast backward: a float per row of Y's broadcast
 * iterator (the row sums above); 0 while shapes are unknown. */
static size_t ew_binary_bwd_scratch(const qf_node *n, const void *state)
{
    (void)state;
    if (n->ninputs < 2 || !n->inputs[0] || !n->inputs[1]) return 0;
    const qf_tensor *ty = &n->outputs[0]->type;
    const qf_tensor *ops[2] = {&n->inputs[0]->type, &n->inputs[1]->type};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < ops[k]->ndim; i++)
            if (ops[k]->dims[i] < 0) return 0;
    for (int i = 0; i < ty->ndim; i++)
        if (ty->dims[i] < 0) return 0;
    qf_bcast_iter it;
    qf_bcast_iter_init(&it, ty->ndim, ty->dims, 2, ops);
    return sizeof(float) * (size_t)it.rows;
}

/* Common frame: float32 only; no upstream gradient gives zeros. */
static qf_status ew_binary_backward(const qf_kernel_io *io, ew_grad_kind ka, ew_grad_kind kb)
{
    if (io->out[0]->dtype != QF_DTYPE_F32)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): backward of dtype %s is not supported (float32)",
                        io->node->name, qf_op_label(io->node), qf_dtype_name(io->out[0]->dtype));
    for (int t = 0; t < 2; t++) {
        if (!io->din[t]) continue;
        if (!io->dout[0]) memset(io->din[t]->data, 0, qf_tensor_nbytes(io->din[t]));
        else ew_grad_operand(io, t, t == 0 ? ka : kb);
    }
    return QF_OK;
}

/* Y = A + B: dA, dB = dY summed to each operand's shape. Reads no data. */
static qf_status qf_add_backward_f32(const qf_kernel_io *io)
{
    return ew_binary_backward(io, EW_GRAD_PASS, EW_GRAD_PASS);
}

/* Y = A - B: dA = dY, dB = -dY (summed). Reads no data. */
static qf_status qf_sub_backward_f32(const qf_kernel_io *io)
{
    return ew_binary_backward(io, EW_GRAD_PASS, EW_GRAD_NEG);
}

/* Y = A * B: dA = dY * B, dB = dY * A (summed). Reads A and B. */
static qf_status qf_mul_backward_f32(const qf_kernel_io *io)
{
    return ew_binary_backward(io, EW_GRAD_MUL_A, EW_GRAD_MUL_B);
}

/* Y = A / B: dA = dY / B, dB = -dY * Y / B (summed). Reads B and Y (not A:
 * the forward may have written Y over it). */
static qf_status qf_div_backward_f32(const qf_kernel_io *io)
{
    return ew_binary_backward(io, EW_GRAD_DIV_A, EW_GRAD_DIV_B);
}

/* ------------------------------------------------------------------------ */
/* Max, Min: any number of inputs, broadcast together (opset 8+)             */

/* The output: the inputs' common dtype, their broadcast shape. */
static qf_status ew_extreme_infer(qf_node *n)
{
    if (n->ninputs < 1)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): expects at least one input", n->name, qf_op_label(n));
    for (int i = 0; i < n->ninputs; i++)
        if (!n->inputs[i])
            return qf_error(QF_ERR_INVALID, "node '%s' (%s): input %d is missing", n->name, qf_op_label(n), i);
    const qf_tensor *a = &n->inputs[0]->type;
    if (!ew_dtype_in(a->dtype, arith_dtypes, 6)) return ew_unsupported_dtype(n, "input", a->dtype);
    int ny = a->ndim;
    int64_t y[QF_MAX_DIMS];
    memcpy(y, a->dims, sizeof(int64_t) * (size_t)a->ndim);
    for (int i = 1; i < n->ninputs; i++) {
        const qf_tensor *b = &n->inputs[i]->type;
        if (b->dtype != a->dtype)
            return qf_error(QF_ERR_INVALID, "node '%s' (%s): input dtypes differ (%s and %s)", n->name,
                            qf_op_label(n), qf_dtype_name(a->dtype), qf_dtype_name(b->dtype));
        int64_t prev[QF_MAX_DIMS];
        const int nprev = ny;
        memcpy(prev, y, sizeof(int64_t) * (size_t)ny);
        QF_TRY(qf_broadcast_infer(n, nprev, prev, b->ndim, b->dims, &ny, y));
    }
    qf_set_output(n, 0, a->dtype, ny, y);
    return QF_OK;
}

static qf_status qf_max_infer(qf_graph *g, qf_node *n) { (void)g; return ew_extreme_infer(n); }
static qf_status qf_min_infer(qf_graph *g, qf_node *n) { (void)g; return ew_extreme_infer(n); }

/* A NaN operand gives NaN (numpy's maximum / minimum, torch.maximum): x is
 * kept when it is NaN, z wins every comparison it is NaN in. */
QF_ROW_(max_f32, float, x > z || x != x ? x : z)
QF_ROW_(max_f64, double, x > z || x != x ? x : z)
QF_ROW_(max_i32, int32_t, x > z ? x : z)
QF_ROW_(max_i64, int64_t, x > z ? x : z)
QF_ROW_(max_i8, int8_t, x > z ? x : z)
QF_ROW_(max_u8, uint8_t, x > z ? x : z)
QF_ROW_(min_f32, float, x < z || x != x ? x : z)
QF_ROW_(min_f64, double, x < z || x != x ? x : z)
QF_ROW_(min_i32, int32_t, x < z ? x : z)
QF_ROW_(min_i64, int64_t, x < z ? x : z)
QF_ROW_(min_i8, int8_t, x < z ? x : z)
QF_ROW_(min_u8, uint8_t, x < z ? x : z)

/* y = op(op(op(x0, x1), x2), ...): the first pair into y, then y with each
 * further input (y has the broadcast shape of all of them, so every input
 * broadcasts to it). One input: a copy. On int8 data this is the integer
 * executor's Max / Min (shared qparams: exact). */
static qf_status ew_extreme_forward(const qf_kernel_io *io, const row_fn fns[6])
{
    const qf_node *n = io->node;
    qf_tensor *y = io->out[0];
    int k = 0;
    while (k < 6 && arith_dtypes[k] != y->dtype) k++;
    if (k == 6) return ew_unsupported_dtype(n, "input", y->dtype);
    if (n->ninputs == 1) {
        memcpy(y->data, io->in[0]->data, qf_tensor_nbytes(y));
        return QF_OK;
    }
    QF_TRY(ew_binary_run_t(n, io->in[0], io->in[1], y, fns[k]));
    for (int i = 2; i < n->ninputs; i++) QF_TRY(ew_binary_run_t(n, y, io->in[i], y, fns[k]));
    return QF_OK;
}

static qf_status qf_max_forward_f32(const qf_kernel_io *io)
{
    static const row_fn fns[6] = {max_f32, max_f64, max_i32, max_i64, max_i8, max_u8};
    return ew_extreme_forward(io, fns);
}

static qf_status qf_min_forward_f32(const qf_kernel_io *io)
{
    static const row_fn fns[6] = {min_f32, min_f64, min_i32, min_i64, min_i8, min_u8};
    return ew_extreme_forward(io, fns);
}

/* x (float32, broadcast to y's shape) into dst, C-contiguous. */
static void ew_expand_f32(const qf_tensor *y, const qf_tensor *x, float *dst)
{
    const float *p = x->data;
    const qf_tensor *ops[1] = {x};
    qf_bcast_iter it;
    qf_bcast_iter_init(&it, y->ndim, y->dims, 1, ops);
    for (int64_t r = 0; r < it.rows; r++, qf_bcast_iter_next(&it))
        for (int64_t i = 0; i < it.len; i++) dst[r * it.len + i] = p[it.off[0] + i * it.step[0]];
}

/* Scratch of the backward: the running results m_0 .. m_{N-2} of the
 * forward's fold, the gradient reaching the running result, one input
 * expanded and its gradient before the sum over broadcast dims: N + 2
 * tensors of Y's size. 0 while shapes are unknown. */
static size_t ew_extreme_bwd_scratch(const qf_node *n, const void *state)
{
    (void)state;
    const qf_tensor *ty = &n->outputs[0]->type;
    for (int i = 0; i < ty->ndim; i++)
        if (ty->dims[i] < 0) return 0;
    return sizeof(float) * (size_t)(n->ninputs + 2) * (size_t)qf_shape_numel(ty->ndim, ty->dims);
}

/* The backward of the fold y = op(...op(op(x0, x1), x2)..., x_{N-1}) pair
 * by pair, from the last, as PyTorch 1.13 differentiates torch.maximum(a,
 * b) (torch.minimum: the comparisons swapped): a gets g where a > b, b where
 * b > a, each g / 2 where a == b; where a or b is NaN neither comparison
 * holds and both get g. So a chain of maximum() calls (what PyTorch writes
 * as this Max) gets the same gradients. Each input's gradient is summed
 * over the dims it is broadcast along. */
static qf_status ew_extreme_backward(const qf_kernel_io *io, bool is_max)
{
    const qf_node *n = io->node;
    const qf_tensor *ty = io->out[0];
    if (ty->dtype != QF_DTYPE_F32)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): backward of dtype %s is not supported (float32)",
                        n->name, qf_op_label(n), qf_dtype_name(ty->dtype));
    const int nin = n->ninputs;
    const int64_t ny = qf_tensor_numel(ty);
    bool want = false;
    for (int i = 0; i < nin; i++) want |= io->din[i] != NULL;
    if (!want) return QF_OK;
    if (!io->dout[0] || ny == 0) {
        for (int i = 0; i < nin; i++)
            if (io->din[i]) memset(io->din[i]->data, 0, qf_tensor_nbytes(io->din[i]));
        return QF_OK;
    }
    if (!io->scratch || io->scratch_size < sizeof(float) * (size_t)(nin + 2) * (size_t)ny)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): backward scratch too small", n->name, qf_op_label(n));
    float *m = io->scratch;                       /* m_k at m + k * ny, k < N - 1 */
    float *c = m + (size_t)(nin > 1 ? nin - 1 : 0) * (size_t)ny; /* gradient reaching m_k */
    float *xk = c + ny, *gk = xk + ny;
    const float *dy = io->dout[0]->data;
    if (nin == 1) {
        qf_bcast_reduce_f32(ty->ndim, ty->dims, dy, 1.0f, io->din[0]);
        return QF_OK;
    }
    ew_expand_f32(ty, io->in[0], m);
    for (int k = 1; k < nin - 1; k++) {
        float *mk = m + (size_t)k * (size_t)ny;
        const float *prev = mk - ny;
        ew_expand_f32(ty, io->in[k], mk);
        for (int64_t e = 0; e < ny; e++) {
            const float a = prev[e], b = mk[e];
            mk[e] = is_max ? (a > b || a != a ? a : b) : (a < b || a != a ? a : b);
        }
    }
    memcpy(c, dy, sizeof(float) * (size_t)ny);
    for (int k = nin - 1; k >= 1; k--) {
        const float *a = m + (size_t)(k - 1) * (size_t)ny;
        ew_expand_f32(ty, io->in[k], xk);
        for (int64_t e = 0; e < ny; e++) {
            const float av = a[e], bv = xk[e], g = c[e];
            /* a loses where b is strictly better, b where a is */
            const bool a_loses = is_max ? av < bv : av > bv, b_loses = is_max ? av > bv : av < bv;
            const float share = av == bv ? g * 0.5f : g;
            gk[e] = b_loses ? 0.0f : share;
            c[e] = a_loses ? 0.0f : share;
        }
        if (io->din[k]) qf_bcast_reduce_f32(ty->ndim, ty->dims, gk, 1.0f, io->din[k]);
    }
    if (io->din[0]) qf_bcast_reduce_f32(ty->ndim, ty->dims, c, 1.0f, io->din[0]);
    return QF_OK;
}

static qf_status qf_max_backward_f32(const qf_kernel_io *io) { return ew_extreme_backward(io, true); }
static qf_status qf_min_backward_f32(const qf_kernel_io *io) { return ew_extreme_backward(io, false); }

/* ------------------------------------------------------------------------ */
/* Pow with mixed dtypes                                                     */

static double ew_load_f64(const void *p, qf_dtype dt, int64_t i)
{
    switch (dt) {
    case QF_DTYPE_F32: return ((const float *)p)[i];
    case QF_DTYPE_F64: return ((const double *)p)[i];
    case QF_DTYPE_I32: return ((const int32_t *)p)[i];
    case QF_DTYPE_I64: return (double)((const int64_t *)p)[i];
    case QF_DTYPE_I8: return ((const int8_t *)p)[i];
    case QF_DTYPE_U8: return ((const uint8_t *)p)[i];
    default: return 0.0;
    }
}

static int64_t ew_load_i64(const void *p, qf_dtype dt, int64_t i)
{
    switch (dt) {
    case QF_DTYPE_I32: return ((const int32_t *)p)[i];
    case QF_DTYPE_I64: return ((const int64_t *)p)[i];
    case QF_DTYPE_I8: return ((const int8_t *)p)[i];
    case QF_DTYPE_U8: return ((const uint8_t *)p)[i];
    default: return 0;
    }
}

static bool ew_is_int(qf_dtype dt) { return dt == QF_DTYPE_I32 || dt == QF_DTYPE_I64 || dt == QF_DTYPE_I8 || dt == QF_DTYPE_U8; }

/* Integer power by squaring, wrapping in uint64. A negative exponent gives
 * the truncated real result: 1 for base 1, +-1 for base -1, else 0. */
static int64_t ew_ipow(int64_t base, int64_t e)
{
    if (e < 0) return base == 1 ? 1 : base == -1 ? ((e & 1) ? -1 : 1) : 0;
    uint64_t r = 1, b = (uint64_t)base;
    while (e) {
        if (e & 1) r *= b;
        b *= b;
        e >>= 1;
    }
    return (int64_t)r;
}

/* A double to the integer type's range (truncating; NaN -> 0). */
static int64_t ew_sat_i64(double v, double lo, double hi)
{
    if (v != v) return 0;
    if (v <= lo) return (int64_t)lo;
    if (v >= hi) return (int64_t)hi;
    return (int64_t)v;
}

static void ew_pow_elem(const qf_tensor *a, int64_t ia, const qf_tensor *b, int64_t ib, qf_tensor *y, int64_t iy)
{
    if (ew_is_int(a->dtype) && ew_is_int(b->dtype)) {
        int64_t r = ew_ipow(ew_load_i64(a->data, a->dtype, ia), ew_load_i64(b->data, b->dtype, ib));
        if (y->dtype == QF_DTYPE_I32) ((int32_t *)y->data)[iy] = (int32_t)(uint32_t)(uint64_t)r;
        else ((int64_t *)y->data)[iy] = r;
        return;
    }
    double r = pow(ew_load_f64(a->data, a->dtype, ia), ew_load_f64(b->data, b->dtype, ib));
    switch (y->dtype) {
    case QF_DTYPE_F32: ((float *)y->data)[iy] = (float)r; break;
    case QF_DTYPE_F64: ((double *)y->data)[iy] = r; break;
    case QF_DTYPE_I32: ((int32_t *)y->data)[iy] = (int32_t)ew_sat_i64(r, -2147483648.0, 2147483647.0); break;
    case QF_DTYPE_I64: ((int64_t *)y->data)[iy] = ew_sat_i64(r, -9223372036854775808.0, 9223372036854774784.0); break;
    default: break;
    }
}

static qf_status qf_pow_forward_f32(const qf_kernel_io *io)
{
    const qf_tensor *a = io->in[0], *b = io->in[1];
    qf_tensor *y = io->out[0];
    if (a->dtype == QF_DTYPE_F32 && b->dtype == QF_DTYPE_F32) return ew_binary_run(io, pow_f32);
    if (a->dtype == QF_DTYPE_F64 && b->dtype == QF_DTYPE_F64) return ew_binary_run(io, pow_f64);
    if (!ew_dtype_in(a->dtype, pow_base_dtypes, 4)) return ew_unsupported_dtype(io->node, "base", a->dtype);
    if (!ew_dtype_in(b->dtype, arith_dtypes, 6)) return ew_unsupported_dtype(io->node, "exponent", b->dtype);
    if (qf_tensor_numel(y) == 0) return QF_OK;
    /* Mixed dtypes are rare (exponents): one element at a time. */
    const qf_tensor *ops[2] = {a, b};
    qf_bcast_iter it;
    qf_bcast_iter_init(&it, y->ndim, y->dims, 2, ops);
    for (int64_t r = 0; r < it.rows; r++, qf_bcast_iter_next(&it))
        for (int64_t i = 0; i < it.len; i++)
            ew_pow_elem(a, it.off[0] + i * it.step[0], b, it.off[1] + i * it.step[1], y, r * it.len + i);
    return QF_OK;
}

/* ------------------------------------------------------------------------ */
/* unary                                                                     */

/* y[i] = EXPR over x's elements p[i], element type T (x, n, io in scope). */
#define QF_UNARY_(T, EXPR)                                      \
    do {                                                        \
        const T *p = x->data;                                   \
        T *y = io->out[0]->data;                                \
        for (int64_t i = 0; i < n; i++) y[i] = (T)(EXPR);       \
    } while (0)

static qf_status qf_sqrt_forward_f32(const qf_kernel_io *io)
{
    const qf_tensor *x = io->in[0];
    int64_t n = qf_tensor_numel(x);
    switch (x->dtype) {
    case QF_DTYPE_F32: QF_UNARY_(float, sqrtf(p[i])); break;
    case QF_DTYPE_F64: QF_UNARY_(double, sqrt(p[i])); break;
    default: return ew_unsupported_dtype(io->node, "input", x->dtype);
    }
    return QF_OK;
}

static qf_status qf_reciprocal_forward_f32(const qf_kernel_io *io)
{
    const qf_tensor *x = io->in[0];
    int64_t n = qf_tensor_numel(x);
    switch (x->dtype) {
    case QF_DTYPE_F32: QF_UNARY_(float, 1.0f / p[i]); break;
    case QF_DTYPE_F64: QF_UNARY_(double, 1.0 / p[i]); break;
    default: return ew_unsupported_dtype(io->node, "input", x->dtype);
    }
    return QF_OK;
}

static qf_status qf_neg_forward_f32(const qf_kernel_io *io)
{
    const qf_tensor *x = io->in[0];
    int64_t n = qf_tensor_numel(x);
    switch (x->dtype) {
    case QF_DTYPE_F32: QF_UNARY_(float, -p[i]); break;
    case QF_DTYPE_F64: QF_UNARY_(double, -p[i]); break;
    /* Negating MIN wraps to MIN (two's complement), as numpy does. */
    case QF_DTYPE_I32: QF_UNARY_(int32_t, 0u - (uint32_t)p[i]); break;
    case QF_DTYPE_I64: QF_UNARY_(int64_t, (uint64_t)0 - (uint64_t)p[i]); break;
    case QF_DTYPE_I8: QF_UNARY_(int8_t, -p[i]); break;
    default: return ew_unsupported_dtype(io->node, "input", x->dtype);
    }
    return QF_OK;
}

/* |x|; |MIN| of a signed integer wraps to MIN (two's complement), as numpy
 * does; uint8 is its own absolute value. On int8 data with its input's
 * qparams this is not the int8 Abs (that is |q - zp| + zp): the
 * quantization row keeps Abs as DQ -> Abs -> Q. */
static const qf_dtype abs_dtypes[] = {QF_DTYPE_F32, QF_DTYPE_F64, QF_DTYPE_I32,
                                      QF_DTYPE_I64, QF_DTYPE_I8,  QF_DTYPE_U8};

static qf_status qf_abs_infer(qf_graph *g, qf_node *n) { (void)g; return ew_unary_infer(n, abs_dtypes, 6); }

static qf_status qf_abs_forward_f32(const qf_kernel_io *io)
{
    const qf_tensor *x = io->in[0];
    int64_t n = qf_tensor_numel(x);
    switch (x->dtype) {
    case QF_DTYPE_F32: QF_UNARY_(float, fabsf(p[i])); break;
    case QF_DTYPE_F64: QF_UNARY_(double, fabs(p[i])); break;
    case QF_DTYPE_I32: QF_UNARY_(int32_t, p[i] < 0 ? 0u - (uint32_t)p[i] : (uint32_t)p[i]); break;
    case QF_DTYPE_I64: QF_UNARY_(int64_t, p[i] < 0 ? (uint64_t)0 - (uint64_t)p[i] : (uint64_t)p[i]); break;
    case QF_DTYPE_I8: QF_UNARY_(int8_t, p[i] < 0 ? -p[i] : p[i]); break;
    case QF_DTYPE_U8: QF_UNARY_(uint8_t, p[i]); break;
    default: return ew_unsupported_dtype(io->node, "input", x->dtype);
    }
    return QF_OK;
}

/* dx = dy * sgn(x), 0 at x = 0 (torch's abs_backward: grad * self.sgn()).
 * Reads X (bwd_in bit 0). */
static qf_status qf_abs_backward_f32(const qf_kernel_io *io)
{
    if (!io->din[0]) return QF_OK;
    if (io->in[0]->dtype != QF_DTYPE_F32)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): backward of dtype %s is not supported (float32)",
                        io->node->name, qf_op_label(io->node), qf_dtype_name(io->in[0]->dtype));
    const int64_t n = qf_tensor_numel(io->din[0]);
    float *dx = io->din[0]->data;
    if (!io->dout[0]) {
        memset(dx, 0, sizeof(float) * (size_t)n);
        return QF_OK;
    }
    const float *x = io->in[0]->data, *dy = io->dout[0]->data;
    for (int64_t i = 0; i < n; i++) dx[i] = x[i] > 0.0f ? dy[i] : x[i] < 0.0f ? -dy[i] : 0.0f;
    return QF_OK;
}

/* ------------------------------------------------------------------------ */
/* Mod                                                                       */

/* Mod (opset 10+). fmod = 0 (integers only): the remainder takes the
 * divisor's sign, as Python's % and torch.remainder; fmod = 1: C's fmod /
 * truncated %, the dividend's sign. A zero integer divisor is
 * QF_ERR_NUMERIC. x % -1 is 0 (computed without the MIN % -1 trap). */
static qf_status qf_mod_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    QF_TRY(ew_binary_infer(n));
    int64_t fmod_attr = qf_node_attr_int(n, "fmod", 0);
    if (fmod_attr != 0 && fmod_attr != 1)
        return qf_error(QF_ERR_INVALID, "node '%s' (Mod): fmod must be 0 or 1, got %lld", n->name,
                        (long long)fmod_attr);
    qf_dtype dt = n->inputs[0]->type.dtype;
    if (fmod_attr == 0 && (dt == QF_DTYPE_F32 || dt == QF_DTYPE_F64))
        return qf_error(QF_ERR_INVALID, "node '%s' (Mod): floating-point inputs need fmod=1", n->name);
    return QF_OK;
}

#define QF_MOD_ROW_(fname, T, EXPR)                                                       \
    static bool fname(const void *a_, int64_t sa, const void *b_, int64_t sb, void *y_,   \
                      int64_t n)                                                          \
    {                                                                                     \
        const T *a = a_, *b = b_;                                                         \
        T *y = y_;                                                                        \
        for (int64_t i = 0; i < n; i++) {                                                 \
            T x = a[i * sa], z = b[i * sb];                                               \
            if (z == 0) return false;                                                     \
            y[i] = (T)(EXPR);                                                             \
        }                                                                                 \
        return true;                                                                      \
    }

/* Truncated remainder, then moved into the divisor's sign when they differ. */
#define QF_PYMOD_(T, x, z) ((z) == -1 ? (T)0 : ((x) % (z) != 0 && (((x) % (z) < 0) != ((z) < 0))) ? (T)((x) % (z) + (z)) : (T)((x) % (z)))

QF_MOD_ROW_(mod_i32, int32_t, QF_PYMOD_(int32_t, x, z))
QF_MOD_ROW_(mod_i64, int64_t, QF_PYMOD_(int64_t, x, z))
QF_MOD_ROW_(mod_i8, int8_t, QF_PYMOD_(int8_t, x, z))
QF_MOD_ROW_(mod_u8, uint8_t, x % z)
QF_MOD_ROW_(fmod_i32, int32_t, z == -1 ? 0 : x % z)
QF_MOD_ROW_(fmod_i64, int64_t, z == -1 ? 0 : x % z)
QF_MOD_ROW_(fmod_i8, int8_t, z == -1 ? 0 : x % z)

/* Float fmod: a zero divisor gives NaN (IEEE), not an error. */
QF_ROW_(fmod_f32, float, fmodf(x, z))
QF_ROW_(fmod_f64, double, fmod(x, z))

static qf_status qf_mod_forward_f32(const qf_kernel_io *io)
{
    /* floats with fmod=0 are refused by inference; the float entries only keep
     * the table total */
    static const row_fn py[6] = {fmod_f32, fmod_f64, mod_i32, mod_i64, mod_i8, mod_u8};
    static const row_fn c[6] = {fmod_f32, fmod_f64, fmod_i32, fmod_i64, fmod_i8, mod_u8};
    return ew_binary_dispatch(io, qf_node_attr_int(io->node, "fmod", 0) ? c : py);
}

/* ------------------------------------------------------------------------ */
/* Equal, Not                                                                */

static const qf_dtype cmp_dtypes[] = {QF_DTYPE_F32, QF_DTYPE_F64, QF_DTYPE_I32, QF_DTYPE_I64,
                                      QF_DTYPE_I8,  QF_DTYPE_U8,  QF_DTYPE_BOOL};

/* Equal (opset 11+): any dtype on both sides (the same one), a bool output
 * of the broadcast shape. */
static qf_status qf_equal_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    QF_TRY(qf_op_check_inputs(n, 2));
    const qf_tensor *a = &n->inputs[0]->type, *b = &n->inputs[1]->type;
    if (a->dtype != b->dtype)
        return qf_error(QF_ERR_INVALID, "node '%s' (Equal): input dtypes differ (%s and %s)", n->name,
                        qf_dtype_name(a->dtype), qf_dtype_name(b->dtype));
    if (!ew_dtype_in(a->dtype, cmp_dtypes, 7)) return ew_unsupported_dtype(n, "input", a->dtype);
    int ny;
    int64_t y[QF_MAX_DIMS];
    QF_TRY(qf_broadcast_infer(n, a->ndim, a->dims, b->ndim, b->dims, &ny, y));
    qf_set_output(n, 0, QF_DTYPE_BOOL, ny, y);
    return QF_OK;
}

/* y (bool, one byte) = a[i * sa] == b[i * sb]. */
#define QF_EQ_ROW_(fname, T)                                                              \
    static bool fname(const void *a_, int64_t sa, const void *b_, int64_t sb, void *y_,   \
                      int64_t n)                                                          \
    {                                                                                     \
        const T *a = a_, *b = b_;                                                         \
        uint8_t *y = y_;                                                                  \
        for (int64_t i = 0; i < n; i++) y[i] = a[i * sa] == b[i * sb];                    \
        return true;                                                                      \
    }

QF_EQ_ROW_(eq_f32, float)
QF_EQ_ROW_(eq_f64, double)
QF_EQ_ROW_(eq_i32, int32_t)
QF_EQ_ROW_(eq_i64, int64_t)
QF_EQ_ROW_(eq_i8, int8_t)
QF_EQ_ROW_(eq_u8, uint8_t)

static qf_status qf_equal_forward_f32(const qf_kernel_io *io)
{
    /* follows cmp_dtypes; bool is stored as one byte 0 / 1, compared as u8 */
    static const row_fn fns[7] = {eq_f32, eq_f64, eq_i32, eq_i64, eq_i8, eq_u8, eq_u8};
    for (int i = 0; i < 7; i++)
        if (io->in[0]->dtype == cmp_dtypes[i] && io->in[1]->dtype == cmp_dtypes[i])
            return ew_binary_run(io, fns[i]);
    return ew_unsupported_dtype(io->node, "input", io->in[0]->dtype);
}

static const qf_dtype bool_dtypes[] = {QF_DTYPE_BOOL};

static qf_status qf_not_infer(qf_graph *g, qf_node *n) { (void)g; return ew_unary_infer(n, bool_dtypes, 1); }

static qf_status qf_not_forward_f32(const qf_kernel_io *io)
{
    const uint8_t *p = io->in[0]->data;
    uint8_t *y = io->out[0]->data;
    int64_t n = qf_tensor_numel(io->in[0]);
    for (int64_t i = 0; i < n; i++) y[i] = !p[i];
    return QF_OK;
}

/* --- op table columns (src/ops/op_table.h) --- */

const qf_op_kernels qf_add_kernels = {
    .infer = qf_add_infer,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
    .inplace = true,
    .forward_f32 = qf_add_forward_f32,
    .backward_f32 = qf_add_backward_f32,
    .bwd_scratch = ew_binary_bwd_scratch,
};

const qf_op_kernels qf_sub_kernels = {
    .infer = qf_sub_infer,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
    .inplace = true,
    .forward_f32 = qf_sub_forward_f32,
    .backward_f32 = qf_sub_backward_f32,
    .bwd_scratch = ew_binary_bwd_scratch,
};

const qf_op_kernels qf_mul_kernels = {
    .infer = qf_mul_infer,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
    .inplace = true,
    .forward_f32 = qf_mul_forward_f32,
    .backward_f32 = qf_mul_backward_f32,
    .bwd_scratch = ew_binary_bwd_scratch,
    .bwd_in = (1u << 0) | (1u << 1),
};

const qf_op_kernels qf_div_kernels = {
    .infer = qf_div_infer,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
    .inplace = true,
    .forward_f32 = qf_div_forward_f32,
    .backward_f32 = qf_div_backward_f32,
    .bwd_scratch = ew_binary_bwd_scratch,
    .bwd_in = 1u << 1,
    .bwd_out = 1u << 0,
};

const qf_op_kernels qf_max_kernels = {
    .infer = qf_max_infer,
    .forward_f32 = qf_max_forward_f32,
    .backward_f32 = qf_max_backward_f32,
    .bwd_scratch = ew_extreme_bwd_scratch,
    .bwd_in = 0xffffffffu, /* every input */
};

const qf_op_kernels qf_min_kernels = {
    .infer = qf_min_infer,
    .forward_f32 = qf_min_forward_f32,
    .backward_f32 = qf_min_backward_f32,
    .bwd_scratch = ew_extreme_bwd_scratch,
    .bwd_in = 0xffffffffu, /* every input */
};

const qf_op_kernels qf_pow_kernels = {
    .infer = qf_pow_infer,
    .forward_f32 = qf_pow_forward_f32,
};

const qf_op_kernels qf_sqrt_kernels = {
    .infer = qf_sqrt_infer,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
    .forward_f32 = qf_sqrt_forward_f32,
};

const qf_op_kernels qf_reciprocal_kernels = {
    .infer = qf_reciprocal_infer,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
    .forward_f32 = qf_reciprocal_forward_f32,
};

const qf_op_kernels qf_neg_kernels = {
    .infer = qf_neg_infer,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
    .forward_f32 = qf_neg_forward_f32,
};

const qf_op_kernels qf_abs_kernels = {
    .infer = qf_abs_infer,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
    .forward_f32 = qf_abs_forward_f32,
    .backward_f32 = qf_abs_backward_f32,
    .bwd_in = 1u << 0,
};

const qf_op_kernels qf_mod_kernels = {
    .infer = qf_mod_infer,
    .forward_f32 = qf_mod_forward_f32,
};

const qf_op_kernels qf_equal_kernels = {
    .infer = qf_equal_infer,
    .forward_f32 = qf_equal_forward_f32,
};

const qf_op_kernels qf_not_kernels = {
    .infer = qf_not_infer,
    .forward_f32 = qf_not_forward_f32,
};
