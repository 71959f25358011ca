/* ONNX export: qf_graph -> ModelProto -> streamed to a temporary file ->
 * renamed into place, or into one buffer in memory (qf_onnx_save_buffer:
 * the same bytes, by the same code, without external data).
 *
 * The protobuf structs are built in a scratch arena and point at the
 * graph's own names and tensor payloads; the weights go from the graph to
 * the file without another copy in memory (qf_ex_write). Internal ops are
 * lowered here:
 *   linear(x, W[out, in], b)  rank-2 x: Gemm(x, W, b, transB=1)
 *                             else:     MatMul(x, W^T) [-> Add(b)]
 *   relu6(x)                  Clip(x, 0, 6) with scalar initializers
 */
#include <stdio.h>
#include <string.h>

#include "../core/arena.h"
#include "external_data.h"
#include "half_export.h"
#include "onnx_keep.h"
#include "onnx_opset.h"
#include "onnx_proto.h"

typedef struct qf_transposed {
    uint32_t id;      /* the weight's value id */
    const char *name; /* its transposed copy (initializer or Transpose output) */
} qf_transposed;

typedef struct qf_export {
    const qf_graph *g;
    int64_t opset; /* written (qf_onnx_opset_target) */
    qf_arena arena; /* every protobuf struct and generated name */
    Onnx__NodeProto **nodes;
    size_t nnodes, cap_nodes;
    Onnx__TensorProto **extra; /* initializers made by lowering */
    size_t nextra, cap_extra;
    const char **gen; /* generated names (values and nodes) */
    size_t ngen, cap_gen;
    qf_transposed *tcache;
    size_t ntcache, cap_tcache;
    bool *used;                              /* value id -> read by an exported node */
    const char *relu6_min[2], *relu6_max[2]; /* [0] float32, [1] float64 */
} qf_export;

static void *qf_ex_alloc(qf_export *ex, size_t size)
{
    void *p = qf_arena_alloc(&ex->arena, size ? size : 1);
    if (!p) qf_error(QF_ERR_NOMEM, "out of memory");
    return p;
}

static qf_status qf_ex_push(void **arr, size_t *n, size_t *cap, size_t elem, const void *item)
{
    if (*n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 16;
        void *p = qf_realloc(*arr, ncap * elem);
        if (!p) return QF_ERR_NOMEM;
        *arr = p;
        *cap = ncap;
    }
    memcpy((char *)*arr + *n * elem, item, elem);
    (*n)++;
    return QF_OK;
}

static bool qf_ex_taken(const qf_export *ex, const char *name)
{
    if (qf_graph_find_value(ex->g, name) || qf_graph_find_node(ex->g, name)) return true;
    for (size_t i = 0; i < ex->ngen; i++)
        if (strcmp(ex->gen[i], name) == 0) return true;
    return false;
}

/* A name used by no value, node or earlier generated name. */
static const char *qf_ex_unique(qf_export *ex, const char *base)
{
    char buf[600];
    snprintf(buf, sizeof buf, "%.560s", base);
    for (unsigned k = 1; qf_ex_taken(ex, buf); k++) snprintf(buf, sizeof buf, "%.560s_%u", base, k);
    char *s = qf_arena_strdup(&ex->arena, buf);
    if (!s || qf_ex_push((void **)&ex->gen, &ex->ngen, &ex->cap_gen, sizeof *ex->gen, &s)) {
        qf_error(QF_ERR_NOMEM, "out of memory");
        return NULL;
    }
    return s;
}

/* --- tensors, types, attributes ------------------------------------------------ */

static Onnx__TensorProto *qf_ex_tensor(qf_export *ex, const char *name, const qf_tensor *t)
{
    Onnx__TensorProto *tp = qf_ex_alloc(ex, sizeof *tp);
    int64_t *dims = qf_ex_alloc(ex, sizeof *dims * (size_t)(t->ndim ? t->ndim : 1));
    if (!tp || !dims) return NULL;
    onnx__tensor_proto__init(tp);
    tp->name = name && *name ? (char *)name : NULL;
    tp->has_data_type = 1;
    tp->data_type = (int32_t)t->dtype;
    for (int i = 0; i < t->ndim; i++) dims[i] = t->dims[i];
    tp->n_dims = (size_t)t->ndim;
    tp->dims = dims;
    tp->has_raw_data = 1;
    tp->raw_data.len = qf_tensor_nbytes(t);
    tp->raw_data.data = t->data;
    return tp;
}

static Onnx__ValueInfoProto *qf_ex_value_info(qf_export *ex, const qf_value *v)
{
    Onnx__ValueInfoProto *vi = qf_ex_alloc(ex, sizeof *vi);
    Onnx__TypeProto *tp = qf_ex_alloc(ex, sizeof *tp);
    Onnx__TypeProto__Tensor *tt = qf_ex_alloc(ex, sizeof *tt);
    Onnx__TensorShapeProto *sh = qf_ex_alloc(ex, sizeof *sh);
    int32_t elem = (int32_t)v->type.dtype;
    int nd = v->type.ndim;
    int64_t known[QF_MAX_DIMS];
    for (int i = 0; i < nd; i++) known[i] = v->type.dims[i];
    /* Downstream of an op qfold does not know, the model's declaration is
     * all there is (src/io/onnx_keep.c). */
    if (!qf_dtype_valid(v->type.dtype) && !qf_keep_declared_type(ex->g, v->name, &elem, &nd, known))
        return NULL; /* the caller checked */
    Onnx__TensorShapeProto__Dimension **dims =
        qf_ex_alloc(ex, sizeof *dims * (size_t)(nd ? nd : 1));
    if (!vi || !tp || !tt || !sh || !dims) return NULL;
    onnx__value_info_proto__init(vi);
    onnx__type_proto__init(tp);
    onnx__type_proto__tensor__init(tt);
    onnx__tensor_shape_proto__init(sh);
    for (int i = 0; i < nd; i++) {
        Onnx__TensorShapeProto__Dimension *d = qf_ex_alloc(ex, sizeof *d);
        if (!d) return NULL;
        onnx__tensor_shape_proto__dimension__init(d);
        bool declared;
        const char *param = qf_keep_dim_name(ex->g, v->name, nd, i, &declared);
        if (known[i] >= 0) {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            d->dim_value = known[i];
        } else if (param) {
            /* The model's own symbolic name. */
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            d->dim_param = (char *)param;
        } else if (declared) {
            /* Unknown and unnamed in the model: it stays so. */
        } else {
            /* A value the model did not declare: "N" for the leading (batch)
             * dim, "d<i>" elsewhere. */
            char buf[16];
            snprintf(buf, sizeof buf, i == 0 ? "N" : "d%d", i);
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            d->dim_param = qf_arena_strdup(&ex->arena, buf);
            if (!d->dim_param) return NULL;
        }
        dims[i] = d;
    }
    sh->n_dim = (size_t)nd;
    sh->dim = dims;
    tt->has_elem_type = 1;
    tt->elem_type = elem;
    tt->shape = sh;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    vi->name = (char *)v->name;
    vi->type = tp;
    vi->doc_string = (char *)qf_keep_value_doc(ex->g, v->name, &ex->arena);
    return vi;
}

