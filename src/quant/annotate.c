/* Annotation: a qspec for every value, by each op's pattern (its row,
 * op_quant.c: the Neutron quantizer's patterns.py as data) for the ops the
 * profile quantizes (profile.c).
 *
 *      x ──Conv(W, b)──▶ y ──Relu──▶ z ──MaxPool──▶ p ──Add(q)──▶ s
 *   x: observe   W: weight (per channel, axis 0)   b: bias = s(x)·s(W)
 *   y: float (fused: no quantization between Conv and Relu)
 *   z: observe   p: share(z)   q: observe   s: observe
 *
 * One walk in topological order: a node's pattern decides its output's
 * qspec and asks for its inputs to be quantized (an input already annotated
 * by its producer keeps its qspec; one produced by an op left in float gets
 * its own observer). Shared qparams form groups (union-find over value ids):
 * the group's observer sees every member's tensors, or the group has fixed
 * qparams (its one fixed member's: a group grows only by members annotated
 * for the first time).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "op_quant.h"
#include "qfold/quant.h"
#include "qfold/schema.h"

typedef struct ann {
    const qf_graph *g;
    const qf_quant_profile *p;
    qf_quant_annotation *a;
    bool *fused; /* by node id: an activation whose producer conv/linear fused it, or (QAT) its BN */
    bool qat;    /* QAT: a conv / linear's BatchNorm belongs to its pattern */
    const qf_quant_annotate_options *o;
    bool *excluded; /* by node id: kept in float (--exclude) */
} ann;

uint32_t qf_quant_group(qf_quant_annotation *a, uint32_t v)
{
    uint32_t r = v;
    while (a->parent[r] != r) r = a->parent[r];
    while (a->parent[v] != r) {
        uint32_t next = a->parent[v];
        a->parent[v] = r;
        v = next;
    }
    return r;
}

static qf_status ann_skip(ann *c, const qf_node *n, const char *reason)
{
    qf_quant_annotation *a = c->a;
    if (a->nskips == a->cap_skips) {
        int cap = a->cap_skips ? a->cap_skips * 2 : 16;
        qf_quant_skip *s = qf_realloc(a->skips, sizeof *s * (size_t)cap);
        if (!s) return QF_ERR_NOMEM;
        a->skips = s;
        a->cap_skips = cap;
    }
    a->skips[a->nskips++] = (qf_quant_skip){n, reason};
    return QF_OK;
}

static bool is_f32(const qf_value *v) { return v && v->type.dtype == QF_DTYPE_F32; }

/* A float32 constant tensor (a weight or bias the int8 model can hold). */
static bool is_f32_const(const qf_value *v) { return is_f32(v) && qf_value_is_const(v); }

/* How n is quantized: its row's pattern, when the profile takes its op. */
static qf_qpattern pattern_of(const ann *c, const qf_node *n)
{
    if (c->excluded[n->id]) return QF_QPAT_NONE;
    return qf_quant_profile_takes(c->p, n->op) ? qf_op_quant_get(n->op)->pattern : QF_QPAT_NONE;
}

static void set_spec(ann *c, const qf_value *v, qf_qspec s)
{
    if (c->a->spec[v->id].kind == QF_QSPEC_FLOAT && s.kind != QF_QSPEC_FLOAT) c->a->nquantized++;
    c->a->spec[v->id] = s;
}

static void observe(ann *c, const qf_value *v)
{
    set_spec(c, v, (qf_qspec){.kind = QF_QSPEC_OBSERVE, .format = c->p->activation, .axis = -1});
}

/* Ask for v (an input of an annotated node) to be quantized: false when it
 * cannot be (not float32). */
static bool want_quantized(ann *c, const qf_value *v)
{
    if (!is_f32(v)) return false;
    if (c->a->spec[v->id].kind == QF_QSPEC_FLOAT) observe(c, v);
    return true;
}

/* out (a node's output, annotated for the first time) takes in's qparams:
 * it joins in's group. Groups only grow by such fresh members, so a group
 * holds at most one fixed member (its first). */
