/* Export of half-precision models: the float32 graph written back in the
 * model's dtypes (see "Half precision" in docs/ARCHITECTURE.md).
 *
 * qfold holds float16 / bfloat16 tensors as float32 and remembers the
 * model's dtype in qf_value.store (graph inputs, outputs, initializers,
 * folds of them). Passes create values without it (a folded BatchNorm's new
 * bias), and the lowering of internal ops makes initializers the graph never
 * had (relu6's bounds, a transposed weight), so the dtypes are settled here,
 * on the finished GraphProto, by name:
 *   - seeds: graph inputs and initializers with a store;
 *   - a node's float output is half precision when a float input is (Cast:
 *     when `to` is float16 / bfloat16);
 *   - a float32 initializer read by a node with a half-precision input
 *     becomes that dtype too (ONNX ops take one float type T), except
 *     Resize / Upsample's roi and scales (float32 by their schema);
 *   - a constant stored behind a Cast (QF_STORE_VIA_CAST) is written as the
 *     half-precision initializer "<name>_fp16" / "_bf16" and a Cast(to=FLOAT)
 *     node producing <name>, first in the node list.
 * Initializers are rounded to nearest even once, from the float32 the graph
 * holds. A graph with no store anywhere is left untouched at no cost. */
#include <stdio.h>
#include <string.h>

#include "../core/half.h"
#include "half_export.h"

typedef struct qf_hx_slot {
    const char *name;
    int code;        /* 0, QF_ONNX_FLOAT16 or QF_ONNX_BFLOAT16 */
    bool promotable; /* a float32 initializer that may take a reader's dtype */
} qf_hx_slot;

typedef struct qf_hx {
    qf_hx_slot *slots;
    size_t mask;
    void *(*alloc)(void *ctx, size_t size);
    void *ctx;
} qf_hx;

