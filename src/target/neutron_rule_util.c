/* The readers and checks the Neutron rule files share (neutron_rule_util.h). */
#include "neutron_rule_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "qfold/op.h"
#include "qfold/status.h"

#define NR_QUANTIZE_FIX "quantize the model first (qfold quantize --target neutron)"

/* --- Quantization ------------------------------------------------------- */

/* One operand's part of the cluster / type check; slot -1 is the output. */
static bool nr_operand_ok(const qf_nq *q, int slot, bool int8_types, qf_nwhy *why)
{
    char what[32];
    if (slot < 0)
        snprintf(what, sizeof what, "the output");
    else
        snprintf(what, sizeof what, "input %d", slot);
    if (!q->quantized)
        return qf_neutron_refuse(
            why, NR_QUANTIZE_FIX, "%s is float (no %s): the NPU runs only quantized (QDQ) nodes",
            what, slot < 0 ? "QuantizeLinear after it" : "DequantizeLinear before it");
    if (int8_types && q->qtype != QF_DTYPE_I8 && q->qtype != QF_DTYPE_U8)
        return qf_neutron_refuse(why, "quantize the activations to int8 or uint8",
                                 "%s is quantized to %s: the NPU takes int8 / uint8 only", what,
                                 qf_dtype_name(q->qtype));
    return true;
}

