/* Private to src/target/: the Neutron delegation rules as rows.
 *
 * The check engine (check.c) sees a QDQ graph the way ExecuTorch's NXP
 * partitioner sees its edge graph: each compute node with its operands seen
 * through their DequantizeLinear (inputs) and QuantizeLinear (outputs). It
 * builds one qf_nview per compute node and asks the node's row, one per op
 * and flow (the rule files neutron_*.c, collected by neutron_table.c):
 * supported, or not with the rule that failed in words and a fix. After the
 * partitions are formed it asks the row's partition rule (ExecuTorch's
 * supports_partitioning_result: a Relu alone in its partition goes to the
 * CPU).
 *
 * A rule reads the view only: shapes (ONNX order, NCHW), attributes, whether
 * an operand is static and how it is quantized. It never changes the graph.
 */
#ifndef QF_TARGET_NEUTRON_H
#define QF_TARGET_NEUTRON_H

#include <stdbool.h>
#include <stdint.h>

#include "qfold/graph.h"
#include "qfold/target.h"

/* One operand as the converter sees it. */
typedef struct qf_nq {
    const qf_value *v;     /* the float-domain value the node reads / writes; NULL: an omitted input */
    bool quantized;        /* behind a DequantizeLinear (input) / before a QuantizeLinear (output) */
    qf_dtype qtype;        /* the quantized tensor's dtype (I8, U8, I32), or v's dtype when not quantized */
    bool is_static;        /* a constant (behind its DequantizeLinear, or itself) */
    int axis;              /* per-channel quantization axis, -1 per-tensor */
    int64_t nscale;        /* scales / zero points: 1 per-tensor, else one per channel */
    const float *scale;
    const int32_t *zero_point;
} qf_nq;

/* One compute node with its operands. */
typedef struct qf_nview {
    const qf_graph *g;
    const qf_node *node;
    int nin, nout;
    const qf_nq *in, *out; /* nin / nout of them, by slot */
    /* The activation fused into this node's output cluster (a Relu / Clip /
     * ... between the node and its QuantizeLinear), NULL if none; a node
     * that is such an activation has fused_into = its producer. */
    const qf_node *fused_act, *fused_into;
} qf_nview;

/* Why a node goes to the CPU: the rule that failed, in words a user
 * understands, with the numbers ("kh*kw*ceil(Cin, 8) = 65664 > 65535"), and
 * a concrete fix or "" ("split the input channels into two convolutions of
 * 1024"). */
typedef struct qf_nwhy {
    char rule[256];
    char fix[256];
} qf_nwhy;

/* A row's verdict: true = the NPU takes it; false fills why. */
typedef bool (*qf_neutron_rule)(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why);

/* What the partition rule sees of the node's proposed partition. */
typedef struct qf_npart {
    int ncompute;          /* compute nodes in the partition (Q / DQ not counted), the node included */
    const qf_node *const *compute; /* them */
} qf_npart;
/* true = the node keeps its partition; false: it goes to the CPU (why filled). */
typedef bool (*qf_neutron_partition_rule)(const qf_nview *n, const qf_npart *p, const qf_target_spec *t,
                                          qf_nwhy *why);

/* One row: op, the rule of each flow (NULL: no converter in that flow, the
 * node goes to the CPU with "no Neutron converter for <op> in SDK 2.x"), the
 * partition rule (NULL: none). An op with no row has no converter at all. */
typedef struct qf_neutron_row {
    qf_op op;
    qf_neutron_rule sdk3, sdk2;
    qf_neutron_partition_rule partition;
} qf_neutron_row;

/* The rows of each rule file, terminated by a row with op = QF_OP_COUNT. */
extern const qf_neutron_row qf_neutron_rows_conv[];    /* neutron_conv.c: Conv, ConvTranspose, Gemm, MatMul */
extern const qf_neutron_row qf_neutron_rows_pool[];    /* neutron_pool.c: pools, ReduceMean / Sum / Max, Softmax */
extern const qf_neutron_row qf_neutron_rows_binary[];  /* neutron_binary.c: Add, Sub, Mul, Div, Max, Min, Concat */
extern const qf_neutron_row qf_neutron_rows_act[];     /* neutron_act.c: Relu, Clip, Sigmoid, Tanh, Exp, ... PRelu */
extern const qf_neutron_row qf_neutron_rows_shape[];   /* neutron_shape.c: Reshape, Transpose, Slice, Pad, Resize, ... */

/* The row of op (neutron_table.c), NULL when the NPU has no converter for it. */
const qf_neutron_row *qf_neutron_row_find(qf_op op);

/* Helpers the rule files share (neutron_table.c). */
/* ceil(a / m) * m */
int64_t qf_neutron_round_up(int64_t a, int64_t m);
/* printf into why->rule / why->fix; always returns false (a rule's "no"). */
bool qf_neutron_refuse(qf_nwhy *why, const char *fix, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#endif