static size_t qf_hx_hash(const char *s)
{
    size_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static qf_hx_slot *qf_hx_find(qf_hx *hx, const char *name, bool add)
{
    for (size_t i = qf_hx_hash(name) & hx->mask;; i = (i + 1) & hx->mask) {
        qf_hx_slot *s = &hx->slots[i];
        if (!s->name) {
            if (!add) return NULL;
            s->name = name;
            return s;
        }
        if (strcmp(s->name, name) == 0) return s;
    }
}

static int qf_hx_get(qf_hx *hx, const char *name)
{
    if (!name || !*name) return 0;
    qf_hx_slot *s = qf_hx_find(hx, name, false);
    return s ? s->code : 0;
}

static void qf_hx_set(qf_hx *hx, const char *name, int code)
{
    if (name && *name) qf_hx_find(hx, name, true)->code = code;
}

/* Input slots that keep float32 whatever the data's type. */
static bool qf_hx_fixed_slot(const Onnx__NodeProto *np, size_t k)
{
    const char *op = np->op_type ? np->op_type : "";
    return k >= 1 && (strcmp(op, "Resize") == 0 || strcmp(op, "Upsample") == 0);
}

static int qf_hx_node_code(qf_hx *hx, const Onnx__NodeProto *np)
{
    for (size_t k = 0; k < np->n_input; k++) {
        if (qf_hx_fixed_slot(np, k)) continue;
        int c = qf_hx_get(hx, np->input[k]);
        if (c) return c;
    }
    return 0;
}

static int64_t qf_hx_cast_to(const Onnx__NodeProto *np)
{
    for (size_t a = 0; a < np->n_attribute; a++)
        if (np->attribute[a]->name && strcmp(np->attribute[a]->name, "to") == 0) return np->attribute[a]->i;
    return 0;
}

/* One sweep over the nodes in order: the code of every output. */
static void qf_hx_sweep(qf_hx *hx, const qf_graph *g, const Onnx__GraphProto *gp)
{
    for (size_t i = 0; i < gp->n_node; i++) {
        const Onnx__NodeProto *np = gp->node[i];
        int code;
        if (np->op_type && strcmp(np->op_type, "Cast") == 0) {
            int64_t to = qf_hx_cast_to(np);
            code = to == QF_ONNX_FLOAT16 || to == QF_ONNX_BFLOAT16 ? (int)to : 0;
        } else {
            code = qf_hx_node_code(hx, np);
        }
        for (size_t k = 0; k < np->n_output; k++) {
            const qf_value *v = np->output[k] && *np->output[k] ? qf_graph_find_value(g, np->output[k]) : NULL;
            /* Outputs the graph knows as non-float (Shape, ArgMax, ...) stay so;
             * those lowering made are float like their inputs. */
            qf_hx_set(hx, np->output[k], v && v->type.dtype != QF_DTYPE_F32 ? 0 : code);
        }
    }
}

static const char *qf_hx_unique(qf_hx *hx, const qf_graph *g, const char *base, const char *suffix)
{
    char buf[600];
    snprintf(buf, sizeof buf, "%.500s%s", base, suffix);
    for (unsigned k = 1; qf_hx_find(hx, buf, false) || qf_graph_find_value(g, buf) || qf_graph_find_node(g, buf);
         k++)
        snprintf(buf, sizeof buf, "%.500s%s_%u", base, suffix, k);
    size_t n = strlen(buf) + 1;
    char *s = hx->alloc(hx->ctx, n);
    if (s) memcpy(s, buf, n);
    return s;
}

/* tp's float32 raw_data rounded to `code`, in a new buffer. */
static qf_status qf_hx_narrow(qf_hx *hx, Onnx__TensorProto *tp, int code)
{
    size_t n = tp->raw_data.len / sizeof(float);
    uint8_t *dst = hx->alloc(hx->ctx, n * 2);
    if (!dst) return QF_ERR_NOMEM;
    const uint8_t *src = tp->raw_data.data;
    for (size_t i = 0; i < n; i++) {
        float f;
        memcpy(&f, src + 4 * i, 4);
        uint16_t h = qf_f32_to_half(f, code);
        dst[2 * i] = (uint8_t)(h & 0xff);
        dst[2 * i + 1] = (uint8_t)(h >> 8);
    }
    tp->raw_data.data = dst;
    tp->raw_data.len = n * 2;
    tp->data_type = code;
    return QF_OK;
}

static void qf_hx_value_info(qf_hx *hx, Onnx__ValueInfoProto *vi)
{
    int code = qf_hx_get(hx, vi->name);
    Onnx__TypeProto *tp = vi->type;
    if (code && tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE && tp->tensor_type &&
        tp->tensor_type->elem_type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT)
        tp->tensor_type->elem_type = code;
}

static bool qf_hx_any(const qf_graph *g)
{
    for (int i = 0; i < g->nvalues; i++)
        if (g->values[i] && g->values[i]->store) return true;
    return false;
}

qf_status qf_half_export(const qf_graph *g, Onnx__GraphProto *gp, void *(*alloc)(void *ctx, size_t size), void *ctx)
{
    if (!qf_hx_any(g)) return QF_OK;
    size_t count = gp->n_input + gp->n_initializer + 16;
    for (size_t i = 0; i < gp->n_node; i++) count += gp->node[i]->n_output;
    size_t cap = 64;
    while (cap < 2 * count) cap *= 2;
    qf_hx hx = {.mask = cap - 1, .alloc = alloc, .ctx = ctx};
    hx.slots = qf_calloc(cap, sizeof *hx.slots);
    if (!hx.slots) return QF_ERR_NOMEM;
    qf_status st = QF_OK;

    /* Seeds. */
    size_t nvia = 0;
    for (size_t i = 0; i < gp->n_input; i++) {
        const qf_value *v = qf_graph_find_value(g, gp->input[i]->name);
        qf_hx_set(&hx, gp->input[i]->name, v ? v->store & QF_STORE_DTYPE : 0);
    }
    for (size_t i = 0; i < gp->n_initializer; i++) {
        const Onnx__TensorProto *tp = gp->initializer[i];
        const qf_value *v = tp->name ? qf_graph_find_value(g, tp->name) : NULL;
        int store = v && tp->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT ? v->store : 0;
        /* Behind a Cast the initializer is float32 data to the nodes reading it. */
        qf_hx_set(&hx, tp->name, store & QF_STORE_VIA_CAST ? 0 : store & QF_STORE_DTYPE);
        if (tp->name && *tp->name)
            qf_hx_find(&hx, tp->name, true)->promotable =
                tp->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT && !store;
        nvia += (store & QF_STORE_VIA_CAST) && !v->is_output;
    }
    qf_hx_sweep(&hx, g, gp);
    /* Float32 initializers read next to half-precision data take its dtype. */
    for (size_t i = 0; i < gp->n_node; i++) {
        const Onnx__NodeProto *np = gp->node[i];
        int code = np->op_type && strcmp(np->op_type, "Cast") == 0 ? 0 : qf_hx_node_code(&hx, np);
        if (!code) continue;
        for (size_t k = 0; k < np->n_input; k++) {
            if (qf_hx_fixed_slot(np, k) || !np->input[k] || !*np->input[k]) continue;
            qf_hx_slot *s = qf_hx_find(&hx, np->input[k], false);
            if (s && s->promotable && !s->code) s->code = code;
        }
    }
    qf_hx_sweep(&hx, g, gp);

    /* Apply: initializers, the Casts in front, the interface types. */
    Onnx__NodeProto **nodes = NULL;
    size_t nn = 0;
    if (nvia) {
        nodes = alloc(ctx, (gp->n_node + nvia) * sizeof *nodes);
        if (!nodes) st = QF_ERR_NOMEM;
    }
    for (size_t i = 0; i < gp->n_initializer && st == QF_OK; i++) {
        Onnx__TensorProto *tp = gp->initializer[i];
        if (tp->data_type != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT || !tp->has_raw_data) continue;
        const qf_value *v = tp->name ? qf_graph_find_value(g, tp->name) : NULL;
        if (v && (v->store & QF_STORE_VIA_CAST) && !v->is_output) {
            int code = v->store & QF_STORE_DTYPE;
            const char *orig = tp->name;
            const char *hname = qf_hx_unique(&hx, g, orig, code == QF_ONNX_BFLOAT16 ? "_bf16" : "_fp16");
            const char *cname = hname ? qf_hx_unique(&hx, g, orig, "_cast") : NULL;
            Onnx__NodeProto *np = alloc(ctx, sizeof *np);
            char **ins = alloc(ctx, sizeof *ins), **outs = alloc(ctx, sizeof *outs);
            Onnx__AttributeProto **attrs = alloc(ctx, sizeof *attrs), *to = alloc(ctx, sizeof *to);
            if (!cname || !np || !ins || !outs || !attrs || !to) {
                st = QF_ERR_NOMEM;
                break;
            }
            qf_hx_set(&hx, hname, code); /* taken */
            onnx__node_proto__init(np);
            onnx__attribute_proto__init(to);
            to->name = "to";
            to->has_type = 1;
            to->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
            to->has_i = 1;
            to->i = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
            ins[0] = (char *)hname;
            outs[0] = (char *)orig;
            attrs[0] = to;
            np->name = (char *)cname;
            np->op_type = "Cast";
            np->n_input = np->n_output = np->n_attribute = 1;
            np->input = ins;
            np->output = outs;
            np->attribute = attrs;
            nodes[nn++] = np;
            tp->name = (char *)hname;
            st = qf_hx_narrow(&hx, tp, code);
        } else if (qf_hx_get(&hx, tp->name)) {
            st = qf_hx_narrow(&hx, tp, qf_hx_get(&hx, tp->name));
        }
    }
    if (st == QF_OK && nvia) {
        for (size_t i = 0; i < gp->n_node; i++) nodes[nn++] = gp->node[i];
        gp->node = nodes;
        gp->n_node = nn;
    }
    if (st == QF_OK) {
        for (size_t i = 0; i < gp->n_input; i++) qf_hx_value_info(&hx, gp->input[i]);
        for (size_t i = 0; i < gp->n_output; i++) qf_hx_value_info(&hx, gp->output[i]);
        for (size_t i = 0; i < gp->n_value_info; i++) qf_hx_value_info(&hx, gp->value_info[i]);
    }
    qf_free(hx.slots);
    return st;
}