static Onnx__AttributeProto *qf_ex_attr(qf_export *ex, const qf_attr *a)
{
    Onnx__AttributeProto *ap = qf_ex_alloc(ex, sizeof *ap);
    if (!ap) return NULL;
    onnx__attribute_proto__init(ap);
    ap->name = (char *)a->name;
    ap->has_type = 1;
    switch (a->type) {
    case QF_ATTR_INT:
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
        ap->has_i = 1;
        ap->i = a->i;
        break;
    case QF_ATTR_FLOAT:
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
        ap->has_f = 1;
        ap->f = a->f;
        break;
    case QF_ATTR_STRING:
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
        ap->has_s = 1;
        ap->s.len = strlen(a->s ? a->s : "");
        ap->s.data = (uint8_t *)(a->s ? a->s : "");
        break;
    case QF_ATTR_INTS:
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
        ap->n_ints = (size_t)a->n;
        ap->ints = a->ints;
        break;
    case QF_ATTR_FLOATS:
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS;
        ap->n_floats = (size_t)a->n;
        ap->floats = a->floats;
        break;
    case QF_ATTR_TENSOR:
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
        ap->t = qf_ex_tensor(ex, NULL, a->t);
        if (!ap->t) return NULL;
        break;
    }
    return ap;
}

/* --- nodes ------------------------------------------------------------------------ */

/* The name a node input is written with ("" for an omitted one); marks the
 * value as read, which decides the initializer list. */
static const char *qf_ex_use(qf_export *ex, const qf_value *v)
{
    if (!v) return "";
    ex->used[v->id] = true;
    return v->name;
}

/* A NodeProto with room for `nattrs` attributes, appended to the output list.
 * `in` holds input names ("" = omitted optional input). */
static Onnx__NodeProto *qf_ex_node(qf_export *ex, const char *name, const char *op_type, int nin,
                                   const char *const *in, int nout, const char *const *out,
                                   int nattrs)
{
    while (nin > 0 && !in[nin - 1][0]) nin--; /* trailing omitted inputs: just shorter */
    Onnx__NodeProto *np = qf_ex_alloc(ex, sizeof *np);
    char **ins = qf_ex_alloc(ex, sizeof *ins * (size_t)(nin ? nin : 1));
    char **outs = qf_ex_alloc(ex, sizeof *outs * (size_t)(nout ? nout : 1));
    Onnx__AttributeProto **attrs = qf_ex_alloc(ex, sizeof *attrs * (size_t)(nattrs ? nattrs : 1));
    if (!np || !ins || !outs || !attrs) return NULL;
    onnx__node_proto__init(np);
    for (int i = 0; i < nin; i++) ins[i] = (char *)in[i];
    for (int i = 0; i < nout; i++) outs[i] = (char *)out[i];
    np->name = (char *)name;
    np->op_type = (char *)op_type;
    np->n_input = (size_t)nin;
    np->input = ins;
    np->n_output = (size_t)nout;
    np->output = outs;
    np->attribute = attrs;
    if (qf_ex_push((void **)&ex->nodes, &ex->nnodes, &ex->cap_nodes, sizeof *ex->nodes, &np))
        return NULL;
    return np;
}

static qf_status qf_ex_add_attr_int(qf_export *ex, Onnx__NodeProto *np, const char *name, int64_t v)
{
    qf_attr a = {.name = name, .type = QF_ATTR_INT, .i = v};
    Onnx__AttributeProto *ap = qf_ex_attr(ex, &a);
    if (!ap) return QF_ERR_NOMEM;
    np->attribute[np->n_attribute++] = ap;
    return QF_OK;
}

static qf_status qf_ex_add_attr_ints(qf_export *ex, Onnx__NodeProto *np, const char *name,
                                     const int64_t *v, int n)
{
    int64_t *copy = qf_ex_alloc(ex, sizeof *copy * (size_t)n);
    if (!copy) return QF_ERR_NOMEM;
    memcpy(copy, v, sizeof *copy * (size_t)n);
    qf_attr a = {.name = name, .type = QF_ATTR_INTS, .ints = copy, .n = n};
    Onnx__AttributeProto *ap = qf_ex_attr(ex, &a);
    if (!ap) return QF_ERR_NOMEM;
    np->attribute[np->n_attribute++] = ap;
    return QF_OK;
}

/* A constant made by lowering: an initializer written after the graph's own. */
static qf_status qf_ex_add_initializer(qf_export *ex, const char *name, const qf_tensor *t)
{
    Onnx__TensorProto *tp = qf_ex_tensor(ex, name, t);
    if (!tp) return QF_ERR_NOMEM;
    return qf_ex_push((void **)&ex->extra, &ex->nextra, &ex->cap_extra, sizeof *ex->extra, &tp);
}

/* The name of W^T for a linear weight: a transposed initializer when W is a
 * constant, else the output of a Transpose node. One per weight. */