static const qf_qformat *group_format(ann *c, uint32_t v);

static void share(ann *c, const qf_value *out, const qf_value *in)
{
    const qf_qformat *f = group_format(c, in->id);
    set_spec(c, out,
             (qf_qspec){.kind = QF_QSPEC_SHARE, .format = f ? *f : c->p->activation, .axis = -1, .share = in->id});
    c->a->parent[qf_quant_group(c->a, out->id)] = qf_quant_group(c->a, in->id);
}

/* Relu, relu6, or Clip with a constant min of 0: the ReLU range that an int8
 * conv/linear can clamp to without a quantization step in between. Without
 * the profile's fuse_any_clip only the ranges of RELU and RELU6 (a Clip max
 * of 6 or none), the fused activations of TFLite's and the Neutron
 * converter's conv: a conv fused with another clamp has no form there. */
static bool relu_range(const ann *c, const qf_node *n)
{
    if (n->op == QF_OP_RELU || n->op == QF_OP_RELU6) return true;
    if (n->op != QF_OP_CLIP || n->ninputs < 2 || !n->inputs[1] || !qf_value_is_const(n->inputs[1])) return false;
    const qf_value *m = n->inputs[1];
    if (qf_tensor_numel(&m->type) != 1 || qf_tensor_get_f64(&m->type, 0) != 0.0) return false;
    if (c->p->fuse_any_clip) return true;
    const qf_value *mx = n->ninputs > 2 ? n->inputs[2] : NULL;
    if (!mx) return true;
    if (!qf_value_is_const(mx) || qf_tensor_numel(&mx->type) != 1) return false;
    const double hi = qf_tensor_get_f64(&mx->type, 0);
    return hi == 6.0 || (isinf(hi) && hi > 0);
}

/* The qparams of v's group when it has a fixed member (a group holds at
 * most one: annotation joins two fixed groups only when theirs are the
 * same), else NULL. */
static const qf_qparams *group_fixed(ann *c, uint32_t v)
{
    qf_quant_annotation *a = c->a;
    const uint32_t r = qf_quant_group(a, v);
    for (int k = 0; k < a->nvalues; k++)
        if (a->spec[k].kind == QF_QSPEC_FIXED && qf_quant_group(a, (uint32_t)k) == r) return &a->spec[k].fixed;
    return NULL;
}

/* The format every observed / shared member of v's group carries
 * (calibration reads one of them), or NULL for a group without one. */
static const qf_qformat *group_format(ann *c, uint32_t v)
{
    qf_quant_annotation *a = c->a;
    const uint32_t r = qf_quant_group(a, v);
    for (int k = 0; k < a->nvalues; k++) {
        const qf_qspec_kind kind = a->spec[k].kind;
        if ((kind == QF_QSPEC_OBSERVE || kind == QF_QSPEC_SHARE) && qf_quant_group(a, (uint32_t)k) == r)
            return &a->spec[k].format;
    }
    return NULL;
}

static void group_set_format(ann *c, uint32_t v, qf_qformat f)
{
    qf_quant_annotation *a = c->a;
    const uint32_t r = qf_quant_group(a, v);
    for (int k = 0; k < a->nvalues; k++) {
        const qf_qspec_kind kind = a->spec[k].kind;
        if ((kind == QF_QSPEC_OBSERVE || kind == QF_QSPEC_SHARE) && qf_quant_group(a, (uint32_t)k) == r)
            a->spec[k].format = f;
    }
}

/* Join the groups of u and v (the caller checked that at most one of them,
 * or two of the same qparams, is fixed): a fixed group's root stays the
 * root, and a symmetric format (a MatMul's input) wins over the affine one,
 * so that the joined group is observed one way. */
