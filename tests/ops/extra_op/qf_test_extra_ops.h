/* The made-up op of the extra-op test build (tests/ops/extra_op.cmake): its
 * schema rows, appended to QF_OP_LIST by include/qfold/op.h when
 * QF_TEST_EXTRA_OPS is defined. Its kernel file is square_plus.c; its int8
 * form is the internal op qsquare_plus (kernel and lowering entry in
 * square_plus_int8.c, quantization rows in qf_test_extra_quant.h).
 *
 *   square_plus:  y = x * x + bias    (x float32, any shape; attribute bias, FLOAT)
 *   qsquare_plus: the same on int8 X, X_scale, X_zero_point, Y_scale, Y_zero_point
 */
#ifndef QF_TEST_EXTRA_OPS_H
#define QF_TEST_EXTRA_OPS_H

#define QF_EXTRA_OP_LIST(X)                                                     \
    X(SQUARE_PLUS, square_plus, "SquarePlus", "qfold.test", 1, 1, 1, 1,         \
      (DATA),                                                                   \
      (A(bias,FLOAT)))                                                          \
    X(QSQUARE_PLUS, qsquare_plus, NULL, "", 5, 5, 1, 1,                         \
      (DATA),                                                                   \
      (A(bias,FLOAT)))

/* Its TFLite mapping, one row of the export's op table (read by
 * src/tflite/tflite_rows.c): X(tag, emitter, row fields). A CUSTOM operator
 * "SquarePlus" (attribute bias in its custom options), written by
 * qf_tfl_emit_square_plus (square_plus_tflite.c). */
#define QF_EXTRA_TFLITE_ROWS(X) X(QSQUARE_PLUS, square_plus, .builtin = QF_TFL_CUSTOM, .custom = "SquarePlus")

#endif