static qf_status qf_ex_transposed(qf_export *ex, const qf_node *n, const qf_value *w,
                                  const char **out)
{
    for (size_t i = 0; i < ex->ntcache; i++) {
        if (ex->tcache[i].id == w->id) {
            *out = ex->tcache[i].name;
            return QF_OK;
        }
    }
    if (w->type.ndim != 2)
        return qf_error(QF_ERR_INVALID, "node '%s' (linear): weight '%s' has rank %d, expected 2",
                        n->name, w->name, w->type.ndim);
    char base[600];
    snprintf(base, sizeof base, "%.560s_T", w->name);
    const char *name = qf_ex_unique(ex, base);
    if (!name) return QF_ERR_NOMEM;
    if (qf_value_is_const(w)) {
        int64_t rows = w->type.dims[0], cols = w->type.dims[1];
        size_t es = qf_dtype_size(w->type.dtype);
        qf_tensor t = {.dtype = w->type.dtype, .ndim = 2, .dims = {cols, rows}};
        t.data = qf_ex_alloc(ex, qf_tensor_nbytes(&t));
        if (!t.data) return QF_ERR_NOMEM;
        const unsigned char *src = w->type.data;
        if (w->deferred) {
            /* Left in the model file: read (scaled) into the export's memory. */
            unsigned char *p = qf_ex_alloc(ex, qf_tensor_nbytes(&t));
            if (!p) return QF_ERR_NOMEM;
            QF_TRY(qf_value_read(ex->g, w, 0, p, qf_tensor_nbytes(&t), true));
            src = p;
        }
        unsigned char *dst = t.data;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++)
                memcpy(dst + ((size_t)c * (size_t)rows + (size_t)r) * es,
                       src + ((size_t)r * (size_t)cols + (size_t)c) * es, es);
        QF_TRY(qf_ex_add_initializer(ex, name, &t));
    } else {
        snprintf(base, sizeof base, "%.560s_transpose", n->name);
        const char *tname = qf_ex_unique(ex, base);
        if (!tname) return QF_ERR_NOMEM;
        const char *in = qf_ex_use(ex, w);
        Onnx__NodeProto *tp = qf_ex_node(ex, tname, "Transpose", 1, &in, 1, &name, 1);
        static const int64_t perm[2] = {1, 0};
        if (!tp) return QF_ERR_NOMEM;
        QF_TRY(qf_ex_add_attr_ints(ex, tp, "perm", perm, 2));
    }
    qf_transposed e = {w->id, name};
    QF_TRY(qf_ex_push((void **)&ex->tcache, &ex->ntcache, &ex->cap_tcache, sizeof *ex->tcache, &e));
    *out = name;
    return QF_OK;
}

static qf_status qf_ex_linear(qf_export *ex, const qf_node *n)
{
    const qf_value *x = n->inputs[0], *w = n->inputs[1], *b = n->ninputs > 2 ? n->inputs[2] : NULL;
    const char *out = n->outputs[0]->name;
    if (x->type.ndim == 2) {
        const char *in[3] = {qf_ex_use(ex, x), qf_ex_use(ex, w), qf_ex_use(ex, b)};
        Onnx__NodeProto *np = qf_ex_node(ex, n->name, "Gemm", 3, in, 1, &out, 1);
        if (!np) return QF_ERR_NOMEM;
        return qf_ex_add_attr_int(ex, np, "transB", 1);
    }
    /* MatMul broadcasts over leading dims but has no transpose flag and no bias. */
    const char *in[2] = {qf_ex_use(ex, x), NULL};
    QF_TRY(qf_ex_transposed(ex, n, w, &in[1]));
    const char *mm_out = out;
    char base[600];
    if (b) {
        snprintf(base, sizeof base, "%.560s_matmul", out);
        if (!(mm_out = qf_ex_unique(ex, base))) return QF_ERR_NOMEM;
    }
    if (!qf_ex_node(ex, n->name, "MatMul", 2, in, 1, &mm_out, 0)) return QF_ERR_NOMEM;
    if (!b) return QF_OK;
    snprintf(base, sizeof base, "%.560s_bias", n->name);
    const char *add_name = qf_ex_unique(ex, base);
    if (!add_name) return QF_ERR_NOMEM;
    const char *add_in[2] = {mm_out, qf_ex_use(ex, b)};
    return qf_ex_node(ex, add_name, "Add", 2, add_in, 1, &out, 0) ? QF_OK : QF_ERR_NOMEM;
}

static qf_status qf_ex_relu6_attrs(qf_export *ex, const qf_node *n);

static qf_status qf_ex_relu6(qf_export *ex, const qf_node *n)
{
    if (ex->opset < 11) return qf_ex_relu6_attrs(ex, n);
    const qf_value *x = n->inputs[0];
    int k = x->type.dtype == QF_DTYPE_F64 ? 1 : 0;
    if (x->type.dtype != QF_DTYPE_F32 && x->type.dtype != QF_DTYPE_F64)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (relu6): input dtype %s cannot be exported",
                        n->name, qf_dtype_name(x->type.dtype));
    if (!ex->relu6_min[k]) {
        /* Scalar bounds shared by every relu6 of this dtype. */
        for (int j = 0; j < 2; j++) {
            qf_tensor t = {.dtype = x->type.dtype, .ndim = 0};
            t.data = qf_ex_alloc(ex, 8);
            if (!t.data) return QF_ERR_NOMEM;
            if (k)
                *(double *)t.data = j ? 6.0 : 0.0;
            else
                *(float *)t.data = j ? 6.0f : 0.0f;
            const char *name = qf_ex_unique(ex, j ? "relu6_max" : "relu6_min");
            if (!name) return QF_ERR_NOMEM;
            QF_TRY(qf_ex_add_initializer(ex, name, &t));
            if (j)
                ex->relu6_max[k] = name;
            else
                ex->relu6_min[k] = name;
        }
    }
    const char *out = n->outputs[0]->name;
    const char *in[3] = {qf_ex_use(ex, x), ex->relu6_min[k], ex->relu6_max[k]};
    return qf_ex_node(ex, n->name, "Clip", 3, in, 1, &out, 0) ? QF_OK : QF_ERR_NOMEM;
}

