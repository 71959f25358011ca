/* qfold's int8 Add and Mul (internal ops QF_OP_QADD, QF_OP_QMUL, never
 * exported): the integer executor's lowering (src/quant/lower.c) makes one of
 * every DQ -> Add / Mul -> [Relu / Clip] -> Q group of per-tensor int8
 * tensors whose shapes broadcast (numpy's rules: an SE block's [N, C, 1, 1]
 * scale of an [N, C, H, W] tensor), so that it is computed as TFLite's
 * reference int8 Add / Mul computes it (BroadcastAdd / BroadcastMul: the same
 * arithmetic per element):
 *
 *   inputs  A, A_scale, A_zp, B, B_scale, B_zp, Y_scale, Y_zp  (QLinearAdd's order)
 *   attr    qfold_clamp = [lo, hi]: a fused activation's range in Y's integers
 *
 *   Add:  m = 2 * max(s_a, s_b);  left_shift = 20
 *         a' = MBQM((A - zp_a) << 20, s_a / m),  b' = MBQM((B - zp_b) << 20, s_b / m)
 *         Y  = clamp(MBQM(a' + b', m / (2^20 * s_y)) + zp_y, lo, hi)
 *   Mul:  Y  = clamp(MBQM((A - zp_a) * (B - zp_b), s_a * s_b / s_y) + zp_y, lo, hi)
 *         (one requantization of the int32 product)
 *
 * with MBQM TFLite's MultiplyByQuantizedMultiplier (requant.h, multipliers
 * from QuantizeMultiplier in double). Add's multipliers must be below 1
 * (TFLite checks the same): an output scale below max(s_a, s_b) / 2^19 is
 * refused (the lowering leaves such an Add in float); Mul's may be above 1
 * as long as the product's left shift fits (qf_int8_requant_prepare_fixed).
 * The scales and zero points must be constants; prepare tabulates the result
 * of every pair of int8 inputs (64 KiB of state), the kernel looks it up.
 */
#include <string.h>

#include "core/parallel.h"
#include "ops/math/broadcast.h"
#include "ops/int8/int8.h"
#include "ops/kernels.h"
#include "ops/math/requant.h"

/* Every (A, B) pair of int8 values has its result computed once, at
 * prepare: the kernel is one table lookup per element (the fixed-point
 * arithmetic, three 64-bit multiplications per element, does not vectorize
 * and took a quarter of resnet18's integer run). */
typedef struct qadd_state {
    int8_t table[256 * 256]; /* [(uint8_t)a << 8 | (uint8_t)b] */
} qadd_state;

static const char *const qadd_names[8] = {"A", "A_scale", "A_zero_point", "B", "B_scale", "B_zero_point",
                                          "Y_scale", "Y_zero_point"};

static qf_status qadd_check(const qf_node *n, const qf_tensor *const *in, int *ny, int64_t y[QF_MAX_DIMS])
{
    char s1[128], s2[128];
    for (int i = 0; i < 8; i++) {
        const qf_tensor *t = in[i];
        bool scale = i == 1 || i == 4 || i == 6, data = i == 0 || i == 3;
        qf_dtype want = scale ? QF_DTYPE_F32 : QF_DTYPE_I8;
        if (t->dtype != want)
            return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): %s has dtype %s, expected %s", n->name,
                            qf_op_label(n), qadd_names[i], qf_dtype_name(t->dtype), qf_dtype_name(want));
        if (!data && qf_shape_numel(t->ndim, t->dims) != 1)
            return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): %s has shape %s; only one value is supported",
                            n->name, qf_op_label(n), qadd_names[i], qf_shape_str(t->ndim, t->dims, s1, sizeof s1));
    }
    const qf_tensor *a = in[0], *b = in[3];
    if (!qf_broadcast_shape(a->ndim, a->dims, b->ndim, b->dims, ny, y))
        return qf_error(QF_ERR_SHAPE, "node '%s' (%s): A %s and B %s do not broadcast", n->name,
                        qf_op_label(n), qf_shape_str(a->ndim, a->dims, s1, sizeof s1),
                        qf_shape_str(b->ndim, b->dims, s2, sizeof s2));
    return QF_OK;
}

static qf_status qf_qadd_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    QF_TRY(qf_op_check_inputs(n, 8));
    const qf_tensor *in[8];
    for (int i = 0; i < 8; i++) in[i] = &n->inputs[i]->type;
    int ny;
    int64_t y[QF_MAX_DIMS];
    QF_TRY(qadd_check(n, in, &ny, y));
    qf_set_output(n, 0, QF_DTYPE_I8, ny, y);
    return QF_OK;
}

