/* Checks the Neutron rule files share (neutron_rule_util.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "neutron_rule_util.h"
#include "qfold/status.h"

#define NR_QUANTIZE_FIX "quantize the model first (qfold quantize --target neutron)"

static bool nr_is_int8(qf_dtype dt) { return dt == QF_DTYPE_I8 || dt == QF_DTYPE_U8; }

bool qf_nrule_io_int8(const qf_nview *n, int slot, qf_nwhy *why)
{
    if (slot >= n->nin || !n->in[slot].v)
        return qf_neutron_refuse(why, "", "input %d is missing", slot);
    const qf_nq *x = &n->in[slot];
    if (!x->quantized)
        return qf_neutron_refuse(
            why, NR_QUANTIZE_FIX,
            "input %d is float (not quantized): the NPU computes in int8 / uint8 only", slot);
    if (!nr_is_int8(x->qtype))
        return qf_neutron_refuse(
            why, "quantize the activations to int8 or uint8",
            "input %d is quantized to %s: the NPU takes int8 / uint8 inputs only", slot,
            qf_dtype_name(x->qtype));
    if (n->nout < 1 || !n->out[0].v) return qf_neutron_refuse(why, "", "the output is missing");
    const qf_nq *y = &n->out[0];
    if (!y->quantized)
        return qf_neutron_refuse(
            why, NR_QUANTIZE_FIX,
            "the output is float (not quantized): the NPU computes in int8 / uint8 only");
    if (!nr_is_int8(y->qtype))
        return qf_neutron_refuse(why, "quantize the activations to int8 or uint8",
                                 "the output is quantized to %s: the NPU writes int8 / uint8 only",
                                 qf_dtype_name(y->qtype));
    return true;
}

bool qf_nrule_in_type(const qf_nview *n, int slot, qf_dtype dt, const char *what, qf_nwhy *why)
{
    if (slot >= n->nin || !n->in[slot].v) return qf_neutron_refuse(why, "", "%s are missing", what);
    const qf_nq *x = &n->in[slot];
    if (!x->quantized)
        return qf_neutron_refuse(why, NR_QUANTIZE_FIX,
                                 "%s are float (not quantized): the NPU needs them %s", what,
                                 qf_dtype_name(dt));
    if (x->qtype != dt)
        return qf_neutron_refuse(why,
                                 dt == QF_DTYPE_I32
                                     ? "quantize the bias to int32 (scale = s_input * s_weight)"
                                     : "quantize the weights to int8 (symmetric, zero point 0)",
                                 "%s are quantized to %s: the NPU needs them %s", what,
                                 qf_dtype_name(x->qtype), qf_dtype_name(dt));
    return true;
}

bool qf_nrule_in_static(const qf_nview *n, int slot, const char *what, const char *fix,
                        qf_nwhy *why)
{
    if (slot >= n->nin || !n->in[slot].v) return qf_neutron_refuse(why, "", "%s are missing", what);
    if (!n->in[slot].is_static)
        return qf_neutron_refuse(why, fix,
                                 "%s are computed at run time (%s): the NPU needs them constant",
                                 what, n->in[slot].v->name);
    return true;
}

bool qf_nrule_quantized(const qf_nview *n, qf_nwhy *why)
{
    if (n->nin < 1 || !n->in[0].v || !n->in[0].quantized)
        return qf_neutron_refuse(
            why, NR_QUANTIZE_FIX,
            "the input is float (not quantized): the NPU computes in int8 / uint8 only");
    if (n->nout < 1 || !n->out[0].v || !n->out[0].quantized)
        return qf_neutron_refuse(
            why, NR_QUANTIZE_FIX,
            "the output is float (not quantized): the NPU computes in int8 / uint8 only");
    return true;
}

bool qf_nrule_shared_qparams(const qf_nview *n, qf_nwhy *why)
{
    /* ExecuTorch checks this only when both sides are quantized; the type
     * rules refuse the other cases. */
    if (n->nin < 1 || n->nout < 1) return true;
    const qf_nq *x = &n->in[0], *y = &n->out[0];
    if (!x->quantized || !y->quantized || !x->scale || !y->scale) return true;
    float sx = x->scale[0], sy = y->scale[0];
    int32_t zx = x->zero_point ? x->zero_point[0] : 0, zy = y->zero_point ? y->zero_point[0] : 0;
    if (sx != sy || zx != zy)
        return qf_neutron_refuse(
            why,
            "give the output the input's scale and zero point (qfold quantize --target "
            "neutron does)",
            "input and output qparams differ (scale %g, zero point %d vs scale %g, zero "
            "point %d): the NPU needs them shared",
            (double)sx, (int)zx, (double)sy, (int)zy);
    return true;
}

/* The ops NodeFormatInference pins to channels-first (Conv, pools,
 * upsample). */