/* relu6 before opset 11: Clip's bounds are attributes. */
static qf_status qf_ex_relu6_attrs(qf_export *ex, const qf_node *n)
{
    const char *out = n->outputs[0]->name;
    const char *in = qf_ex_use(ex, n->inputs[0]);
    Onnx__NodeProto *np = qf_ex_node(ex, n->name, "Clip", 1, &in, 1, &out, 2);
    if (!np) return QF_ERR_NOMEM;
    for (int j = 0; j < 2; j++) {
        qf_attr a = {.name = j ? "max" : "min", .type = QF_ATTR_FLOAT, .f = j ? 6.0f : 0.0f};
        Onnx__AttributeProto *ap = qf_ex_attr(ex, &a);
        if (!ap) return QF_ERR_NOMEM;
        np->attribute[np->n_attribute++] = ap;
    }
    return QF_OK;
}

static qf_status qf_ex_plain(qf_export *ex, const qf_node *n, const char *op_type)
{
    const char **outs = qf_ex_alloc(ex, sizeof *outs * (size_t)(n->noutputs ? n->noutputs : 1));
    const char **ins = qf_ex_alloc(ex, sizeof *ins * (size_t)(n->ninputs ? n->ninputs : 1));
    if (!outs || !ins) return QF_ERR_NOMEM;
    for (int i = 0; i < n->noutputs; i++) outs[i] = n->outputs[i]->name;
    for (int i = 0; i < n->ninputs; i++) ins[i] = qf_ex_use(ex, n->inputs[i]);
    Onnx__NodeProto *np =
        qf_ex_node(ex, n->name, op_type, n->ninputs, ins, n->noutputs, outs, n->nattrs);
    if (!np) return QF_ERR_NOMEM;
    for (int i = 0; i < n->nattrs; i++) {
        Onnx__AttributeProto *ap = qf_ex_attr(ex, &n->attrs[i]);
        if (!ap) return QF_ERR_NOMEM;
        np->attribute[np->n_attribute++] = ap;
    }
    return QF_OK;
}

/* An op qfold does not know, written back as it was read: op_type, domain,
 * name, every input slot (trailing empty ones too), its attributes' bytes
 * (src/io/onnx_keep.c). */
static qf_status qf_ex_opaque(qf_export *ex, const qf_node *n)
{
    int nin = n->ninputs, nout = n->noutputs;
    char **ins = qf_ex_alloc(ex, sizeof *ins * (size_t)(nin ? nin : 1));
    const char **outs = qf_ex_alloc(ex, sizeof *outs * (size_t)(nout ? nout : 1));
    if (!ins || !outs) return QF_ERR_NOMEM;
    for (int i = 0; i < nin; i++) ins[i] = (char *)qf_ex_use(ex, n->inputs[i]);
    for (int i = 0; i < nout; i++) outs[i] = n->outputs[i]->name;
    const char *op_type = qf_node_attr_string(n, "op_type", "");
    Onnx__NodeProto *np = qf_ex_node(ex, n->name, op_type, 0, NULL, nout, outs, 0);
    if (!np) return QF_ERR_NOMEM;
    np->n_input = (size_t)nin;
    np->input = ins;
    return qf_keep_opaque_fill(n, &ex->arena, np);
}

static void *qf_ex_form_alloc(void *ud, size_t size) { return qf_ex_alloc(ud, size); }

/* An opset < 13 Softmax (2-D coercion at `axis`) written at 13+:
 * Flatten(axis) -> Softmax(axis 1) -> Reshape to x's shape (a constant, or
 * Shape(x) when a dim is not known). */
static qf_status qf_ex_softmax_2d(qf_export *ex, const qf_node *n)
{
    const qf_value *x = n->inputs[0];
    int r = x->type.ndim;
    int64_t a = qf_node_attr_int(n, "axis", 1);
    a = a < 0 ? a + r : a;
    char base[600];
    const char *flat, *sm, *shape, *fname, *rname;
    snprintf(base, sizeof base, "%.500s_flat", n->outputs[0]->name);
    if (!(flat = qf_ex_unique(ex, base))) return QF_ERR_NOMEM;
    snprintf(base, sizeof base, "%.500s_2d", n->outputs[0]->name);
    if (!(sm = qf_ex_unique(ex, base))) return QF_ERR_NOMEM;
    snprintf(base, sizeof base, "%.500s_shape", n->name);
    if (!(shape = qf_ex_unique(ex, base))) return QF_ERR_NOMEM;
    snprintf(base, sizeof base, "%.500s_flatten", n->name);
    if (!(fname = qf_ex_unique(ex, base))) return QF_ERR_NOMEM;
    snprintf(base, sizeof base, "%.500s_reshape", n->name);
    if (!(rname = qf_ex_unique(ex, base))) return QF_ERR_NOMEM;
    const char *in = qf_ex_use(ex, x);
    Onnx__NodeProto *np = qf_ex_node(ex, fname, "Flatten", 1, &in, 1, &flat, 1);
    if (!np) return QF_ERR_NOMEM;
    QF_TRY(qf_ex_add_attr_int(ex, np, "axis", a));
    if (!(np = qf_ex_node(ex, n->name, "Softmax", 1, &flat, 1, &sm, 1))) return QF_ERR_NOMEM;
    QF_TRY(qf_ex_add_attr_int(ex, np, "axis", 1));
    bool known = true;
    for (int i = 0; i < r; i++) known &= x->type.dims[i] > 0;
    if (known) {
        qf_tensor t = {.dtype = QF_DTYPE_I64, .ndim = 1, .dims = {r}};
        if (!(t.data = qf_ex_alloc(ex, sizeof(int64_t) * (size_t)(r ? r : 1)))) return QF_ERR_NOMEM;
        memcpy(t.data, x->type.dims, sizeof(int64_t) * (size_t)r);
        QF_TRY(qf_ex_add_initializer(ex, shape, &t));
    } else {
        snprintf(base, sizeof base, "%.500s_shape_of", n->name);
        const char *sname = qf_ex_unique(ex, base);
        if (!sname || !qf_ex_node(ex, sname, "Shape", 1, &in, 1, &shape, 0)) return QF_ERR_NOMEM;
    }
    const char *rin[2] = {sm, shape}, *out = n->outputs[0]->name;
    return qf_ex_node(ex, rname, "Reshape", 2, rin, 1, &out, 0) ? QF_OK : QF_ERR_NOMEM;
}