static void join(ann *c, const qf_value *u, const qf_value *v)
{
    qf_quant_annotation *a = c->a;
    const uint32_t ru = qf_quant_group(a, u->id), rv = qf_quant_group(a, v->id);
    if (ru == rv) return;
    const qf_qformat *fu = group_format(c, ru), *fv = group_format(c, rv);
    qf_qformat f = fu ? *fu : fv ? *fv : c->p->activation;
    if (fv && fv->scheme == QF_QSCHEME_SYMMETRIC) f = *fv;
    if (group_fixed(c, rv)) a->parent[ru] = rv;
    else a->parent[rv] = ru;
    if (fu || fv) group_set_format(c, ru, f);
}

/* Concat: the output shares the first input's qparams, the other inputs
 * keep theirs (the int8 concat requantizes them); with the profile's
 * concat_shares every input joins the output's group instead, one observer
 * over all of them (the union of their ranges, as the Neutron quantizer's
 * SharedQuantizationSpec makes one observer of every edge), so the int8
 * concat copies. A fixed-qparams input (a Sigmoid's output) keeps its own
 * and is requantized: its range fixed on the others would clip them; the
 * group is then the observed inputs' (the fixed input's alone when there
 * is no other, and several fixed inputs join when their qparams are one). */
static qf_status ann_concat(ann *c, const qf_node *n)
{
    const qf_value *y = n->outputs[0];
    if (!is_f32(y)) return ann_skip(c, n, "input is not float32");
    for (int i = 0; i < n->ninputs; i++)
        if (!is_f32(n->inputs[i])) return ann_skip(c, n, "input is not float32");
    for (int i = 0; i < n->ninputs; i++) want_quantized(c, n->inputs[i]);
    if (!c->p->concat_shares) {
        share(c, y, n->inputs[0]);
        return QF_OK;
    }
    /* the group: the first observed input's, else the first fixed one's */
    const qf_value *base = NULL;
    for (int i = 0; i < n->ninputs && !base; i++)
        if (!group_fixed(c, n->inputs[i]->id)) base = n->inputs[i];
    if (!base) base = n->inputs[0];
    const qf_qparams *bf = group_fixed(c, base->id);
    share(c, y, base);
    for (int i = 0; i < n->ninputs; i++) {
        const qf_qspec_kind kind = c->a->spec[n->inputs[i]->id].kind;
        if (kind == QF_QSPEC_WEIGHT || kind == QF_QSPEC_BIAS) continue; /* a conv's constant: its own */
        const qf_qparams *f = group_fixed(c, n->inputs[i]->id);
        if (f && !(bf && f->scale == bf->scale && f->zero_point == bf->zero_point)) continue;
        join(c, base, n->inputs[i]);
    }
    return QF_OK;
}

/* A MatMul of two activations with the profile's matmul_symmetric: each
 * input's group observed per-tensor symmetric in [qmin + 1, qmax] with a
 * min/max observer (the Neutron quantizer's BMM inputs; its converter
 * requires zero points 0). A group is a value's qparams wherever it is
 * read: the producer's output takes them (the quantizer requantizes the
 * edge instead; the value carries one set here). A fixed group keeps its
 * qparams (a Tanh's have zero point 0; a Softmax's or Sigmoid's -128 would
 * need a requantization on the edge: see docs). */
static void matmul_inputs_symmetric(ann *c, const qf_node *n)
{
    qf_qformat f = c->p->activation;
    f.scheme = QF_QSCHEME_SYMMETRIC;
    f.qmin = c->p->activation.qmin + 1;
    f.per_channel = false;
    f.observer = QF_OBSERVER_MIN_MAX;
    for (int i = 0; i < 2; i++)
        if (!group_fixed(c, n->inputs[i]->id)) group_set_format(c, n->inputs[i]->id, f);
}

/* The output of a conv / linear: fused into the ReLU that is its only
 * reader (left float, the ReLU's output observed), or observed. In QAT a
 * BatchNorm that is its only reader belongs to the pattern too (no
 * quantization between the op and BN: the BN's output is the pattern's). */
