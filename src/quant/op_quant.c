/* The quantization rows (op_quant.h): one per op that has any quantization
 * fact, in designated initializers; every other op's row is zero (no int8
 * form, not an int8 op).
 *
 * The patterns are the rows of the NXP Neutron quantizer's patterns.py: a
 * conv or linear quantizes its weight (per the profile's format: per channel
 * on weight_axis, or per tensor) and its int32 bias and fuses a following
 * ReLU; pools, reshapes, pad, slice, concat move values, so their output
 * shares their input's qparams; softmax / sigmoid / tanh have fixed output
 * qparams (TFLite's int8 kernels require them); add / sub / mul observe
 * every side. Which of these ops a profile quantizes is the profile's
 * (profile.c); how is the row's.
 */
#include "op_quant.h"

#include "lower.h"

/* A test build with made-up ops (tests/ops/extra_op.cmake) adds their rows. */
#ifdef QF_TEST_EXTRA_OPS
#include "qf_test_extra_quant.h"
#endif
#ifndef QF_EXTRA_OP_QUANT_ROWS
#define QF_EXTRA_OP_QUANT_ROWS
#endif

#define PAT(p)       .pattern = (p)
#define SHARE        PAT(QF_QPAT_SHARE)
#define FIXED(s, zp) PAT(QF_QPAT_FIXED), .fixed = {(s), (zp)}
/* A weighted op: weight and bias slots, the weight's output-channel axis. */
#define WEIGHTED(p, w, b, axis) PAT(p), .weight_slot = (w), .bias_slot = (b), .weight_axis = (axis)
/* Its int8 form with TFLite's requantization only, or with either. */
#define LOWER(fn)     .lower = (fn)
#define LOWER_ANY(fn) .lower = (fn), .lower_onnx = true
/* An int8 op of a lowered graph: its output's qparams at input `slot`. */
#define INT8_OUT_QPARAMS(slot) .int8 = QF_INT8_QPARAMS_IN, .qparams_slot = (slot)
#define INT8_PASSES            .int8 = QF_INT8_PASSES_QPARAMS