/* n in the written opset's form (src/io/onnx_opset.c); plain when its form
 * is the same. */
static qf_status qf_ex_versioned(qf_export *ex, const qf_node *n, const char *op_type)
{
    if (qf_onnx_opset_softmax_2d(n, ex->opset)) return qf_ex_softmax_2d(ex, n);
    qf_onnx_written w;
    bool converted;
    QF_TRY(qf_onnx_opset_write(ex->g, n, ex->opset, qf_ex_form_alloc, ex, &w, &converted));
    if (!converted) return qf_ex_plain(ex, n, op_type);
    const char **outs = qf_ex_alloc(ex, sizeof *outs * (size_t)(n->noutputs ? n->noutputs : 1));
    const char *ins[QF_ONNX_WRITE_IN];
    if (!outs) return QF_ERR_NOMEM;
    for (int i = 0; i < n->noutputs; i++) outs[i] = n->outputs[i]->name;
    for (int i = 0; i < w.nin; i++) {
        if (w.made[i]) {
            char base[600];
            snprintf(base, sizeof base, "%.400s_%s", n->name, w.made_name[i]);
            if (!(ins[i] = qf_ex_unique(ex, base))) return QF_ERR_NOMEM;
            QF_TRY(qf_ex_add_initializer(ex, ins[i], w.made[i]));
        } else {
            ins[i] = qf_ex_use(ex, w.in[i]);
        }
    }
    Onnx__NodeProto *np = qf_ex_node(ex, n->name, op_type, w.nin, ins, n->noutputs, outs, w.nattrs);
    if (!np) return QF_ERR_NOMEM;
    for (int i = 0; i < w.nattrs; i++) {
        Onnx__AttributeProto *ap = qf_ex_attr(ex, &w.attrs[i]);
        if (!ap) return QF_ERR_NOMEM;
        np->attribute[np->n_attribute++] = ap;
    }
    return QF_OK;
}

/* Internal ops (no ONNX op_type in their schema row) and how each is
 * written as ONNX ops. */
typedef qf_status (*qf_ex_lower_fn)(qf_export *ex, const qf_node *n);
static const qf_ex_lower_fn qf_ex_lowerings[QF_OP_COUNT] = {
    [QF_OP_LINEAR] = qf_ex_linear,
    [QF_OP_RELU6] = qf_ex_relu6,
    [QF_OP_OPAQUE] = qf_ex_opaque,
};

static qf_status qf_ex_nodes(qf_export *ex)
{
    qf_graph_for_each_node(ex->g, n)
    {
        const char *op_type = qf_op_onnx_name(n->op);
        if (op_type) {
            QF_TRY(qf_ex_versioned(ex, n, op_type));
        } else if ((unsigned)n->op < QF_OP_COUNT && qf_ex_lowerings[n->op]) {
            QF_TRY(qf_ex_lowerings[n->op](ex, n));
        } else {
            return qf_error(QF_ERR_UNSUPPORTED, "node '%s': internal op %s has no ONNX form",
                            n->name, qf_op_name(n->op));
        }
    }
    for (size_t i = 0; i < ex->nnodes; i++) QF_TRY(qf_keep_node_doc(ex->g, &ex->arena, ex->nodes[i]));
    return QF_OK;
}

/* --- model --------------------------------------------------------------------- */

static qf_status qf_ex_graph(qf_export *ex, Onnx__GraphProto *gp)
{
    const qf_graph *g = ex->g;
    QF_TRY(qf_ex_nodes(ex));
    gp->name = (char *)(g->name && *g->name ? g->name : "qfold");
    gp->n_node = ex->nnodes;
    gp->node = ex->nodes;

    gp->input = qf_ex_alloc(ex, sizeof *gp->input * (size_t)(g->ninputs ? g->ninputs : 1));
    gp->output = qf_ex_alloc(ex, sizeof *gp->output * (size_t)(g->noutputs ? g->noutputs : 1));
    if (!gp->input || !gp->output) return QF_ERR_NOMEM;
    for (int i = 0; i < g->ninputs + g->noutputs; i++) {
        bool is_in = i < g->ninputs;
        const qf_value *v = is_in ? g->inputs[i] : g->outputs[i - g->ninputs];
        /* The 1.12 checker rejects interface values without a type; past an
         * op qfold does not know, the model's declaration stands in. */
        int32_t elem;
        int nd;
        int64_t dims[QF_MAX_DIMS];
        if (!qf_dtype_valid(v->type.dtype) && !qf_keep_declared_type(g, v->name, &elem, &nd, dims))
            return qf_error(QF_ERR_INVALID,
                            "graph %s '%s' has no known dtype (shapes were not inferred)",
                            is_in ? "input" : "output", v->name);
        Onnx__ValueInfoProto *vi = qf_ex_value_info(ex, v);
        if (!vi) return QF_ERR_NOMEM;
        if (is_in)
            gp->input[gp->n_input++] = vi;
        else
            gp->output[gp->n_output++] = vi;
    }

    /* Initializers: constants some exported node reads (or graph outputs),
     * in value-id order, then those the lowering made. */
    size_t count = ex->nextra;
    for (int i = 0; i < g->nvalues; i++) {
        const qf_value *v = g->values[i];
        if (v && !v->producer && qf_value_has_data(v) &&
            (v->kind == QF_VALUE_INPUT || ex->used[i] || v->is_output))
            count++;
    }
    gp->initializer = qf_ex_alloc(ex, sizeof *gp->initializer * (count ? count : 1));
    if (!gp->initializer) return QF_ERR_NOMEM;
    for (int i = 0; i < g->nvalues; i++) {
        const qf_value *v = g->values[i];
        /* An input with a default is written as an input and an initializer
         * of the same name, as it came (ir_version >= 4: overridable). */
        if (!v || v->producer || !qf_value_has_data(v) ||
            !(v->kind == QF_VALUE_INPUT || ex->used[i] || v->is_output))
            continue;
        Onnx__TensorProto *tp = qf_ex_tensor(ex, v->name, &v->type);
        if (!tp) return QF_ERR_NOMEM;
        gp->initializer[gp->n_initializer++] = tp;
    }
    for (size_t i = 0; i < ex->nextra; i++) gp->initializer[gp->n_initializer++] = ex->extra[i];
    return QF_OK;
}