static void producer_output(ann *c, const qf_node *n)
{
    const qf_value *y = n->outputs[0];
    if (c->qat && y->nuses == 1 && !y->is_output && y->uses[0].slot == 0 &&
        y->uses[0].node->op == QF_OP_BATCH_NORM && !c->excluded[y->uses[0].node->id]) {
        c->fused[y->uses[0].node->id] = true;
        y = y->uses[0].node->outputs[0];
    }
    if (c->p->fuse_activation && y->nuses == 1 && !y->is_output && y->uses[0].slot == 0 &&
        pattern_of(c, y->uses[0].node) == QF_QPAT_ACTIVATION && relu_range(c, y->uses[0].node)) {
        c->fused[y->uses[0].node->id] = true;
        return;
    }
    observe(c, y);
}

static qf_qspec weight_spec(const qf_qformat *f, int axis)
{
    return (qf_qspec){.kind = QF_QSPEC_WEIGHT, .format = *f, .axis = f->per_channel ? axis : -1};
}

/* Conv / ConvTranspose / linear / Gemm / MatMul with a constant weight w
 * whose output channels lie on `axis`, optional constant bias b. */
static qf_status ann_weighted(ann *c, const qf_node *n, const qf_value *w, int axis, const qf_value *b,
                              const qf_qformat *f)
{
    const qf_value *x = n->inputs[0];
    if (!is_f32(x)) return ann_skip(c, n, "input is not float32");
    if (!is_f32_const(w)) return ann_skip(c, n, "weight is not a float32 constant");
    if (b && !is_f32_const(b)) return ann_skip(c, n, "bias is not a float32 constant");
    if (c->a->spec[w->id].kind != QF_QSPEC_FLOAT) return ann_skip(c, n, "weight is shared with another node");
    /* A bias's int32 scale is s_x * s_W of its own node: one read by two
     * nodes cannot serve both (quant_annotate gives each its own copy first). */
    if (b && c->a->spec[b->id].kind != QF_QSPEC_FLOAT) return ann_skip(c, n, "bias is shared with another node");
    want_quantized(c, x);
    set_spec(c, w, weight_spec(f, axis));
    if (b)
        set_spec(c, b, (qf_qspec){.kind = QF_QSPEC_BIAS, .format = {QF_QSCHEME_SYMMETRIC, INT32_MIN + 1, INT32_MAX,
                                                                    f->per_channel, QF_OBSERVER_MIN_MAX},
                                  .axis = f->per_channel ? 0 : -1, .bias_input = x->id, .bias_weight = w->id});
    producer_output(c, n);
    return QF_OK;
}

/* The input at the row's slot s (-1 or absent: NULL). */
static const qf_value *slot_input(const qf_node *n, int s) { return s >= 0 && s < n->ninputs ? n->inputs[s] : NULL; }

/* A conv / linear: its row names the weight and bias slots and the weight's
 * output-channel axis. */
static qf_status ann_conv_linear(ann *c, const qf_node *n, const qf_op_quant *r)
{
    const qf_qformat *f = r->pattern == QF_QPAT_CONV ? &c->p->conv_weight : &c->p->linear_weight;
    const qf_value *w = slot_input(n, r->weight_slot), *b = slot_input(n, r->bias_slot);
    const int axis = qf_op_quant_weight_axis(n);
    switch (n->op) {
    case QF_OP_GEMM:
        if (qf_node_attr_int(n, "transA", 0) != 0 || qf_node_attr_float(n, "alpha", 1.0f) != 1.0f ||
            qf_node_attr_float(n, "beta", 1.0f) != 1.0f)
            return ann_skip(c, n, "Gemm with transA, alpha or beta is not a linear layer");
        if (b && b->type.ndim != 1) return ann_skip(c, n, "Gemm bias C is not a vector");
        break;
    case QF_OP_MATMUL:
        if (!qf_value_is_const(w)) {
            /* Two activations: both inputs and the output observed. */
            if (!want_quantized(c, n->inputs[0]) || !want_quantized(c, n->inputs[1]))
                return ann_skip(c, n, "input is not float32");
            if (c->p->matmul_symmetric) matmul_inputs_symmetric(c, n);
            observe(c, n->outputs[0]);
            return QF_OK;
        }
        if (w->type.ndim != 2) return ann_skip(c, n, "MatMul weight is not a matrix");
        break;
    default: break;
    }
    return ann_weighted(c, n, w, axis, b, f);
}

