/* The int8 lowering's entries and the helpers a new entry is written with
 * (lower.c). An entry is the `lower` column of its float op's row
 * (op_quant.c): qf_quant_lower_int8 walks the graph and calls the row's
 * entry for every node, nothing else names an op.
 *
 * A unary op whose int8 form takes X and the two sets of qparams is one
 * line (the made-up op's, tests/ops/extra_op/square_plus_int8.c):
 *
 *   static qf_status lower_foo(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq, bool *done)
 *   {
 *       (void)rq;
 *       return qf_lower_unary(g, ctx, n, QF_OP_QFOO, "foo", NULL, NULL, done);
 *   }
 */
#ifndef QFOLD_QUANT_LOWER_H
#define QFOLD_QUANT_LOWER_H

#include "op_quant.h"

/* The entries of the library's ops (their rows in op_quant.c). */
qf_status qf_lower_conv(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq,
                        bool *done);
qf_status qf_lower_gemm(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq,
                        bool *done);
qf_status qf_lower_max_pool(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq,
                            bool *done);
qf_status qf_lower_resize(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq,
                          bool *done);
qf_status qf_lower_matmul(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq,
                          bool *done);
qf_status qf_lower_add(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq,
                       bool *done);
qf_status qf_lower_mul(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq,
                       bool *done);
qf_status qf_lower_conv_transpose(qf_graph *g, qf_pass_ctx *ctx, qf_node *n,
                                  qf_int8_requant_kind rq, bool *done);
qf_status qf_lower_concat(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq,
                          bool *done);
qf_status qf_lower_avg_pool(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq,
                            bool *done);
qf_status qf_lower_mean(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq,
                        bool *done);
qf_status qf_lower_hard_swish(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq,
                              bool *done);
qf_status qf_lower_hard_sigmoid(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq,
                                bool *done);
qf_status qf_lower_leaky_relu(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq,
                              bool *done);
/* lower_reduce.c */
qf_status qf_lower_exp(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq,
                       bool *done);
qf_status qf_lower_log(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq,
                       bool *done);
qf_status qf_lower_reduce_sum(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq,
                              bool *done);
qf_status qf_lower_reduce_max(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq,
                              bool *done);
/* lower_prelu_minmax.c */
qf_status qf_lower_prelu(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq,
                         bool *done);
qf_status qf_lower_extreme(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq,
                           bool *done);

/* --- helpers for writing an entry ---------------------------------------- */

/* The DequantizeLinear node producing v, or NULL. */
const qf_node *qf_lower_dq_of(const qf_value *v);
/* A per-tensor int8 Q or DQ: constant float32 scale and int8 zero point, int8 data. */
bool qf_lower_per_tensor_s8(const qf_node *qdq);
/* Its scale and zero point (per_tensor_s8 holds). */
float qf_lower_qscale(const qf_node *qdq);
int32_t qf_lower_qzp(const qf_node *qdq);
/* The tail of n's group: n's output -> [ReLU-range act ->] Q, each link the
 * only reader, the Q per tensor with an int8 zero point. *act (NULL: none)
 * and clamp, the act's range in the Q's integers ([-128, 127] without one). */
bool qf_lower_group_tail(const qf_node *n, const qf_node **q, const qf_node **act,
                         int64_t clamp[2]);
/* Replace the group of n ending at q with one node of `op` named
 * "<n>_int8" reading in[0..nin), with `like`'s attributes (NULL: none) and
 * a qfold_clamp attribute when clamp is set; its output typed as q's, q's
 * readers moved to it. `what` names it in ctx's line. *out (may be NULL)
 * gets the node. */
qf_status qf_lower_replace_group(qf_graph *g, qf_pass_ctx *ctx, const qf_node *n, const qf_node *q,
                                 const qf_node *act, qf_op op, qf_value *const *in, int nin,
                                 const qf_node *like, const int64_t *clamp, const char *what,
                                 qf_node **out);
/* A unary element-wise group DQ -> n -> Q (per-tensor int8, no activation
 * after n) as one `op` node: op(X, X_scale, X_zero_point, Y_scale,
 * Y_zero_point) with n's attributes. accept (may be NULL) can decline the
 * scales (s_x, zp_x, s_y, zp_y), with a reason for ctx's skip line. *out
 * (may be NULL) gets the node made. */
typedef bool (*qf_lower_accept_fn)(float sx, int32_t zx, float sy, int32_t zy, const char **why);
qf_status qf_lower_unary(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_op op, const char *what,
                         qf_lower_accept_fn accept, qf_node **out, bool *done);

#endif