static bool nr_op_channels_first(const qf_node *m)
{
    /* The 1-D forms are wrapped in unsqueeze / squeeze (views) by
     * ConvertConv1dToConv2dPass and the pool1d decompositions: the tensors
     * around them stay format-less. */
    const qf_value *x = m->ninputs > 0 ? m->inputs[0] : NULL;
    if (!x || x->type.ndim != 4) return false;
    qf_op op = m->op;
    return op == QF_OP_CONV || op == QF_OP_CONV_TRANSPOSE || op == QF_OP_MAX_POOL ||
           op == QF_OP_AVG_POOL || op == QF_OP_GLOBAL_AVG_POOL || op == QF_OP_RESIZE ||
           op == QF_OP_QLINEAR_CONV || op == QF_OP_CONV_INTEGER;
}

/* The ops that end a format region (view / permute / reductions, and the
 * matrix products whose PyTorch form reshapes to rank 2 or 3). */
static bool nr_op_changes_format(qf_op op)
{
    return op == QF_OP_RESHAPE || op == QF_OP_FLATTEN || op == QF_OP_TRANSPOSE ||
           op == QF_OP_SQUEEZE || op == QF_OP_UNSQUEEZE || op == QF_OP_REDUCE_MEAN ||
           op == QF_OP_REDUCE_SUM || op == QF_OP_REDUCE_MAX || op == QF_OP_GEMM ||
           op == QF_OP_MATMUL || op == QF_OP_EINSUM || op == QF_OP_QLINEAR_MATMUL ||
           op == QF_OP_MATMUL_INTEGER || op == QF_OP_SHAPE || op == QF_OP_GATHER ||
           op == QF_OP_EXPAND;
}

bool qf_nrule_channels_first(const qf_graph *g, const qf_node *node)
{
    /* A walk over the undirected data graph from node, through the nodes
     * that keep the format; reaching an NCHW op makes the region
     * channels-first. The node itself may change the format (a reduction):
     * then only its input side counts, as for ExecuTorch's mean.dim whose
     * format is its input's. */
    uint32_t cap = g->next_node_id;
    bool *seen = qf_calloc(cap ? cap : 1, sizeof *seen);
    const qf_node **stack = qf_malloc((size_t)(cap ? cap : 1) * sizeof *stack);
    bool found = false;
    if (!seen || !stack) goto done;
    int top = 0;
    stack[top++] = node;
    seen[node->id] = true;
    while (top > 0 && !found) {
        const qf_node *m = stack[--top];
        bool from_start = m == node;
        if (!from_start && nr_op_channels_first(m)) {
            found = true;
            break;
        }
        if (!from_start && nr_op_changes_format(m->op)) continue;
        /* Producers of the inputs (constants have none). */
        for (int i = 0; i < m->ninputs; i++) {
            const qf_value *v = m->inputs[i];
            if (!v || !v->producer || v->producer->id >= cap || seen[v->producer->id]) continue;
            if (from_start && i > 0 && m->op != QF_OP_CONCAT && m->op != QF_OP_ADD &&
                m->op != QF_OP_MUL && m->op != QF_OP_SUB && m->op != QF_OP_DIV)
                continue; /* axes / shape operands */
            seen[v->producer->id] = true;
            stack[top++] = v->producer;
        }
        if (from_start && nr_op_changes_format(m->op)) continue;
        for (int o = 0; o < m->noutputs; o++) {
            const qf_value *v = m->outputs[o];
            if (!v) continue;
            for (int u = 0; u < v->nuses; u++) {
                const qf_node *c = v->uses[u].node;
                if (!c || c->id >= cap || seen[c->id]) continue;
                seen[c->id] = true;
                stack[top++] = c;
            }
        }
    }
done:
    qf_free(seen);
    qf_free((void *)stack);
    return found;
}

bool qf_nrule_fix(qf_nwhy *why, const char *fmt, ...)
{
    if (!why) return false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why->fix, sizeof why->fix, fmt, ap);
    va_end(ap);
    return false;
}

const char *qf_nrule_shape_str(const qf_value *v, char *buf, size_t size)
{
    if (!v) {
        snprintf(buf, size, "[?]");
        return buf;
    }
    size_t k = 0;
    k += (size_t)snprintf(buf + k, size - k, "[");
    for (int i = 0; i < v->type.ndim && k < size; i++) {
        if (v->type.dims[i] < 0)
            k += (size_t)snprintf(buf + k, size - k, "%s?", i ? ", " : "");
        else
            k += (size_t)snprintf(buf + k, size - k, "%s%lld", i ? ", " : "",
                                  (long long)v->type.dims[i]);
    }
    if (k < size) snprintf(buf + k, size - k, "]");
    return buf;
}