bool qf_nrule_io_quantized(const qf_nview *n, int nin_check, bool int8_types, qf_nwhy *why)
{
    if (nin_check > 0 && (n->nin < 1 || !n->in[0].v))
        return qf_neutron_refuse(why, "", "input 0 is missing");
    for (int i = 0; i < nin_check && i < n->nin; i++) {
        if (!n->in[i].v) continue;
        if (!nr_operand_ok(&n->in[i], i, int8_types, why)) return false;
    }
    if (n->nout < 1 || !n->out[0].v) return qf_neutron_refuse(why, "", "the output is missing");
    return nr_operand_ok(&n->out[0], -1, int8_types, why);
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

bool qf_nrule_same_qparams(const qf_nq *a, const qf_nq *b)
{
    if (!a->quantized || !b->quantized || a->qtype != b->qtype || a->nscale != b->nscale ||
        !a->scale || !b->scale)
        return false;
    for (int64_t i = 0; i < a->nscale; i++) {
        if (a->scale[i] != b->scale[i]) return false;
        int32_t za = a->zero_point ? a->zero_point[i] : 0,
                zb = b->zero_point ? b->zero_point[i] : 0;
        if (za != zb) return false;
    }
    return true;
}

bool qf_nrule_shared_qparams(const qf_nview *n, int nin_check, qf_nwhy *why)
{
    if (n->nout < 1 || !n->out[0].quantized) return true;
    const char *op = qf_op_onnx_name(n->node->op);
    for (int i = 0; i < nin_check && i < n->nin; i++) {
        /* ExecuTorch compares only quantized operands; the type checks
         * refuse the others. */
        if (!n->in[i].v || !n->in[i].quantized) continue;
        if (qf_nrule_same_qparams(&n->in[i], &n->out[0])) continue;
        char a[96], b[96];
        qf_nrule_qparams_str(&n->in[i], a, sizeof a);
        qf_nrule_qparams_str(&n->out[0], b, sizeof b);
        if (nin_check == 1)
            return qf_neutron_refuse(
                why,
                "give the output the input's scale and zero point (qfold quantize --target "
                "neutron does)",
                "input and output qparams differ (input %s, output %s): %s needs its output "
                "quantized like its input",
                a, b, op);
        return qf_neutron_refuse(
            why,
            "give every input the output's scale and zero point (one scale and zero point for "
            "all; qfold quantize --target neutron does, except for an input with fixed "
            "qparams, a Softmax / Sigmoid / Tanh output: requantize that input)",
            "%s input %d has %s, the output %s: %s needs its inputs quantized like its output", op,
            i, a, b, op);
    }
    return true;
}

const char *qf_nrule_qparams_str(const qf_nq *q, char *buf, size_t size)
{
    if (!q->quantized || q->nscale < 1 || !q->scale)
        snprintf(buf, size, "not quantized");
    else if (q->nscale > 1)
        snprintf(buf, size, "%lld per-channel scales (%s)", (long long)q->nscale,
                 qf_dtype_name(q->qtype));
    else
        snprintf(buf, size, "scale %.6g zero point %d (%s)", (double)q->scale[0],
                 q->zero_point ? q->zero_point[0] : 0, qf_dtype_name(q->qtype));
    return buf;
}

/* --- Shapes and layout -------------------------------------------------- */

int64_t qf_nrule_numel(const qf_value *v)
{
    int64_t e = 1;
    for (int i = 0; v && i < v->type.ndim; i++)
        if (v->type.dims[i] > 1)
            e *= v->type.dims[i];
        else if (v->type.dims[i] == 0)
            return 0;
    return e;
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

/* The ops NodeFormatInference pins to channels first, on their data input
 * and output: aten.convolution of any rank but 1-D (ConvertConv1dToConv2dPass
 * wraps a 1-D one in unsqueeze / squeeze views, so the tensors around it stay
 * formatless), and the 2-D pools and upsamples (the 1-D pools decompose into
 * views around a 2-D one; 3-D ones are other aten ops). */
static bool nr_op_channels_first(const qf_node *m)
{
    const qf_value *x = m->ninputs > 0 ? m->inputs[0] : NULL;
    int rank = x ? x->type.ndim : 0;
    switch (m->op) {
    case QF_OP_CONV:
    case QF_OP_CONV_TRANSPOSE:
    case QF_OP_QLINEAR_CONV:
    case QF_OP_CONV_INTEGER: return rank >= 4;
    case QF_OP_MAX_POOL:
    case QF_OP_AVG_POOL:
    case QF_OP_GLOBAL_AVG_POOL:
    case QF_OP_RESIZE: return rank == 4;
    default: return false;
    }
}

/* The ops that end a layout region: view_copy / permute_copy, the
 * reductions that drop dims (mean / sum / amax without keepdim; with it they
 * keep the layout), and the matrix products, which PyTorch computes on views
 * of rank 2 or 3. */
static bool nr_op_changes_layout(const qf_node *m)
{
    switch (m->op) {
    case QF_OP_RESHAPE:
    case QF_OP_FLATTEN:
    case QF_OP_SQUEEZE:
    case QF_OP_UNSQUEEZE:
    case QF_OP_TRANSPOSE:
    case QF_OP_MATMUL:
    case QF_OP_EINSUM:
    case QF_OP_QLINEAR_MATMUL:
    case QF_OP_MATMUL_INTEGER: return true;
    case QF_OP_REDUCE_MEAN:
    case QF_OP_REDUCE_SUM:
    case QF_OP_REDUCE_MAX: return !qf_node_attr_int(m, "keepdims", 1);
    default: return false;
    }
}

/* Breadth-first over the tensors of rank >= 3 that share a layout with v
 * (ExecuTorch's fixpoint spreads channels first both ways through every
 * node that can use any format, and stops at rank <= 2): a node that keeps
 * the layout joins its inputs and outputs; one that changes it ends the walk
 * on that side; the data input or output of a channels-first op makes the
 * whole set channels first. Constants (weights, shapes) are not walked. */
bool qf_nrule_channels_first(const qf_graph *g, const qf_value *v)
{
    if (!g || !v || v->type.ndim < 3) return false;
    uint8_t *seen = qf_calloc((size_t)g->nvalues + 1, 1);
    const qf_value **queue = qf_malloc(((size_t)g->nvalues + 1) * sizeof *queue);
    bool found = false;
    if (!seen || !queue) {
        qf_free(seen);
        qf_free(queue);
        return v->type.ndim == 4; /* out of memory: the common case */
    }
    int head = 0, tail = 0;
    queue[tail++] = v;
    seen[v->id] = 1;
    while (head < tail && !found) {
        const qf_value *x = queue[head++];
        /* The nodes touching x: its producer (x its output) and its readers. */
        for (int k = -1; k < x->nuses && !found; k++) {
            const qf_node *node = k < 0 ? x->producer : x->uses[k].node;
            if (!node) continue;
            if (nr_op_channels_first(node)) {
                if (k < 0 || x->uses[k].slot == 0) found = true;
                continue;
            }
            if (nr_op_changes_layout(node)) continue;
            for (int i = 0; i < node->ninputs + node->noutputs; i++) {
                const qf_value *y =
                    i < node->ninputs ? node->inputs[i] : node->outputs[i - node->ninputs];
                if (!y || y->type.ndim < 3 || seen[y->id] || qf_value_is_const(y)) continue;
                seen[y->id] = 1;
                queue[tail++] = y;
            }
        }
    }
    qf_free(seen);
    qf_free(queue);
    return found;
}

int qf_nrule_channel_dim(const qf_graph *g, const qf_value *v)
{
    if (!v || v->type.ndim <= 0) return -1;
    return qf_nrule_channels_first(g, v) ? 1 : v->type.ndim - 1;
}

/* --- Operands and neighbours -------------------------------------------- */

/* The constant behind operand slot: the value itself when it has data, else
 * the constant input of the DequantizeLinear that produces it. */
static const qf_value *const_source(const qf_nview *n, int slot, const qf_node **dq)
{
    *dq = NULL;
    if (slot >= n->nin || !n->in[slot].v || !n->in[slot].is_static) return NULL;
    const qf_value *v = n->in[slot].v;
    if (qf_value_is_const(v)) return v;
    if (v->producer && v->producer->op == QF_OP_DEQUANTIZE && v->producer->inputs[0] &&
        qf_value_is_const(v->producer->inputs[0])) {
        *dq = v->producer;
        return v->producer->inputs[0];
    }
    return NULL;
}

static bool read_all(const qf_graph *g, const qf_value *v, void *dst, size_t bytes)
{
    if (v->type.data) {
        memcpy(dst, v->type.data, bytes);
        return true;
    }
    return qf_value_read(g, v, 0, dst, bytes, false) == QF_OK;
}

bool qf_nrule_const_ints(const qf_nview *n, int slot, int64_t *dst, int max, int *count)
{
    const qf_node *dq;
    const qf_value *c = const_source(n, slot, &dq);
    if (!c || dq) return false;
    int64_t e = 1;
    for (int i = 0; i < c->type.ndim; i++) e *= c->type.dims[i];
    if (e < 0 || e > max) return false;
    if (c->type.dtype == QF_DTYPE_I64) {
        if (!read_all(n->g, c, dst, (size_t)e * sizeof(int64_t))) return false;
    } else if (c->type.dtype == QF_DTYPE_I32) {
        int32_t tmp[64];
        if (e > 64 || !read_all(n->g, c, tmp, (size_t)e * sizeof(int32_t))) return false;
        for (int64_t i = 0; i < e; i++) dst[i] = tmp[i];
    } else {
        return false;
    }
    *count = (int)e;
    return true;
}

bool qf_nrule_const_floats(const qf_nview *n, int slot, float *dst, int max, int *count)
{
    const qf_node *dq;
    const qf_value *c = const_source(n, slot, &dq);
    if (!c) return false;
    int64_t e = 1;
    for (int i = 0; i < c->type.ndim; i++) e *= c->type.dims[i];
    if (e < 0 || e > max) return false;
    if (!dq) {
        if (c->type.dtype != QF_DTYPE_F32 || !read_all(n->g, c, dst, (size_t)e * sizeof(float)))
            return false;
        *count = (int)e;
        return true;
    }
    /* Behind a DequantizeLinear: (q - zp) * scale with the operand's
     * per-tensor parameters (a per-channel divisor is not worth reading). */
    const qf_nq *q = &n->in[slot];
    if (q->nscale != 1 || (c->type.dtype != QF_DTYPE_I8 && c->type.dtype != QF_DTYPE_U8))
        return false;
    uint8_t raw[4096];
    if (e > (int64_t)sizeof raw || !read_all(n->g, c, raw, (size_t)e)) return false;
    int32_t zp = q->zero_point ? q->zero_point[0] : 0;
    for (int64_t i = 0; i < e; i++) {
        int32_t qv = c->type.dtype == QF_DTYPE_I8 ? (int32_t)(int8_t)raw[i] : (int32_t)raw[i];
        dst[i] = (float)(qv - zp) * q->scale[0];
    }
    *count = (int)e;
    return true;
}

static bool is_qdq(const qf_node *node)
{
    return node->op == QF_OP_QUANTIZE || node->op == QF_OP_DEQUANTIZE;
}

const qf_node *qf_nrule_compute_producer(const qf_value *v)
{
    while (v && v->producer && is_qdq(v->producer)) v = v->producer->inputs[0];
    return v ? v->producer : NULL;
}

static int consumers_rec(const qf_value *v, const qf_node **dst, int max, int k, int depth)
{
    for (int u = 0; v && u < v->nuses; u++) {
        const qf_node *c = v->uses[u].node;
        if (is_qdq(c) && v->uses[u].slot == 0 && depth < 4) {
            k = consumers_rec(c->outputs[0], dst, max, k, depth + 1);
        } else if (!is_qdq(c)) {
            if (k < max) dst[k] = c;
            k++;
        }
    }
    return k;
}

int qf_nrule_compute_consumers(const qf_value *v, const qf_node **dst, int max)
{
    return consumers_rec(v, dst, max, 0, 0);
}

bool qf_nrule_in_partition(const qf_npart *p, const qf_node *node)
{
    for (int i = 0; i < p->ncompute; i++)
        if (p->compute[i] == node) return true;
    return false;
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

/* --- neutron.h's helpers ----------------------------------------------------- */

int64_t qf_neutron_round_up(int64_t a, int64_t m)
{
    if (m <= 1) return a;
    return (a + m - 1) / m * m;
}

bool qf_neutron_refuse(qf_nwhy *why, const char *fix, const char *fmt, ...)
{
    if (!why) return false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why->rule, sizeof why->rule, fmt, ap);
    va_end(ap);
    snprintf(why->fix, sizeof why->fix, "%s", fix ? fix : "");
    return false;
}