/* --- streaming the model to the file or to memory ---------------------------------- */

/* protobuf-c packs a message into one buffer, and its pack_to_buffer packs
 * every nested message (the graph, each initializer) into a temporary buffer
 * first: either way the whole model would be copied once more in memory. So
 * the two levels that hold the weights are written by hand, in the field
 * order protobuf-c uses (ascending field numbers), and only the small
 * remainders are packed by protobuf-c:
 *   ModelProto  fields before graph (ir_version 1, producer_name 2, the kept
 *               producer_version 3 to doc_string 6), graph (7) as a key +
 *               length, then the rest (opset_import 8, then the kept
 *               metadata_props 14 and functions 25 as unknown fields)
 *   GraphProto  node (1), name (2), each initializer (5) as key + length,
 *               then the rest (input 11, output 12, ...)
 *   TensorProto everything but raw_data packed (dims 1, data_type 2, name 8;
 *               export sets nothing after raw_data), then raw_data (9) written
 *               straight from the tensor's memory.
 * The output is byte for byte what onnx__model_proto__pack would produce.
 * The sink is a file writer, or (mem set) a buffer of exactly the packed
 * size: the pieces go to one or the other through qf_ex_out / _fill / _fail,
 * so the bytes in memory are the bytes of the file. */
typedef struct qf_ex_stream {
    qf_file_writer w;
    const qf_graph *g; /* for payloads left in the model file (raw_data.data NULL) */
    uint8_t *scratch; /* packing buffer for the small messages */
    size_t cap;
    const char *what; /* for messages: the file, or "the model in memory" */
    uint8_t *mem;     /* the memory sink: mem_cap bytes, mem_len of them put */
    size_t mem_len, mem_cap;
    qf_status mem_st; /* its first error (the file writer keeps its own) */
} qf_ex_stream;

/* Record an error (the first one sticks). */
static void qf_ex_fail(qf_ex_stream *s, qf_status st)
{
    if (!s->mem)
        qf_file_writer_fail(&s->w, st);
    else if (s->mem_st == QF_OK)
        s->mem_st = st;
}

static qf_status qf_ex_status(const qf_ex_stream *s) { return s->mem ? s->mem_st : s->w.st; }

static size_t qf_ex_written(const qf_ex_stream *s) { return s->mem ? s->mem_len : s->w.written; }

/* Room for n more bytes in the memory sink (the buffer was sized from
 * protobuf-c's packed size: running past it is a packing bug). */
static uint8_t *qf_ex_mem_room(qf_ex_stream *s, size_t n)
{
    if (s->mem_st != QF_OK) return NULL;
    if (n > s->mem_cap - s->mem_len) {
        qf_ex_fail(s, qf_error(QF_ERR_INTERNAL,
                               "%s: protobuf packing ran past the %zu bytes it announced", s->what,
                               s->mem_cap));
        return NULL;
    }
    return s->mem + s->mem_len;
}

static void qf_ex_out(qf_ex_stream *s, const void *data, size_t n)
{
    if (!s->mem) {
        qf_file_writer_put(&s->w, data, n);
        return;
    }
    uint8_t *dst = n ? qf_ex_mem_room(s, n) : NULL;
    if (!dst) return;
    memcpy(dst, data, n);
    s->mem_len += n;
}

/* n bytes that fill() writes (qf_file_writer_put_fill's contract): in memory
 * straight into their place, in one call. */
static void qf_ex_out_fill(qf_ex_stream *s, size_t n, qf_file_fill fill, void *ctx)
{
    if (!s->mem) {
        qf_file_writer_put_fill(&s->w, n, fill, ctx);
        return;
    }
    uint8_t *dst = n ? qf_ex_mem_room(s, n) : NULL;
    if (!dst) return;
    qf_status st = fill(ctx, dst, 0, n);
    if (st != QF_OK) {
        qf_ex_fail(s, st);
        return;
    }
    s->mem_len += n;
}

enum { QF_PB_LEN = 2 }; /* the length-delimited wire type */

static void qf_ex_put_key_len(qf_ex_stream *s, uint32_t field, uint64_t len)
{
    uint8_t b[20];
    size_t n = 0;
    for (uint64_t v = ((uint64_t)field << 3) | QF_PB_LEN, k = 0; k < 2; k++, v = len) {
        do {
            b[n] = v & 0x7f;
            v >>= 7;
            b[n++] |= v ? 0x80 : 0;
        } while (v);
    }
    qf_ex_out(s, b, n);
}

static void qf_ex_put_msg(qf_ex_stream *s, const ProtobufCMessage *msg)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    if (!n) return;
    if (s->mem) {
        /* Packed in place: no scratch copy. */
        uint8_t *dst = qf_ex_mem_room(s, n);
        if (!dst) return;
        if (protobuf_c_message_pack(msg, dst) != n)
            qf_ex_fail(s, qf_error(QF_ERR_INTERNAL, "%s: protobuf packing went wrong", s->what));
        else
            s->mem_len += n;
        return;
    }
    if (n > s->cap) {
        uint8_t *p = qf_realloc(s->scratch, n);
        if (!p) {
            qf_ex_fail(s, QF_ERR_NOMEM);
            return;
        }
        s->scratch = p;
        s->cap = n;
    }
    if (protobuf_c_message_pack(msg, s->scratch) != n) {
        qf_ex_fail(s, qf_error(QF_ERR_INTERNAL, "%s: protobuf packing went wrong", s->what));
        return;
    }
    qf_ex_out(s, s->scratch, n);
}

typedef struct qf_ex_fill {
    const qf_graph *g;
    const qf_value *v;
} qf_ex_fill;

static qf_status qf_ex_fill_payload(void *ctx, void *dst, size_t off, size_t n)
{
    const qf_ex_fill *f = ctx;
    return qf_value_read(f->g, f->v, off, dst, n, true);
}