/* TFLite's QuantizeMultiplierSmallerThanOneExp: m in (0, 1). */
static qf_status qadd_multiplier(const qf_node *n, double m, const char *what, int32_t *qm, int *shift)
{
    if (!(m > 0.0 && m < 1.0))
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): the %s multiplier %g is not in (0, 1) (scales too "
                        "far apart for TFLite's int8 Add)", n->name, qf_op_label(n), what, m);
    qf_quantize_multiplier(m, qm, shift);
    return QF_OK;
}

qf_status qf_int8_add_prepare(const qf_node *n, float sa, int32_t zp_a, float sb, int32_t zp_b, float sy,
                              int32_t zp_y, int32_t lo, int32_t hi, qf_int8_binary *p)
{
    *p = (qf_int8_binary){.mul = false, .zp_a = zp_a, .zp_b = zp_b, .zp_y = zp_y, .lo = lo, .hi = hi};
    const double twice_max = 2.0 * (sa > sb ? (double)sa : (double)sb);
    int shift_a, shift_b, shift_y;
    QF_TRY(qadd_multiplier(n, sa / twice_max, "A", &p->mult_a, &shift_a));
    QF_TRY(qadd_multiplier(n, sb / twice_max, "B", &p->mult_b, &shift_b));
    QF_TRY(qadd_multiplier(n, twice_max / ((double)(1 << 20) * sy), "output", &p->mult_y, &shift_y));
    p->shift_a = shift_a;
    p->shift_b = shift_b;
    p->shift_y = shift_y;
    return QF_OK;
}

qf_status qf_int8_mul_prepare(const qf_node *n, float sa, int32_t zp_a, float sb, int32_t zp_b, float sy,
                              int32_t zp_y, int32_t lo, int32_t hi, qf_int8_binary *p)
{
    *p = (qf_int8_binary){.mul = true, .zp_a = zp_a, .zp_b = zp_b, .zp_y = zp_y, .lo = lo, .hi = hi};
    const double real = (double)sa * (double)sb / (double)sy;
    /* |(a - zp_a) * (b - zp_b)| <= 255 * 255 */
    return qf_int8_requant_prepare_fixed(n, &real, 1, 255 * 255, &p->mult_y, &p->shift_y);
}

int8_t qf_int8_binary_eval(const qf_int8_binary *p, int32_t a, int32_t b)
{
    int32_t y;
    if (p->mul) {
        y = qf_multiply_by_quantized_multiplier((a - p->zp_a) * (b - p->zp_b), p->mult_y, (int)p->shift_y);
    } else {
        /* TFLite's reference int8 Add (integer_ops/add.h, AddElementwise);
         * |q - zp| <= 255, so (q - zp) << 20 fits int32. */
        const int32_t sa = qf_multiply_by_quantized_multiplier((a - p->zp_a) * (1 << 20), p->mult_a, (int)p->shift_a);
        const int32_t sb = qf_multiply_by_quantized_multiplier((b - p->zp_b) * (1 << 20), p->mult_b, (int)p->shift_b);
        y = qf_multiply_by_quantized_multiplier(sa + sb, p->mult_y, (int)p->shift_y);
    }
    y += p->zp_y;
    return (int8_t)(y < p->lo ? p->lo : y > p->hi ? p->hi : y);
}

/* The table of every (A, B) pair. */
static void qadd_tabulate(const qf_int8_binary *p, int8_t *table)
{
    for (int a = -128; a < 128; a++)
        for (int b = -128; b < 128; b++) table[(uint8_t)a << 8 | (uint8_t)b] = qf_int8_binary_eval(p, a, b);
}

static qf_status qf_qadd_prepare(const qf_kernel_io *io, void *state)
{
    const qf_node *n = io->node;
    qadd_state *st = state;
    QF_TRY(qf_op_check_inputs(n, 8));
    int ny;
    int64_t yd[QF_MAX_DIMS];
    QF_TRY(qadd_check(n, io->in, &ny, yd));
    for (int i = 1; i < 8; i++)
        if (i != 3 && !io->in[i]->data)
            return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): %s must be a constant", n->name, qf_op_label(n),
                            qadd_names[i]);
    const float sa = *(const float *)io->in[1]->data, sb = *(const float *)io->in[4]->data,
                sy = *(const float *)io->in[6]->data;
    const int32_t zp_a = *(const int8_t *)io->in[2]->data, zp_b = *(const int8_t *)io->in[5]->data,
                  zp_y = *(const int8_t *)io->in[7]->data;
    int32_t lo, hi;
    QF_TRY(qf_int8_clamp_attr(n, &lo, &hi));
    qf_int8_binary p;
    QF_TRY(qf_int8_add_prepare(n, sa, zp_a, sb, zp_b, sy, zp_y, lo, hi, &p));
    qadd_tabulate(&p, st->table);
    return QF_OK;
}

