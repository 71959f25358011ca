/* activation ops: placeholder until the family is written. */
#include "kernels.h"

qf_status qf_relu_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_relu_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}

qf_status qf_relu6_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_relu6_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}

qf_status qf_clip_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_clip_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}

qf_status qf_leaky_relu_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_leaky_relu_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}

qf_status qf_sigmoid_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_sigmoid_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}

qf_status qf_tanh_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_tanh_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}

qf_status qf_hard_sigmoid_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_hard_sigmoid_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}

qf_status qf_hard_swish_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_hard_swish_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}

qf_status qf_softmax_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_softmax_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}