static qf_status ann_share(ann *c, const qf_node *n, const qf_value *x, const qf_value *y)
{
    if (!is_f32(y) || !want_quantized(c, x)) return ann_skip(c, n, "input is not float32");
    /* every float output (a Split's parts; not a MaxPool's int64 indices) */
    for (int k = 0; k < n->noutputs; k++)
        if (n->outputs[k] && is_f32(n->outputs[k])) share(c, n->outputs[k], x);
    return QF_OK;
}

/* Max / Min: every input and the output in one group (the Neutron
 * quantizer's identical qparams), so that the int8 op is an exact integer
 * max / min. Groups are joined as they are; a group with fixed qparams
 * (a Sigmoid's output, ...) joins only groups without, and two fixed groups
 * only when their qparams are the same: else the node stays float. */
static qf_status ann_same(ann *c, const qf_node *n)
{
    qf_quant_annotation *a = c->a;
    const qf_value *y = n->outputs[0];
    if (!is_f32(y)) return ann_skip(c, n, "input is not float32");
    for (int i = 0; i < n->ninputs; i++)
        if (!is_f32(n->inputs[i])) return ann_skip(c, n, "input is not float32");
    /* the one fixed member's qparams, if any group has one */
    const qf_qparams *fixed = NULL;
    for (int i = 0; i < n->ninputs; i++) {
        const uint32_t r = qf_quant_group(a, n->inputs[i]->id);
        for (int v = 0; v < a->nvalues; v++) {
            if (a->spec[v].kind != QF_QSPEC_FIXED || qf_quant_group(a, (uint32_t)v) != r) continue;
            if (fixed && (fixed->scale != a->spec[v].fixed.scale || fixed->zero_point != a->spec[v].fixed.zero_point))
                return ann_skip(c, n, "inputs have different fixed qparams");
            fixed = &a->spec[v].fixed;
        }
    }
    if (fixed)
        for (int i = 0; i < n->ninputs; i++) {
            const qf_value *v = n->inputs[i];
            if (a->spec[v->id].kind == QF_QSPEC_FLOAT) continue; /* joins the fixed group fresh */
            bool has = false;
            const uint32_t r = qf_quant_group(a, v->id);
            for (int k = 0; k < a->nvalues && !has; k++)
                has = a->spec[k].kind == QF_QSPEC_FIXED && qf_quant_group(a, (uint32_t)k) == r;
            if (!has) return ann_skip(c, n, "an input with fixed qparams and one observed");
        }
    for (int i = 0; i < n->ninputs; i++) want_quantized(c, n->inputs[i]);
    share(c, y, n->inputs[0]);
    for (int i = 1; i < n->ninputs; i++) join(c, n->inputs[0], n->inputs[i]);
    return QF_OK;
}

