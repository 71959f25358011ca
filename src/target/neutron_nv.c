/* Readers over a node view shared by the element-wise, activation and shape
 * rule files (neutron_nv.h). */
#include "neutron_nv.h"

#include <math.h>
#include <string.h>

#include "qfold/op.h"

int64_t qf_nv_numel(const qf_value *v)
{
    int64_t e = 1;
    for (int i = 0; v && i < v->type.ndim; i++)
        if (v->type.dims[i] > 1)
            e *= v->type.dims[i];
        else if (v->type.dims[i] == 0)
            return 0;
    return e;
}

const char *qf_nv_shape_str(const qf_value *v, char *buf, size_t n)
{
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int i = 0; v && i < v->type.ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)v->type.dims[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

static bool changes_layout(qf_op op)
{
    return op == QF_OP_RESHAPE || op == QF_OP_FLATTEN || op == QF_OP_SQUEEZE ||
           op == QF_OP_UNSQUEEZE || op == QF_OP_TRANSPOSE;
}

static bool channels_first_op(qf_op op)
{
    return op == QF_OP_CONV || op == QF_OP_CONV_TRANSPOSE || op == QF_OP_MAX_POOL ||
           op == QF_OP_AVG_POOL || op == QF_OP_GLOBAL_AVG_POOL || op == QF_OP_RESIZE;
}

/* Breadth-first over the tensors of rank >= 3 that share a layout with v:
 * a node that keeps the layout joins its inputs and outputs; one that
 * changes it ends the walk on that side; a Conv-like node's data input or
 * output makes the whole set channels first. */
bool qf_nv_channels_first(const qf_graph *g, const qf_value *v)
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
            bool data_slot = k < 0 || x->uses[k].slot == 0;
            if (channels_first_op(node->op)) {
                if (data_slot) found = true;
                continue;
            }
            if (changes_layout(node->op)) continue;
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

int qf_nv_channel_dim(const qf_graph *g, const qf_value *v)
{
    if (!v || v->type.ndim <= 0) return -1;
    return qf_nv_channels_first(g, v) ? 1 : v->type.ndim - 1;
}

static const char *qtype_name(qf_dtype dt) { return qf_dtype_name(dt); }

/* One operand's part of the cluster / type check; slot -1 is the output. */
static bool operand_ok(const qf_nq *q, int slot, bool int8_types, qf_nwhy *why)
{
    char what[32];
    if (slot < 0)
        snprintf(what, sizeof what, "the output");
    else
        snprintf(what, sizeof what, "input %d", slot);
    if (!q->quantized)
        return qf_neutron_refuse(
            why,
            "quantize the model (qfold quantize --target neutron) so the node sits "
            "between DequantizeLinear and QuantizeLinear",
            "%s is not quantized (no %s): the NPU runs only quantized (QDQ) nodes", what,
            slot < 0 ? "QuantizeLinear after it" : "DequantizeLinear before it");
    if (int8_types && q->qtype != QF_DTYPE_I8 && q->qtype != QF_DTYPE_U8)
        return qf_neutron_refuse(why, "quantize it as int8 or uint8",
                                 "%s is quantized as %s: the NPU takes int8 or uint8 here", what,
                                 qtype_name(q->qtype));
    return true;
}

bool qf_nv_io_quantized(const qf_nview *n, int nin_check, bool int8_types, qf_nwhy *why)
{
    for (int i = 0; i < nin_check && i < n->nin; i++) {
        if (!n->in[i].v) continue;
        if (!operand_ok(&n->in[i], i, int8_types, why)) return false;
    }
    if (n->nout > 0 && !operand_ok(&n->out[0], -1, int8_types, why)) return false;
    return true;
}

bool qf_nv_same_qparams(const qf_nq *a, const qf_nq *b)
{
    if (!a->quantized || !b->quantized || a->qtype != b->qtype || a->nscale != b->nscale)
        return false;
    for (int64_t i = 0; i < a->nscale; i++) {
        if (a->scale[i] != b->scale[i]) return false;
        int32_t za = a->zero_point ? a->zero_point[i] : 0,
                zb = b->zero_point ? b->zero_point[i] : 0;
        if (za != zb) return false;
    }
    return true;
}

const char *qf_nv_qparams_str(const qf_nq *q, char *buf, size_t n)
{
    if (!q->quantized || q->nscale < 1)
        snprintf(buf, n, "not quantized");
    else if (q->nscale > 1)
        snprintf(buf, n, "%lld per-channel scales (%s)", (long long)q->nscale,
                 qtype_name(q->qtype));
    else
        snprintf(buf, n, "scale %.6g zero point %d (%s)", (double)q->scale[0],
                 q->zero_point ? q->zero_point[0] : 0, qtype_name(q->qtype));
    return buf;
}

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

bool qf_nv_const_ints(const qf_nview *n, int slot, int64_t *dst, int max, int *count)
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

bool qf_nv_const_floats(const qf_nview *n, int slot, float *dst, int max, int *count)
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

const qf_node *qf_nv_compute_producer(const qf_value *v)
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

int qf_nv_compute_consumers(const qf_value *v, const qf_node **dst, int max)
{
    return consumers_rec(v, dst, max, 0, 0);
}

bool qf_nv_in_partition(const qf_npart *p, const qf_node *node)
{
    for (int i = 0; i < p->ncompute; i++)
        if (p->compute[i] == node) return true;
    return false;
}