/* Sized by the op list: a row for an op past its end does not compile. */
static const qf_op_quant qf_op_quant_rows[QF_OP_COUNT] = {
    /* conv and linear layers */
    [QF_OP_CONV] = {WEIGHTED(QF_QPAT_CONV, 1, 2, 0), LOWER_ANY(qf_lower_conv)},
    /* the weight is [C, M/group, k...]: output channels on axis 1 */
    [QF_OP_CONV_TRANSPOSE] = {WEIGHTED(QF_QPAT_CONV, 1, 2, 1), LOWER(qf_lower_conv_transpose)},
    /* qfold's linear, [out, in]: lowered as the Gemm (transB) it is written as */
    [QF_OP_LINEAR] = {WEIGHTED(QF_QPAT_LINEAR, 1, 2, 0), LOWER_ANY(qf_lower_gemm)},
    /* B is [in, out]; with transB [out, in] (axis 0: annotate decides) */
    [QF_OP_GEMM] = {WEIGHTED(QF_QPAT_LINEAR, 1, 2, 1), LOWER_ANY(qf_lower_gemm)},
    /* a constant B [in, out]; two activations observe both sides */
    [QF_OP_MATMUL] = {WEIGHTED(QF_QPAT_LINEAR, 1, -1, 1), LOWER_ANY(qf_lower_matmul)},

    /* activations a conv / linear fuses (else they share their input's) */
    [QF_OP_RELU] = {PAT(QF_QPAT_ACTIVATION)},
    [QF_OP_RELU6] = {PAT(QF_QPAT_ACTIVATION)},
    [QF_OP_CLIP] = {PAT(QF_QPAT_ACTIVATION)},

    /* ops that move values: the output has the input's qparams */
    [QF_OP_MAX_POOL] = {SHARE, LOWER_ANY(qf_lower_max_pool), INT8_PASSES},
    [QF_OP_AVG_POOL] = {SHARE, LOWER(qf_lower_avg_pool)},
    [QF_OP_FLATTEN] = {SHARE, INT8_PASSES},
    [QF_OP_RESHAPE] = {SHARE, INT8_PASSES},
    [QF_OP_TRANSPOSE] = {SHARE, INT8_PASSES},
    [QF_OP_SQUEEZE] = {SHARE, INT8_PASSES},
    [QF_OP_UNSQUEEZE] = {SHARE, INT8_PASSES},
    [QF_OP_PAD] = {SHARE},
    /* nearest copies values; linear is TFLite's int8 RESIZE_BILINEAR */
    [QF_OP_RESIZE] = {SHARE, LOWER(qf_lower_resize), INT8_PASSES},
    [QF_OP_SLICE] = {SHARE},
    [QF_OP_DROPOUT] = {SHARE},
    [QF_OP_IDENTITY] = {SHARE},
    /* the first input's qparams; the others are requantized */
    [QF_OP_CONCAT] = {PAT(QF_QPAT_CONCAT), LOWER(qf_lower_concat)},

    /* fixed output ranges: [0, 1) for softmax and sigmoid, [-1, 1) for tanh */
    [QF_OP_SOFTMAX] = {FIXED(1.0f / 256.0f, -128)},
    [QF_OP_SIGMOID] = {FIXED(1.0f / 256.0f, -128)},
    [QF_OP_TANH] = {FIXED(1.0f / 128.0f, 0)},

    /* binary ops: both inputs and the output observed */
    [QF_OP_ADD] = {PAT(QF_QPAT_BINARY), LOWER(qf_lower_add)},
    [QF_OP_SUB] = {PAT(QF_QPAT_BINARY)},
    [QF_OP_MUL] = {PAT(QF_QPAT_BINARY), LOWER(qf_lower_mul)},
    /* Max / Min: inputs and output share one set of qparams (Neutron's
     * identical qparams), so that the int8 op is the exact integer max /
     * min: in a lowered graph the same op on the int8 values */
    [QF_OP_MAX] = {PAT(QF_QPAT_SAME), LOWER_ANY(qf_lower_extreme), INT8_PASSES},
    [QF_OP_MIN] = {PAT(QF_QPAT_SAME), LOWER_ANY(qf_lower_extreme), INT8_PASSES},
    /* Abs shares its input's qparams (the Neutron quantizer's abs): then
     * DQ -> Abs -> Q is exactly min(|q - zp| + zp, 127), run as written */
    [QF_OP_ABS] = {SHARE},

    /* reductions: shared or own qparams, per the profile */
    [QF_OP_GLOBAL_AVG_POOL] = {PAT(QF_QPAT_REDUCTION), LOWER(qf_lower_mean)},
    [QF_OP_REDUCE_MEAN] = {PAT(QF_QPAT_REDUCTION), LOWER(qf_lower_mean)},
    /* TFLite's SUM adds the raw int8 values when X and Y share qparams (zero
     * points counted, wrapping), and a sum's range grows with its count: own */
    [QF_OP_REDUCE_SUM] = {PAT(QF_QPAT_OWN), LOWER(qf_lower_reduce_sum)},
    /* the largest q is the largest real: exact with shared qparams */
    [QF_OP_REDUCE_MAX] = {SHARE, LOWER_ANY(qf_lower_reduce_max), INT8_PASSES},

    /* element-wise ops with their own output qparams */
    /* LeakyRelu: TFLite's int8 LEAKY_RELU (two multipliers), tabulated */
    [QF_OP_LEAKY_RELU] = {PAT(QF_QPAT_OWN), LOWER(qf_lower_leaky_relu)},
    /* PRelu: its slope an int8 constant per tensor (TFLite's PRELU alpha) */
    [QF_OP_PRELU] = {PAT(QF_QPAT_PRELU), LOWER(qf_lower_prelu)},
    [QF_OP_HARD_SWISH] = {PAT(QF_QPAT_OWN), LOWER(qf_lower_hard_swish)},
    [QF_OP_HARD_SIGMOID] = {PAT(QF_QPAT_OWN), LOWER(qf_lower_hard_sigmoid)},
    /* TFLite 2.2's DEQUANTIZE -> EXP / LOG -> QUANTIZE as an int8 table */
    [QF_OP_EXP] = {PAT(QF_QPAT_OWN), LOWER(qf_lower_exp)},
    [QF_OP_LOG] = {PAT(QF_QPAT_OWN), LOWER(qf_lower_log)},

    /* the int8 ops of a lowered graph (ONNX's and qfold's own) */
    [QF_OP_QLINEAR_CONV] = {INT8_OUT_QPARAMS(6)},
    [QF_OP_QLINEAR_MATMUL] = {INT8_OUT_QPARAMS(6)},
    [QF_OP_QADD] = {INT8_OUT_QPARAMS(6)},
    [QF_OP_QMUL] = {INT8_OUT_QPARAMS(6)},
    [QF_OP_QCONV_TRANSPOSE] = {INT8_OUT_QPARAMS(6)},
    [QF_OP_QCONCAT] = {INT8_OUT_QPARAMS(0)},
    [QF_OP_QAVG_POOL] = {INT8_OUT_QPARAMS(3)},
    [QF_OP_QMEAN] = {INT8_OUT_QPARAMS(3)},
    [QF_OP_QSUM] = {INT8_OUT_QPARAMS(3)},
    [QF_OP_QLUT] = {INT8_OUT_QPARAMS(3)},
    /* Split: every part has the input's qparams (also the int8 Split of a
     * grouped conv's input, split_group_conv) */
    [QF_OP_SPLIT] = {SHARE, INT8_PASSES},

    /* the made-up ops of the extra-op test build (empty in every other) */
    QF_EXTRA_OP_QUANT_ROWS
};

_Static_assert(sizeof qf_op_quant_rows / sizeof qf_op_quant_rows[0] == QF_OP_COUNT,
               "one quantization row per op of QF_OP_LIST, read by qf_op_quant_get");

const qf_op_quant *qf_op_quant_get(qf_op op)
{
    static const qf_op_quant none = {0};
    return (unsigned)op < QF_OP_COUNT ? &qf_op_quant_rows[op] : &none;
}

int qf_op_quant_weight_axis(const qf_node *n)
{
    const qf_op_quant *r = qf_op_quant_get(n->op);
    if (r->pattern != QF_QPAT_CONV && r->pattern != QF_QPAT_LINEAR) return -1;
    if (n->op == QF_OP_GEMM && qf_node_attr_int(n, "transB", 0)) return 0;
    return r->weight_axis;
}

int qf_quant_op_out_qparams_slot(qf_op op)
{
    const qf_op_quant *r = qf_op_quant_get(op);
    return r->int8 == QF_INT8_QPARAMS_IN ? r->qparams_slot : -1;
}

bool qf_quant_op_passes_qparams(qf_op op)
{
    return qf_op_quant_get(op)->int8 == QF_INT8_PASSES_QPARAMS;
}

bool qf_quant_profile_takes(const qf_quant_profile *p, qf_op op)
{
    if ((unsigned)op >= QF_OP_COUNT || qf_op_quant_rows[op].pattern == QF_QPAT_NONE) return false;
    return p->every_op || p->ops[op];
}