static qf_status ann_node(ann *c, const qf_node *n)
{
    const qf_op_quant *r = qf_op_quant_get(n->op);
    const qf_value *x = n->ninputs > 0 ? n->inputs[0] : NULL;
    const qf_value *y = n->noutputs > 0 ? n->outputs[0] : NULL;
    if (n->op == QF_OP_BATCH_NORM && c->fused[n->id]) return QF_OK; /* QAT: its producer's pattern */
    if (c->excluded[n->id]) return ann_skip(c, n, QF_QUANT_EXCLUDED);
    switch (pattern_of(c, n)) {
    case QF_QPAT_NONE: {
        /* Only ops on float tensors are worth a line: shape arithmetic is not. */
        bool any = false;
        for (int i = 0; i < n->noutputs; i++) any |= is_f32(n->outputs[i]);
        return any ? ann_skip(c, n, "the profile has no int8 form for this op") : QF_OK;
    }
    case QF_QPAT_CONV:
    case QF_QPAT_LINEAR:
        return ann_conv_linear(c, n, r);
    case QF_QPAT_ACTIVATION:
        if (c->fused[n->id]) {
            observe(c, y);
            return QF_OK;
        }
        /* Not after a conv / linear: a ReLU on int8 values is exact with
         * its input's qparams, so it shares them. */
        return ann_share(c, n, x, y);
    case QF_QPAT_SHARE:
        return ann_share(c, n, x, y);
    case QF_QPAT_CONCAT:
        return ann_concat(c, n);
    case QF_QPAT_FIXED:
        if (!is_f32(y) || !want_quantized(c, x)) return ann_skip(c, n, "input is not float32");
        set_spec(c, y, (qf_qspec){.kind = QF_QSPEC_FIXED, .format = c->p->activation, .axis = -1, .fixed = r->fixed});
        return QF_OK;
    case QF_QPAT_BINARY:
        if (!is_f32(y) || !want_quantized(c, x) || !want_quantized(c, n->inputs[1]))
            return ann_skip(c, n, "input is not float32");
        observe(c, y);
        return QF_OK;
    case QF_QPAT_REDUCTION:
        if (!is_f32(y) || !want_quantized(c, x)) return ann_skip(c, n, "input is not float32");
        if (c->p->reduction_shares) share(c, y, x);
        else observe(c, y);
        return QF_OK;
    case QF_QPAT_OWN:
        if (!is_f32(y) || !want_quantized(c, x)) return ann_skip(c, n, "input is not float32");
        observe(c, y);
        return QF_OK;
    case QF_QPAT_SAME:
        return ann_same(c, n);
    case QF_QPAT_PRELU: {
        const qf_value *s = n->ninputs > 1 ? n->inputs[1] : NULL;
        if (!is_f32(y) || !is_f32(x)) return ann_skip(c, n, "input is not float32");
        if (!is_f32_const(s)) return ann_skip(c, n, "slope is not a float32 constant");
        if (c->a->spec[s->id].kind != QF_QSPEC_FLOAT) return ann_skip(c, n, "slope is shared with another node");
        want_quantized(c, x);
        /* TFLite's int8 PRELU takes one scale and zero point for alpha */
        qf_qformat f = c->p->linear_weight;
        f.per_channel = false;
        set_spec(c, s, weight_spec(&f, -1));
        observe(c, y);
        return QF_OK;
    }
    }
    return QF_OK;
}

void qf_quant_annotation_free(qf_quant_annotation *a)
{
    if (!a) return;
    qf_free(a->spec);
    qf_free(a->parent);
    qf_free(a->skips);
    qf_free(a);
}

static bool exclude_match(const qf_node *n, const char *e) { return !strcmp(n->name, e) || !strcmp(qf_op_label(n), e); }

/* excluded[n->id] for every node an entry names (by name or op type); an
 * entry that names none is an error. */
static qf_status mark_excluded(const qf_graph *g, const qf_quant_annotate_options *o, bool *excluded)
{
    for (int i = 0; i < o->nexclude; i++) {
        bool any = false;
        for (const qf_node *n = g->first; n; n = n->next)
            if (exclude_match(n, o->exclude[i])) any = excluded[n->id] = true;
        if (!any)
            return qf_error(QF_ERR_INVALID,
                            "exclude: '%s' is neither the name nor the op type of a node of the graph being "
                            "quantized (after the folds and the target's passes)",
                            o->exclude[i]);
    }
    return QF_OK;
}

