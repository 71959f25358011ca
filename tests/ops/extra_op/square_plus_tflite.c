/* The TFLite emitter of the made-up op square_plus (its row:
 * QF_EXTRA_TFLITE_ROWS in qf_test_extra_ops.h): its int8 form in the
 * lowered graph (qsquare_plus, square_plus_int8.c) as one CUSTOM operator
 * "SquarePlus" from the int8 input to the int8 output (their qparams on the
 * tensors), its bias attribute in the operator's custom options. Built on the export's builder
 * (src/tflite/tflite_build.h) alone, as every emitter is. */
#include "tflite/tflite_build.h"

qf_status qf_tfl_emit_square_plus(qf_tfl_ex *e, qf_node *n, const qf_tfl_row *row)
{
    const qf_value *x, *y;
    qf_tfl_qp xq, yq;
    QF_TRY(qf_tfl_group_in(e, n, 0, &x, &xq));
    QF_TRY(qf_tfl_group_out(e, n, &y, &yq, NULL));
    int xi, yi;
    QF_TRY(qf_tfl_act_tensor(e, n, x, &xi));
    QF_TRY(qf_tfl_act_tensor(e, n, y, &yi));
    qf_tfl_attr *bias = qf_tfl_ex_alloc(e, sizeof *bias);
    if (!bias) return QF_ERR_NOMEM;
    *bias = (qf_tfl_attr){.name = "bias", .is_float = 1, .f = qf_node_attr_float(n, "bias", 0.0f)};
    qf_tfl_op *op;
    QF_TRY(qf_tfl_add_op(e, n, row->builtin, &xi, 1, &yi, 1, qf_tensor_numel(&x->type), &op));
    op->custom_code = row->custom;
    op->custom_attrs = bias;
    op->ncustom_attrs = 1;
    return QF_OK;
}
