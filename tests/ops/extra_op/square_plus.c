/* The kernel file of the made-up op square_plus (qf_test_extra_ops.h):
 * inference, prepare (the attribute decoded once) and the float forward
 * kernel, collected into qf_square_plus_kernels. This file and the schema
 * row are all an op needs. */
#include "ops/op_table.h"

typedef struct square_plus_state {
    float bias;
} square_plus_state;

static qf_status qf_square_plus_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    QF_TRY(qf_op_check_inputs(n, 1));
    const qf_tensor *x = &n->inputs[0]->type;
    if (x->dtype != QF_DTYPE_F32)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): input dtype %s, expected float32", n->name,
                        qf_op_label(n), qf_dtype_name(x->dtype));
    qf_set_output(n, 0, QF_DTYPE_F32, x->ndim, x->dims);
    return QF_OK;
}

static qf_status qf_square_plus_prepare(const qf_kernel_io *io, void *state)
{
    square_plus_state *st = state;
    st->bias = (float)qf_node_attr_float(io->node, "bias", 0.0f);
    return QF_OK;
}

static qf_status qf_square_plus_forward_f32(const qf_kernel_io *io)
{
    const square_plus_state *st = io->state;
    const float *x = io->in[0]->data;
    float *y = io->out[0]->data;
    int64_t n = qf_tensor_numel(io->in[0]);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * x[i] + st->bias;
    return QF_OK;
}

const qf_op_kernels qf_square_plus_kernels = {
    .infer = qf_square_plus_infer,
    .prepare = qf_square_plus_prepare,
    .state_size = sizeof(square_plus_state),
    .forward_f32 = qf_square_plus_forward_f32,
};