static qf_status annotate(const qf_graph *g, const qf_quant_profile *p, const qf_quant_annotate_options *o,
                          qf_quant_annotation **out)
{
    *out = NULL;
    const bool qat = o->qat;
    qf_quant_annotation *a = qf_calloc(1, sizeof *a);
    if (!a) return QF_ERR_NOMEM;
    size_t nv = (size_t)(g->nvalues ? g->nvalues : 1);
    a->nvalues = g->nvalues;
    a->spec = qf_calloc(nv, sizeof *a->spec);
    a->parent = qf_malloc(sizeof *a->parent * nv);
    bool *fused = qf_calloc((size_t)g->next_node_id + 1, sizeof *fused);
    bool *excluded = qf_calloc((size_t)g->next_node_id + 1, sizeof *excluded);
    if (!a->spec || !a->parent || !fused || !excluded) {
        qf_free(fused);
        qf_free(excluded);
        qf_quant_annotation_free(a);
        return QF_ERR_NOMEM;
    }
    for (size_t i = 0; i < nv; i++) a->parent[i] = (uint32_t)i;
    ann c = {g, p, a, fused, qat, o, excluded};
    qf_status st = mark_excluded(g, o, excluded);
    for (const qf_node *n = g->first; n && st == QF_OK; n = n->next) st = ann_node(&c, n);
    qf_free(fused);
    qf_free(excluded);
    if (st != QF_OK) {
        qf_quant_annotation_free(a);
        return st;
    }
    *out = a;
    return QF_OK;
}

qf_status qf_quant_annotate(const qf_graph *g, const qf_quant_profile *p, qf_quant_annotation **out)
{
    return annotate(g, p, &(qf_quant_annotate_options){0}, out);
}

qf_status qf_quant_annotate_qat(const qf_graph *g, const qf_quant_profile *p, qf_quant_annotation **out)
{
    return annotate(g, p, &(qf_quant_annotate_options){.qat = true}, out);
}

qf_status qf_quant_annotate_ex(const qf_graph *g, const qf_quant_profile *p, const qf_quant_annotate_options *o,
                               qf_quant_annotation **out)
{
    return annotate(g, p, o ? o : &(qf_quant_annotate_options){0}, out);
}

void qf_quant_exclude_free(char **names, int *from, int count)
{
    for (int i = 0; names && i < count; i++) qf_free(names[i]);
    qf_free(names);
    qf_free(from);
}

qf_status qf_quant_exclude_resolve(const qf_graph *g, const char *const *entries, int nentries, const char *model,
                                   char ***names, int **from, int *count)
{
    *names = NULL;
    *count = 0;
    if (from) *from = NULL;
    size_t cap = (size_t)g->nnodes * (size_t)(nentries > 0 ? nentries : 1) + 1;
    char **nm = qf_calloc(cap, sizeof *nm);
    int *fr = qf_calloc(cap, sizeof *fr);
    int k = 0;
    qf_status st = nm && fr ? QF_OK : QF_ERR_NOMEM;
    for (int i = 0; i < nentries && st == QF_OK; i++) {
        bool any = false;
        for (const qf_node *n = g->first; n && st == QF_OK; n = n->next) {
            if (!exclude_match(n, entries[i])) continue;
            any = true;
            fr[k] = i;
            if (!(nm[k++] = qf_strdup(n->name))) st = QF_ERR_NOMEM;
        }
        if (st == QF_OK && !any)
            st = qf_error(QF_ERR_INVALID, "exclude: '%s' is neither the name nor the op type of a node of %s",
                          entries[i], model ? model : "the model");
    }
    if (st != QF_OK) {
        qf_quant_exclude_free(nm, fr, k);
        return st;
    }
    *names = nm;
    *count = k;
    if (from) *from = fr;
    else qf_free(fr);
    return QF_OK;
}

static const char *observer_name(qf_observer_kind k)
{
    switch (k) {
    case QF_OBSERVER_MIN_MAX: return "minmax";
    case QF_OBSERVER_MOVING_AVERAGE: return "moving-average";
    case QF_OBSERVER_PER_CHANNEL: return "per-channel";
    case QF_OBSERVER_HISTOGRAM: return "histogram";
    }
    return "?";
}

