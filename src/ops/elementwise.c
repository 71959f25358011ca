/* elementwise ops: placeholder until the family is written. */
#include "kernels.h"

qf_status qf_add_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_add_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}

qf_status qf_sub_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_sub_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}

qf_status qf_mul_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_mul_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}

qf_status qf_div_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_div_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}

qf_status qf_pow_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_pow_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}

qf_status qf_sqrt_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_sqrt_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}

qf_status qf_reciprocal_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_reciprocal_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}

qf_status qf_neg_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_neg_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}