static void qf_ex_put_tensor(qf_ex_stream *s, const Onnx__TensorProto *tp)
{
    Onnx__TensorProto head = *tp;
    head.has_raw_data = 0;
    head.raw_data.len = 0;
    head.raw_data.data = NULL;
    qf_ex_put_key_len(s, 5, onnx__tensor_proto__get_packed_size(tp));
    qf_ex_put_msg(s, &head.base);
    if (tp->has_raw_data) {
        qf_ex_put_key_len(s, 9, tp->raw_data.len);
        if (!tp->raw_data.data && tp->raw_data.len) {
            /* Left in the input file: read into the write buffer piece by
             * piece, the pending BN scale applied there. */
            qf_ex_fill f = {s->g, qf_graph_find_value(s->g, tp->name)};
            if (!f.v || !f.v->deferred)
                qf_ex_fail(s,
                           qf_error(QF_ERR_INTERNAL, "initializer '%s' has no payload", tp->name));
            else
                qf_ex_out_fill(s, tp->raw_data.len, qf_ex_fill_payload, &f);
        } else {
            qf_ex_out(s, tp->raw_data.data, tp->raw_data.len);
        }
    }
}

static void qf_ex_put_model(qf_ex_stream *s, const Onnx__ModelProto *m)
{
    const Onnx__GraphProto *gp = m->graph;
    Onnx__ModelProto mhead = *m, mtail = ONNX__MODEL_PROTO__INIT;
    mhead.graph = NULL;
    mhead.n_opset_import = 0;
    mhead.opset_import = NULL;
    mhead.base.n_unknown_fields = 0; /* kept fields past opset_import (onnx_keep.c) */
    mhead.base.unknown_fields = NULL;
    mtail.n_opset_import = m->n_opset_import;
    mtail.opset_import = m->opset_import;
    mtail.base.n_unknown_fields = m->base.n_unknown_fields;
    mtail.base.unknown_fields = m->base.unknown_fields;
    Onnx__GraphProto ghead = ONNX__GRAPH_PROTO__INIT, gtail = *gp;
    ghead.n_node = gp->n_node;
    ghead.node = gp->node;
    ghead.name = gp->name;
    gtail.n_node = 0;
    gtail.node = NULL;
    gtail.name = NULL;
    gtail.n_initializer = 0;
    gtail.initializer = NULL;

    qf_ex_put_msg(s, &mhead.base);
    qf_ex_put_key_len(s, 7, onnx__graph_proto__get_packed_size(gp));
    qf_ex_put_msg(s, &ghead.base);
    for (size_t i = 0; i < gp->n_initializer; i++) qf_ex_put_tensor(s, gp->initializer[i]);
    qf_ex_put_msg(s, &gtail.base);
    qf_ex_put_msg(s, &mtail.base);
}

static void *qf_ex_arena_alloc(void *ctx, size_t size)
{
    return qf_arena_alloc(ctx, size ? size : 1);
}

/* The model to `path`; with external data (o->always, or a model over the
 * limit), the big initializers first to their side file. Both through
 * temporary files; the side file is renamed into place first, so that a
 * model never names a side file that is not there yet. */
/* Payloads left in the model file into memory of the export's own: the
 * side-file writer reads raw_data where it lies. */
static qf_status qf_ex_read_deferred(const qf_graph *g, Onnx__GraphProto *gp, qf_arena *arena)
{
    for (size_t i = 0; i < gp->n_initializer; i++) {
        Onnx__TensorProto *tp = gp->initializer[i];
        if (!tp->has_raw_data || tp->raw_data.data || !tp->raw_data.len) continue;
        const qf_value *v = qf_graph_find_value(g, tp->name);
        if (!v || !v->deferred) return qf_error(QF_ERR_INTERNAL, "initializer '%s' has no payload", tp->name);
        uint8_t *p = qf_arena_alloc(arena, tp->raw_data.len);
        if (!p) return QF_ERR_NOMEM;
        QF_TRY(qf_value_read(g, v, 0, p, tp->raw_data.len, true));
        tp->raw_data.data = p;
    }
    return QF_OK;
}

/* Protobuf messages are limited to 2 GiB; past that readers reject them. */
#define QF_PROTO_MAX ((size_t)0x7fffffffu)

/* Stream m (of `size` bytes) into s, opened by the caller; fewer or more
 * bytes than `size` are an error recorded in s. */
static void qf_ex_stream_model(qf_ex_stream *s, const Onnx__ModelProto *m, size_t size)
{
    qf_ex_put_model(s, m);
    if (qf_ex_status(s) == QF_OK && qf_ex_written(s) != size)
        qf_ex_fail(s, qf_error(QF_ERR_INTERNAL, "%s: protobuf packing wrote %zu of %zu bytes",
                               s->what, qf_ex_written(s), size));
    qf_free(s->scratch);
    s->scratch = NULL;
}