void qf_quant_annotation_print(const qf_quant_annotation *a, const qf_graph *g, FILE *f)
{
    for (int i = 0; i < a->nvalues; i++) {
        const qf_value *v = g->values[i];
        const qf_qspec *s = &a->spec[i];
        if (!v || s->kind == QF_QSPEC_FLOAT) continue;
        const char *sch = s->format.scheme == QF_QSCHEME_SYMMETRIC ? "symmetric" : "affine";
        fprintf(f, "%s: ", v->name);
        switch (s->kind) {
        case QF_QSPEC_OBSERVE:
            fprintf(f, "observe %s %s [%d, %d]\n", observer_name(s->format.observer), sch, (int)s->format.qmin,
                    (int)s->format.qmax);
            break;
        case QF_QSPEC_SHARE: fprintf(f, "share %s\n", g->values[s->share]->name); break;
        case QF_QSPEC_FIXED: fprintf(f, "fixed %.9g %d\n", (double)s->fixed.scale, (int)s->fixed.zero_point); break;
        case QF_QSPEC_WEIGHT:
            if (s->axis >= 0) fprintf(f, "weight per-channel axis %d %s [%d, %d]\n", s->axis, sch, (int)s->format.qmin, (int)s->format.qmax);
            else fprintf(f, "weight per-tensor %s [%d, %d]\n", sch, (int)s->format.qmin, (int)s->format.qmax);
            break;
        case QF_QSPEC_BIAS:
            fprintf(f, "bias int32 = s(%s) * s(%s)\n", g->values[s->bias_input]->name, g->values[s->bias_weight]->name);
            break;
        case QF_QSPEC_FLOAT: break;
        }
    }
    for (int i = 0; i < a->nskips; i++)
        fprintf(f, "float %s (%s): %s\n", a->skips[i].node->name, qf_op_name(a->skips[i].node->op), a->skips[i].reason);
}

/* --- the quant_annotate pass -------------------------------------------------------- */

/* Exporters share identical initializers (torch: every zero-initialized
 * bias of a model can be one tensor); each conv / linear gets its own bias
 * constant, as its int32 scale is its own. */
static qf_status unshare_biases(qf_graph *g, qf_pass_ctx *ctx, const qf_quant_profile *p, bool *changed)
{
    for (qf_node *n = g->first; n; n = n->next) {
        const qf_op_quant *r = qf_op_quant_get(n->op);
        if (!qf_quant_profile_takes(p, n->op) || (r->pattern != QF_QPAT_CONV && r->pattern != QF_QPAT_LINEAR) ||
            r->bias_slot < 0 || r->bias_slot >= n->ninputs)
            continue;
        const int slot = r->bias_slot;
        qf_value *b = n->inputs[slot];
        if (!is_f32_const(b) || b->nuses < 2) continue;
        qf_tensor t;
        QF_TRY(qf_tensor_copy(&t, &b->type));
        char name[512];
        snprintf(name, sizeof name, "%s_%s", b->name, n->name);
        qf_value *copy = qf_graph_add_constant(g, name, b->kind, &t);
        if (!copy) {
            qf_tensor_free(&t);
            return QF_ERR_NOMEM;
        }
        QF_TRY(qf_node_set_input(g, n, slot, copy));
        qf_pass_rewrite(ctx, n, NULL, "own copy of bias '%s' (shared with another node)", b->name);
        *changed = true;
    }
    return QF_OK;
}

static qf_status quant_annotate_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    *changed = false;
    qf_quant_session *s = qf_pass_user(ctx);
    if (!s || !s->profile)
        return qf_error(QF_ERR_INVALID, "pass 'quant_annotate' needs a quantization session (qfold quantize)");
    QF_TRY(unshare_biases(g, ctx, s->profile, changed));
    qf_quant_annotation_free(s->annotation);
    s->annotation = NULL;
    QF_TRY(qf_quant_annotate_ex(g, s->profile,
                                &(qf_quant_annotate_options){.exclude = s->exclude, .nexclude = s->nexclude},
                                &s->annotation));
    for (int i = 0; i < s->annotation->nskips; i++)
        qf_pass_skip(ctx, s->annotation->skips[i].node, "left in float: %s", s->annotation->skips[i].reason);
    return QF_OK;
}

const qf_pass qf_pass_quant_annotate = {
    .name = "quant_annotate",
    .summary = "quantizer: give every value its int8 spec by the target's patterns (shared biases copied)",
    .run = quant_annotate_run,
};
