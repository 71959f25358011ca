/* The quantization rows of the made-up op of the extra-op test build (the
 * rows src/quant/op_quant.c holds for the library's ops; it includes this
 * file when QF_TEST_EXTRA_OPS is defined):
 *
 *   square_plus   quantized with its own output qparams (x * x + bias has a
 *                 range of its own); its int8 form, the lowering entry
 *                 qf_square_plus_lower_int8 (square_plus_int8.c)
 *   qsquare_plus  the int8 op: its output's scale and zero point are inputs 3, 4
 */
#ifndef QF_TEST_EXTRA_QUANT_H
#define QF_TEST_EXTRA_QUANT_H

qf_status qf_square_plus_lower_int8(qf_graph *g, qf_pass_ctx *ctx, qf_node *n,
                                    qf_int8_requant_kind rq, bool *done);

#define QF_EXTRA_OP_QUANT_ROWS                                                          \
    [QF_OP_SQUARE_PLUS] = {.pattern = QF_QPAT_OWN, .lower = qf_square_plus_lower_int8}, \
    [QF_OP_QSQUARE_PLUS] = {.int8 = QF_INT8_QPARAMS_IN, .qparams_slot = 3},

#endif