/* TFLite's reference int8 Mul (integer_ops/mul.h, MulElementwise) for every
 * pair: one multiplier s_a * s_b / s_y for the int32 product. */
static qf_status qf_qmul_prepare(const qf_kernel_io *io, void *state)
{
    const qf_node *n = io->node;
    qadd_state *st = state;
    QF_TRY(qf_op_check_inputs(n, 8));
    int ny;
    int64_t yd[QF_MAX_DIMS];
    QF_TRY(qadd_check(n, io->in, &ny, yd));
    float sa, sb, sy;
    int32_t zp_a, zp_b, zp_y, lo, hi;
    QF_TRY(qf_int8_qparams(n, io->in[1], io->in[2], "A", &sa, &zp_a));
    QF_TRY(qf_int8_qparams(n, io->in[4], io->in[5], "B", &sb, &zp_b));
    QF_TRY(qf_int8_qparams(n, io->in[6], io->in[7], "Y", &sy, &zp_y));
    QF_TRY(qf_int8_clamp_attr(n, &lo, &hi));
    qf_int8_binary p;
    QF_TRY(qf_int8_mul_prepare(n, sa, zp_a, sb, zp_b, sy, zp_y, lo, hi, &p));
    qadd_tabulate(&p, st->table);
    return QF_OK;
}

typedef struct qadd_job {
    const int8_t *table;
    const uint8_t *a, *b;
    int8_t *y;
    const qf_bcast_iter *it; /* NULL: A and B of the output's shape */
} qadd_job;

static void qadd_slice(void *ctx, int64_t lo, int64_t hi)
{
    const qadd_job *j = ctx;
    for (int64_t i = lo; i < hi; i++) j->y[i] = j->table[(uint32_t)j->a[i] << 8 | j->b[i]];
}

/* Broadcast operands: rows lo..hi-1 of the iterator (each operand steps 1
 * or 0 along a row). */
static void qadd_rows(void *ctx, int64_t lo, int64_t hi)
{
    const qadd_job *j = ctx;
    qf_bcast_iter it = *j->it;
    qf_bcast_iter_seek(&it, lo);
    for (int64_t r = lo; r < hi; r++, qf_bcast_iter_next(&it)) {
        const uint8_t *a = j->a + it.off[0], *b = j->b + it.off[1];
        const int64_t sa = it.step[0], sb = it.step[1];
        int8_t *y = j->y + r * it.len;
        for (int64_t i = 0; i < it.len; i++) y[i] = j->table[(uint32_t)a[i * sa] << 8 | b[i * sb]];
    }
}

static qf_status qf_qadd_forward_f32(const qf_kernel_io *io)
{
    const qadd_state *st = io->state;
    const qf_tensor *a = io->in[0], *b = io->in[3];
    qf_tensor *y = io->out[0];
    qadd_job j = {.table = st->table, .a = a->data, .b = b->data, .y = y->data};
    const int64_t count = qf_tensor_numel(y);
    if (qf_tensor_numel(a) == count && qf_tensor_numel(b) == count) {
        qf_parallel_for(count, 16384, qadd_slice, &j);
        return QF_OK;
    }
    qf_bcast_iter it;
    const qf_tensor *ops[2] = {a, b};
    qf_bcast_iter_init(&it, y->ndim, y->dims, 2, ops);
    j.it = &it;
    qf_parallel_for(it.rows, 1 + 16384 / (it.len + 1), qadd_rows, &j);
    return QF_OK;
}

const qf_op_kernels qf_qadd_kernels = {
    .infer = qf_qadd_infer,
    .prepare = qf_qadd_prepare,
    .state_size = sizeof(qadd_state),
    .forward_f32 = qf_qadd_forward_f32,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC, /* elementwise, broadcasting by dims */
    .inplace = true,                            /* each element read before it is written */
};

const qf_op_kernels qf_qmul_kernels = {
    .infer = qf_qadd_infer,
    .prepare = qf_qmul_prepare,
    .state_size = sizeof(qadd_state),
    .forward_f32 = qf_qadd_forward_f32,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC, /* elementwise, broadcasting by dims */
    .inplace = true,                            /* each element read before it is written */
};
