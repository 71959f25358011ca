/* The int8 form of the made-up op square_plus (qf_test_extra_ops.h): the
 * kernel of its int8 op qsquare_plus and its lowering entry. With the two
 * quantization rows (qf_test_extra_quant.h) and the int8 op's schema row,
 * this is all an int8 op needs: quantize observes square_plus's input and
 * output (pattern own), convert writes DQ -> square_plus -> Q, and the int8
 * executor's lowering (qf_quant_lower_int8) calls the row's entry, which
 * makes the group one qsquare_plus node.
 *
 *   qsquare_plus(X, X_scale, X_zero_point, Y_scale, Y_zero_point) {bias}
 *
 * Prepare tabulates the op for the 256 int8 inputs as the QDQ graph computes
 * it (dequantize, x * x + bias in float32, QuantizeLinear's rounding), so
 * the lowered graph gives the simulated one's integers exactly; the kernel
 * looks each value up. */
#include "ops/int8/int8.h"
#include "ops/op_table.h"
#include "ops/math/quant_math.h"
#include "qfold/schema.h"
#include "quant/lower.h"

typedef struct qsquare_plus_state {
    int8_t table[256]; /* [(uint8_t)x] */
} qsquare_plus_state;

static qf_status qf_qsquare_plus_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    QF_TRY(qf_op_check_inputs(n, 5));
    for (int i = 0; i < 5; i++) {
        const qf_tensor *t = &n->inputs[i]->type;
        qf_dtype want = i == 1 || i == 3 ? QF_DTYPE_F32 : QF_DTYPE_I8;
        if (t->dtype != want || (i > 0 && qf_tensor_numel(t) != 1))
            return qf_error(
                QF_ERR_UNSUPPORTED, "node '%s' (%s): input %d is %s of %lld values, expected %s%s",
                n->name, qf_op_label(n), i, qf_dtype_name(t->dtype), (long long)qf_tensor_numel(t),
                qf_dtype_name(want), i > 0 ? " (one value)" : "");
    }
    const qf_tensor *x = &n->inputs[0]->type;
    qf_set_output(n, 0, QF_DTYPE_I8, x->ndim, x->dims);
    return QF_OK;
}

static qf_status qf_qsquare_plus_prepare(const qf_kernel_io *io, void *state)
{
    const qf_node *n = io->node;
    qsquare_plus_state *st = state;
    float sx, sy;
    int32_t zx, zy;
    QF_TRY(qf_int8_qparams(n, io->in[1], io->in[2], "X", &sx, &zx));
    QF_TRY(qf_int8_qparams(n, io->in[3], io->in[4], "Y", &sy, &zy));
    const float bias = qf_node_attr_float(n, "bias", 0.0f);
    for (int q = -128; q < 128; q++) {
        const float x = qf_dequantize_f32(q, sx, zx);
        st->table[(uint8_t)q] = qf_quantize_s8(x * x + bias, sy, zy);
    }
    return QF_OK;
}

static qf_status qf_qsquare_plus_forward_f32(const qf_kernel_io *io)
{
    const qsquare_plus_state *st = io->state;
    const uint8_t *x = io->in[0]->data;
    int8_t *y = io->out[0]->data;
    const int64_t n = qf_tensor_numel(io->out[0]);
    for (int64_t i = 0; i < n; i++) y[i] = st->table[x[i]];
    return QF_OK;
}

const qf_op_kernels qf_qsquare_plus_kernels = {
    .infer = qf_qsquare_plus_infer,
    .prepare = qf_qsquare_plus_prepare,
    .state_size = sizeof(qsquare_plus_state),
    .forward_f32 = qf_qsquare_plus_forward_f32,
};

/* The lowering entry (square_plus's quantization row): a DQ -> square_plus
 * -> Q group of per-tensor int8 values becomes one qsquare_plus node with
 * square_plus's bias. Any scales: the table holds whatever they give. */
qf_status qf_square_plus_lower_int8(qf_graph *g, qf_pass_ctx *ctx, qf_node *n,
                                    qf_int8_requant_kind rq, bool *done)
{
    (void)rq; /* tabulated: no requantization */
    return qf_lower_unary(g, ctx, n, QF_OP_QSQUARE_PLUS, "square plus", NULL, NULL, done);
}