static qf_status qf_ex_write(const qf_graph *g, Onnx__ModelProto *m, const char *path, qf_arena *arena,
                             qf_onnx_save_options *o)
{
    const size_t proto_max = QF_PROTO_MAX;
    size_t limit = o && o->limit ? o->limit : proto_max;
    size_t size = onnx__model_proto__get_packed_size(m);
    qf_ext_plan plan = {0};
    char *side = NULL;
    if (o && (o->always || size > limit)) {
        const char *target = o->external_data;
        if (!target) {
            size_t n = strlen(path) + 6;
            side = qf_malloc(n);
            if (!side) return QF_ERR_NOMEM;
            snprintf(side, n, "%s.data", path);
            target = side;
        }
        const char *loc = o->location;
        if (!loc) {
            const char *slash = strrchr(target, '/');
            loc = slash ? slash + 1 : target;
        }
        qf_status st = qf_ex_read_deferred(g, m->graph, arena);
        if (st == QF_OK)
            st = qf_ext_plan_build(&plan, m->graph, loc, o->threshold ? o->threshold : QF_EXT_THRESHOLD,
                                         qf_ex_arena_alloc, arena);
        if (st == QF_OK && plan.n) {
            qf_file_writer sw;
            /* Buffered like the model (below): a big side file goes out with O_DIRECT. */
            size_t buf = (size_t)1 << 20;
            st = o->staged ? qf_file_writer_open_staged(&sw, target, buf)
                           : qf_file_writer_open(&sw, target, buf);
            if (st == QF_OK) {
                qf_ext_plan_write(&plan, &sw);
                st = qf_file_writer_commit(&sw);
            }
            if (st == QF_OK) o->wrote_external = true;
        }
        qf_ext_plan_free(&plan);
        qf_free(side);
        QF_TRY(st);
        size = onnx__model_proto__get_packed_size(m);
    }
    if (size > proto_max)
        return qf_error(QF_ERR_UNSUPPORTED,
                        "%s: the model is %zu bytes, over protobuf's 2 GiB limit even with its "
                        "initializers in external data",
                        path, size);
    qf_ex_stream s = {.g = g, .what = path};
    /* Every piece goes through the writer's 1 MiB buffer (few write() calls,
     * and from 4 MiB on they bypass the page cache: file.c); 4 MiB was no
     * faster (bench/fuse.md). */
    if (o && o->staged)
        QF_TRY(qf_file_writer_open_staged(&s.w, path, (size_t)1 << 20));
    else
        QF_TRY(qf_file_writer_open(&s.w, path, (size_t)1 << 20));
    qf_ex_stream_model(&s, m, size);
    return qf_file_writer_commit(&s.w);
}

/* m into one buffer of its exact size (qf_malloc), by the file's code path.
 * No external data here: a model over protobuf's limit cannot be one
 * buffer that qf_onnx_load_buffer reads back. */
static qf_status qf_ex_write_buffer(const qf_graph *g, const Onnx__ModelProto *m, void **data,
                                    size_t *size)
{
    size_t n = onnx__model_proto__get_packed_size(m);
    if (n > QF_PROTO_MAX)
        return qf_error(
            QF_ERR_UNSUPPORTED,
            "the model is %zu bytes, over protobuf's 2 GiB limit: it can only be saved to a "
            "file, with its initializers in external data",
            n);
    qf_ex_stream s = {.g = g, .what = "the model in memory", .mem_cap = n};
    s.mem = qf_malloc(n ? n : 1);
    if (!s.mem)
        return qf_error(QF_ERR_NOMEM, "out of memory (%zu bytes for the model in memory)", n);
    qf_ex_stream_model(&s, m, n);
    if (s.mem_st != QF_OK) {
        qf_free(s.mem);
        return s.mem_st;
    }
    *data = s.mem;
    *size = n;
    return QF_OK;
}

qf_status qf_onnx_save(const qf_graph *g, const char *path)
{
    /* Without options a model over protobuf's limit still goes out, with its
     * weights in "<path>.data". */
    qf_onnx_save_options o = {0};
    return qf_onnx_save_ex(g, path, &o);
}

/* Build the ModelProto of g and write it: to `path` (with options o), or,
 * path NULL, to memory (*data, *size). */
static qf_status qf_ex_export(const qf_graph *g, const char *path, qf_onnx_save_options *o,
                              void **data, size_t *size)
{
    qf_export ex = {.g = g};
    qf_arena_init(&ex.arena);
    qf_status st = QF_OK;
    ex.used = qf_calloc((size_t)(g->nvalues ? g->nvalues : 1), sizeof *ex.used);
    if (!ex.used) st = QF_ERR_NOMEM;
    if (st == QF_OK) st = qf_onnx_opset_target(g, &ex.opset);

    Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
    Onnx__GraphProto gp = ONNX__GRAPH_PROTO__INIT;
    Onnx__OperatorSetIdProto opset = ONNX__OPERATOR_SET_ID_PROTO__INIT;
    Onnx__OperatorSetIdProto *opsets[1] = {&opset};
    if (st == QF_OK) st = qf_ex_graph(&ex, &gp);
    if (st == QF_OK) st = qf_half_export(g, &gp, qf_ex_arena_alloc, &ex.arena);
    if (st != QF_OK && path)
        qf_error_prefix(st, "%s: ", path); /* write errors name the file already */
    if (st == QF_OK) {
        m.has_ir_version = 1;
        m.ir_version = g->ir_version > 0 ? g->ir_version : 8;
        /* Initializers that are not graph inputs need IR 4; an opset (raised
         * by export or by the quantizer) at least the IR version it came with. */
        if (m.ir_version < 4) m.ir_version = 4;
        if (m.ir_version < qf_onnx_opset_ir_version(ex.opset))
            m.ir_version = qf_onnx_opset_ir_version(ex.opset);
        m.producer_name =
            (char *)(g->producer_name && *g->producer_name ? g->producer_name : "qfold");
        opset.domain = "";
        opset.has_version = 1;
        opset.version = ex.opset;
        m.n_opset_import = 1;
        m.opset_import = opsets;
        m.graph = &gp;
        st = qf_keep_export_model(g, &ex.arena, &m, &gp);
        if (st != QF_OK && path) qf_error_prefix(st, "%s: ", path);
        if (st == QF_OK)
            st = path ? qf_ex_write(g, &m, path, &ex.arena, o)
                      : qf_ex_write_buffer(g, &m, data, size);
    }
    qf_free(ex.used);
    qf_free(ex.nodes);
    qf_free(ex.extra);
    qf_free(ex.gen);
    qf_free(ex.tcache);
    qf_arena_free(&ex.arena);
    return st;
}

qf_status qf_onnx_save_ex(const qf_graph *g, const char *path, qf_onnx_save_options *o)
{
    if (o) o->wrote_external = false;
    if (!path)
        return qf_error(QF_ERR_INVALID,
                        "qf_onnx_save: no path (qf_onnx_save_buffer saves to memory)");
    return qf_ex_export(g, path, o, NULL, NULL);
}

qf_status qf_onnx_save_buffer(const qf_graph *g, void **data, size_t *size)
{
    if (!data || !size)
        return qf_error(QF_ERR_INVALID, "qf_onnx_save_buffer: no place for the bytes");
    *data = NULL;
    *size = 0;
    return qf_ex_export(g, NULL, NULL, data, size);
}
