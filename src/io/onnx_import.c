/* ONNX import: ModelProto (protobuf-c) -> qf_graph.
 *
 * Steps: read the file into one buffer, pre-check the wire format, unpack
 * (the graph's initializers one at a time, see qf_onnx_decode), check the
 * opset, then build the graph in three passes over the GraphProto —
 * initializers and inputs, nodes
 * (created with empty input slots so that the ONNX node order need not be
 * topological), then node inputs and graph outputs bound by name. The
 * protobuf is freed before the graph is sorted, folded, inferred and
 * verified. Every check names the node / value and the problem, because the
 * input file may be anything (truncated, random, crafted).
 *
 * Weights are not copied: the graph adopts the buffer the file was read
 * into, and each initializer's tensor borrows its raw_data bytes there
 * (qf_tensor.writable: a pass may rewrite them in place, as the BN fold
 * does). */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "onnx_keep.h"
#include "onnx_opset.h"
#include "onnx_problems.h"
#include "external_data.h"
#include "onnx_proto.h"
#include "onnx_defer.h"
#include "qfold/pass.h"
#include "qfold/schema.h"

#define QF_OPSET_MIN QF_ONNX_OPSET_MIN
#define QF_OPSET_MAX QF_ONNX_OPSET_MAX

/* The file and holes of a deferred load (qf_onnx_load_deferred). */
typedef struct qf_defer_src {
    int fd; /* -1 once the import took it */
    const qf_onnx_range *holes;
    size_t nholes;
} qf_defer_src;

typedef struct qf_import {
    qf_graph *g;
    Onnx__GraphProto *gp;
    /* The fast path (qf_onnx_split_model): initializers decoded one at a time
     * from their byte ranges in `data` (the model buffer, adopted by the
     * graph), their tensors borrowing raw_data where it lies. ninit == 0:
     * they are in gp->initializer (decoded whole, copied by protobuf-c). */
    uint8_t *data;
    void *adopt;        /* data, until the graph adopts it */
    size_t size;        /* of data */
    const qf_onnx_range *init;
    size_t ninit;
    qf_onnx_scratch scratch;
    ProtobufCAllocator *alloc;
    bool *oom;
    qf_node **nodes;    /* qf node of ONNX node i */
    const char **names; /* node name used in messages (ONNX name or generated) */
    uint32_t id0;       /* id of the first node created */
    qf_problems *problems; /* every problem found (onnx_problems.h) */
    qf_ext_reader *ext; /* side files of external data (external_data.c) */
    /* Payloads left in the file (qf_onnx_load_options.defer): the ranges
     * of `data` never read, and the file, which the graph takes over. */
    const qf_onnx_range *holes;
    size_t nholes;
    int src_fd;          /* -1 once the graph has it, or without holes */
    int hole_fd;         /* the descriptor holes are read from (src_fd's, then the graph's) */
    const char *path;
} qf_import;

static const char *qf_str(const char *s) { return s ? s : ""; }

static bool qf_default_domain(const char *d) { return !d || !*d || strcmp(d, "ai.onnx") == 0; }

static qf_status qf_import_opset(const Onnx__ModelProto *m, int64_t *opset)
{
    if (m->n_opset_import == 0)
        return qf_error(QF_ERR_PARSE, "not a valid ONNX model (it imports no operator set)");
    int64_t best = -1;
    for (size_t i = 0; i < m->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = m->opset_import[i];
        if (qf_default_domain(o->domain) && o->has_version && o->version > best) best = o->version;
    }
    if (best < 0)
        return qf_error(
            QF_ERR_UNSUPPORTED,
            "model imports no opset of the default ONNX domain; qfold handles opsets %d to %d",
            QF_OPSET_MIN, QF_OPSET_MAX);
    if (best < QF_OPSET_MIN || best > QF_OPSET_MAX)
        return qf_error(QF_ERR_UNSUPPORTED,
                        "model uses opset %" PRId64 "; qfold handles opsets %d to %d", best,
                        QF_OPSET_MIN, QF_OPSET_MAX);
    *opset = best;
    return QF_OK;
}

/* dtype and shape of a graph input from its ValueInfo; dim_param or a
 * missing dim_value is an unknown dim (-1), bound later from the data. */
static qf_status qf_import_value_type(const Onnx__ValueInfoProto *vi, const char *what,
                                      qf_tensor *ty, int *store)
{
    const Onnx__TypeProto *tp = vi->type;
    if (!tp) return qf_error(QF_ERR_INVALID, "%s has no type", what);
    if (tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
        return qf_error(QF_ERR_UNSUPPORTED,
                        "%s is not a tensor (sequences, maps, optionals and sparse "
                        "tensors are not supported)",
                        what);
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    if (!tt->has_elem_type) return qf_error(QF_ERR_INVALID, "%s has no element type", what);
    memset(ty, 0, sizeof *ty);
    QF_TRY(qf_onnx_dtype_store(tt->elem_type, what, &ty->dtype, store));
    if (!tt->shape)
        return qf_error(QF_ERR_UNSUPPORTED,
                        "%s has no shape; qfold needs the rank of every graph input", what);
    if (tt->shape->n_dim > QF_MAX_DIMS)
        return qf_error(QF_ERR_UNSUPPORTED, "%s has rank %zu (qfold handles up to %d)", what,
                        tt->shape->n_dim, QF_MAX_DIMS);
    ty->ndim = (int)tt->shape->n_dim;
    for (int i = 0; i < ty->ndim; i++) {
        const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
        ty->dims[i] = -1;
        if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
            if (d->dim_value < 0)
                return qf_error(QF_ERR_INVALID, "%s has a negative dimension (%" PRId64 ")", what,
                                d->dim_value);
            ty->dims[i] = d->dim_value;
        }
    }
    if (!qf_shape_fits(ty->dtype, ty->ndim, ty->dims)) {
        char buf[160];
        return qf_error(QF_ERR_SHAPE, "%s has shape %s, larger than qfold handles (%lld bytes)", what,
                        qf_shape_str(ty->ndim, ty->dims, buf, sizeof buf), (long long)QF_MAX_TENSOR_BYTES);
    }
    return QF_OK;
}

/* The hole of `data` tp's raw_data lies in, or NULL. */
static const qf_onnx_range *qf_import_hole(const qf_import *im, const Onnx__TensorProto *tp)
{
    if (!im->nholes || !tp->has_raw_data || !tp->raw_data.data || tp->raw_data.data < im->data ||
        tp->raw_data.data >= im->data + im->size)
        return NULL;
    size_t off = (size_t)(tp->raw_data.data - im->data), lo = 0, hi = im->nholes;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (im->holes[mid].off < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < im->nholes && im->holes[lo].off == off && im->holes[lo].len == tp->raw_data.len ? &im->holes[lo]
                                                                                             : NULL;
}

/* Initializer i as a tensor: its raw_data borrowed in the model buffer at
 * base (where tp's bytes start), or, base NULL, protobuf-c's copy of it
 * taken over. Neither copies the weights. */
static qf_status qf_import_initializer(qf_import *im, size_t i, Onnx__TensorProto *tp,
                                       const uint8_t *base)
{
    const char *name = qf_str(tp->name);
    if (!*name) return qf_error(QF_ERR_INVALID, "initializer %zu has no name", i);
    if (qf_graph_find_value(im->g, name))
        return qf_error(QF_ERR_INVALID, "initializer '%s' is defined twice", name);
    char what[300];
    snprintf(what, sizeof what, "initializer '%.256s'", name);
    qf_tensor t;
    const qf_onnx_range *hole = base ? qf_import_hole(im, tp) : NULL;
    if (hole) {
        /* A payload left in the file: the tensor has its dtype and shape,
         * the value where the bytes are. Anything the decoder would convert
         * or reject is read after all and decoded as usual. */
        size_t nbytes;
        if (!qf_onnx_half_code(tp->data_type) && qf_onnx_tensor_meta(tp, what, &t, &nbytes) == QF_OK &&
            nbytes == tp->raw_data.len) {
            qf_value *v = qf_graph_add_constant(im->g, name, QF_VALUE_CONSTANT, &t);
            if (!v) return QF_ERR_NOMEM;
            return qf_value_defer(im->g, v, (int64_t)hole->off);
        }
        QF_TRY(qf_onnx_fill_hole(im->hole_fd, im->path, im->data, *hole));
    }
    if (qf_ext_is_external(tp))
        QF_TRY(qf_ext_read_tensor(im->ext, tp, what, &t));
    else
        QF_TRY(base ? qf_onnx_tensor_borrow(tp, base, what, &t) : qf_onnx_tensor_take(tp, what, &t));
    qf_value *v = qf_graph_add_constant(im->g, name, QF_VALUE_CONSTANT, &t);
    if (!v) {
        qf_tensor_free(&t);
        return QF_ERR_NOMEM;
    }
    v->store = qf_onnx_half_code(tp->data_type); /* float16 / bfloat16, held as float32 */
    return QF_OK;
}

static qf_status qf_import_initializers(qf_import *im)
{
    const Onnx__GraphProto *gp = im->gp;
    if (gp->n_sparse_initializer)
        return qf_error(
            QF_ERR_UNSUPPORTED, "sparse initializer '%s' (sparse tensors are not supported)",
            gp->sparse_initializer[0]->values ? qf_str(gp->sparse_initializer[0]->values->name)
                                              : "");
    for (size_t i = 0; i < gp->n_initializer; i++)
        QF_TRY(qf_import_initializer(im, i, gp->initializer[i], NULL));
    if (!im->ninit) return QF_OK;
    /* The tensors below point into the buffer: the graph owns it from here. */
    QF_TRY(qf_graph_adopt_buffer(im->g, im->adopt, im->size));
    im->adopt = NULL;
    for (size_t i = 0; i < im->ninit; i++) {
        const qf_onnx_range *r = &im->init[i];
        Onnx__TensorProto *tp;
        QF_TRY(qf_onnx_initializer_unpack(im->data, *r, im->alloc, im->oom, &im->scratch, &tp));
        qf_status st = qf_import_initializer(im, i, tp, im->data + r->off);
        qf_onnx_initializer_free(tp, im->alloc);
        QF_TRY(st);
    }
    return QF_OK;
}

/* Graph input `what` of type ty, whose default is initializer v: the two
 * must agree (dtype, rank, every dim the input fixes). */
static qf_status qf_import_input_default(qf_import *im, qf_value *v, const qf_tensor *ty, int store,
                                         const char *what)
{
    bool ok = ty->dtype == v->type.dtype && ty->ndim == v->type.ndim &&
              store == (v->store & QF_STORE_DTYPE);
    for (int d = 0; ok && d < ty->ndim; d++) ok = ty->dims[d] < 0 || ty->dims[d] == v->type.dims[d];
    if (!ok) {
        char a[160], b[160];
        return qf_error(
            QF_ERR_INVALID, "%s is %s %s, but its initializer (the input's default) is %s %s", what,
            qf_dtype_name(ty->dtype), qf_shape_str(ty->ndim, ty->dims, a, sizeof a),
            qf_dtype_name(v->type.dtype), qf_shape_str(v->type.ndim, v->type.dims, b, sizeof b));
    }
    if (v->deferred) QF_TRY(qf_value_load(im->g, v));
    return qf_graph_make_input(im->g, v);
}

static qf_status qf_import_inputs(qf_import *im)
{
    const Onnx__GraphProto *gp = im->gp;
    for (size_t i = 0; i < gp->n_input; i++) {
        const Onnx__ValueInfoProto *vi = gp->input[i];
        const char *name = qf_str(vi->name);
        if (!*name) return qf_error(QF_ERR_INVALID, "graph input %zu has no name", i);
        qf_value *old = qf_graph_find_value(im->g, name);
        if (old && old->kind == QF_VALUE_INPUT)
            return qf_error(QF_ERR_INVALID, "graph input '%s' is listed twice", name);
        /* An input that is also an initializer: below IR version 4 every
         * initializer had to be listed as an input, and the pair is a constant
         * (ONNX Runtime's reading too); from IR version 4 the initializer is
         * the input's default, which a run may override: an input with a
         * default, which no pass folds (ONNX Runtime: an "overridable
         * initializer", not a constant for its optimizers). */
        if (old && im->g->ir_version < 4) continue;
        char what[300];
        snprintf(what, sizeof what, "graph input '%.256s'", name);
        qf_tensor ty;
        int store;
        QF_TRY(qf_import_value_type(vi, what, &ty, &store));
        if (old) {
            QF_TRY(qf_import_input_default(im, old, &ty, store, what));
            continue;
        }
        qf_value *v = qf_graph_add_input(im->g, name, ty.dtype, ty.ndim, ty.dims);
        if (!v) return QF_ERR_NOMEM;
        v->store = store;
    }
    return QF_OK;
}

/* --- attributes --------------------------------------------------------------- */

static const char *qf_onnx_attr_type_name(int t)
{
    switch (t) {
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH: return "GRAPH";
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSOR: return "SPARSE_TENSOR";
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTO: return "TYPE_PROTO";
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS: return "STRINGS";
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSORS: return "TENSORS";
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS: return "GRAPHS";
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSORS: return "SPARSE_TENSORS";
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTOS: return "TYPE_PROTOS";
    default: return "UNDEFINED";
    }
}

/* The ONNX AttributeProto type of a schema attribute type. */
static int qf_onnx_attr_type(qf_attr_type t)
{
    switch (t) {
    case QF_ATTR_INT: return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    case QF_ATTR_FLOAT: return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
    case QF_ATTR_STRING: return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
    case QF_ATTR_INTS: return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
    case QF_ATTR_FLOATS: return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS;
    case QF_ATTR_TENSOR: return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
    }
    return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED;
}

/* The readers (qf_node_attr_int, ...) fall back to the default on a type
 * mismatch, so a file giving an attribute of the op's schema another type
 * (pads as one INT, group as FLOAT) would be run with the default, silently:
 * refused here instead. Attributes the schema does not list are kept. */
static qf_status qf_import_attr(qf_graph *g, qf_node *n, const char *node, Onnx__AttributeProto *a)
{
    const char *name = qf_str(a->name);
    if (!*name) return qf_error(QF_ERR_INVALID, "node '%s': an attribute has no name", node);
    if (qf_node_attr(n, name))
        return qf_error(QF_ERR_INVALID, "node '%s': attribute '%s' is given twice", node, name);
    if (a->ref_attr_name && *a->ref_attr_name)
        return qf_error(QF_ERR_UNSUPPORTED,
                        "node '%s': attribute '%s' refers to a function attribute", node, name);
    if (!a->has_type)
        return qf_error(QF_ERR_INVALID, "node '%s': attribute '%s' has no type", node, name);
    const qf_attr_schema *want = qf_op_schema_attr(n->op, name);
    if (want && (int)a->type != qf_onnx_attr_type(want->type))
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): attribute '%s' must be %s", node,
                        qf_op_label(n), name, qf_attr_type_name(want->type));
    switch (a->type) {
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT: return qf_node_set_attr_int(g, n, name, a->i);
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT:
        return qf_node_set_attr_float(g, n, name, a->f);
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING: {
        char *s = qf_malloc(a->s.len + 1);
        if (!s) return QF_ERR_NOMEM;
        if (a->s.len) memcpy(s, a->s.data, a->s.len);
        s[a->s.len] = '\0';
        qf_status st = qf_node_set_attr_string(g, n, name, s);
        qf_free(s);
        return st;
    }
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS:
        if (a->n_ints > INT_MAX)
            return qf_error(QF_ERR_UNSUPPORTED, "node '%s': attribute '%s' is too long", node,
                            name);
        return qf_node_set_attr_ints(g, n, name, a->ints, (int)a->n_ints);
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS:
        if (a->n_floats > INT_MAX)
            return qf_error(QF_ERR_UNSUPPORTED, "node '%s': attribute '%s' is too long", node,
                            name);
        return qf_node_set_attr_floats(g, n, name, a->floats, (int)a->n_floats);
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR: {
        if (!a->t)
            return qf_error(QF_ERR_INVALID, "node '%s': tensor attribute '%s' is empty", node,
                            name);
        char what[600];
        snprintf(what, sizeof what, "node '%.256s': attribute '%.256s'", node, name);
        qf_tensor t;
        QF_TRY(qf_onnx_tensor_take(a->t, what, &t));
        qf_status st = qf_node_set_attr_tensor(g, n, name, &t);
        if (st != QF_OK) qf_tensor_free(&t);
        return st;
    }
    default:
        return qf_error(QF_ERR_UNSUPPORTED,
                        "node '%s': attribute '%s' has type %s, which qfold does not handle", node,
                        name, qf_onnx_attr_type_name(a->type));
    }
}

/* --- nodes ---------------------------------------------------------------------- */

/* Count of names after dropping trailing empty ones ("" = omitted optional). */
static size_t qf_trim_count(char *const *names, size_t n)
{
    while (n && (!names[n - 1] || !names[n - 1][0])) n--;
    return n;
}

/* A node output whose ONNX name was "" (an unused optional output): it keeps
 * a generated name, which no ONNX reference may bind to. */
static bool qf_is_anonymous(const qf_import *im, const qf_value *v)
{
    if (!v->producer) return false;
    const Onnx__NodeProto *np = im->gp->node[v->producer->id - im->id0];
    return v->producer_slot >= (int)np->n_output || !qf_str(np->output[v->producer_slot])[0];
}

static qf_value *qf_import_find(const qf_import *im, const char *name)
{
    qf_value *v = qf_graph_find_value(im->g, name);
    return v && !qf_is_anonymous(im, v) ? v : NULL;
}

static qf_status qf_import_node_outputs(qf_import *im, size_t i, qf_node *n)
{
    const Onnx__NodeProto *np = im->gp->node[i];
    for (int k = 0; k < n->noutputs; k++) {
        const char *name = qf_str(np->output[k]);
        if (!*name) continue;
        qf_value *other = qf_graph_find_value(im->g, name);
        if (other && other != n->outputs[k]) {
            if (qf_is_anonymous(im, other)) {
                /* A generated name that happens to be a real name here: move it away. */
                char alt[600];
                for (unsigned s = 1;; s++) {
                    snprintf(alt, sizeof alt, "%.500s_anon%u", name, s);
                    if (!qf_graph_find_value(im->g, alt)) break;
                }
                QF_TRY(qf_graph_rename_value(im->g, other, alt));
            } else if (other->producer) {
                return qf_error(QF_ERR_INVALID,
                                "node '%s' writes '%s', which node '%s' already produces",
                                im->names[i], name, im->names[other->producer->id - im->id0]);
            } else {
                return qf_error(QF_ERR_INVALID,
                                "node '%s' writes '%s', which is already a graph %s", im->names[i],
                                name, other->kind == QF_VALUE_INPUT ? "input" : "initializer");
            }
        }
        QF_TRY(qf_graph_rename_value(im->g, n->outputs[k], name));
    }
    return QF_OK;
}

/* "2 to 3", "1" or "at least 1" (max -1: variadic), for arity messages. */
static const char *qf_arity_str(int min, int max, char *buf, size_t size)
{
    if (max < 0)
        snprintf(buf, size, "at least %d", min);
    else if (min == max)
        snprintf(buf, size, "%d", min);
    else
        snprintf(buf, size, "%d to %d", min, max);
    return buf;
}

/* What every node of ONNX node i gets once made: its place in the tables,
 * its outputs' names, its doc string, and (attrs) its attributes. */
static qf_status qf_import_node_tail(qf_import *im, size_t i, qf_node *n, bool attrs)
{
    const Onnx__NodeProto *np = im->gp->node[i];
    im->nodes[i] = n;
    im->names[i] = n->name;
    if (n->id - im->id0 != i) return qf_error(QF_ERR_INTERNAL, "node ids are not sequential");
    QF_TRY(qf_import_node_outputs(im, i, n));
    QF_TRY(qf_keep_import_node_doc(im->g, np, n->name));
    for (size_t k = 0; attrs && k < np->n_attribute; k++)
        QF_TRY(qf_import_attr(im->g, n, n->name, np->attribute[k]));
    return QF_OK;
}

static qf_status qf_import_node(qf_import *im, size_t i)
{
    const Onnx__NodeProto *np = im->gp->node[i];
    const char *op_type = qf_str(np->op_type);
    char gen[160];
    const char *name = qf_str(np->name);
    if (!*name) {
        snprintf(gen, sizeof gen, "%.120s_%zu", op_type, i);
        name = gen;
    }
    qf_op op = qf_default_domain(np->domain) ? qf_op_from_onnx(op_type) : QF_OP_COUNT;
    if (op == QF_OP_COUNT) {
        /* An op qfold does not know: kept as an opaque node (onnx_keep.c). */
        qf_node *n = NULL;
        char key[300];
        qf_keep_op_key(np->domain, op_type, key, sizeof key);
        qf_status st = qf_keep_opaque_node(im->g, np, name, true, &n);
        if (st != QF_OK && !n && st != QF_ERR_NOMEM) {
            /* One it cannot keep either: an error, unless collecting
             * problems (inspect), which goes on with a stand-in. */
            QF_TRY(qf_problems_add(im->problems, QF_PROBLEM_OP, key, name, st));
            QF_TRY(qf_keep_opaque_node(im->g, np, name, false, &n));
        } else {
            QF_TRY(st);
            QF_TRY(qf_problems_add(im->problems, QF_PROBLEM_OP, key, n->name, QF_OK));
        }
        return qf_import_node_tail(im, i, n, false);
    }

    /* Arity from the op table: slots below min_inputs are required. Checked
     * here because shape inference indexes inputs without looking. */
    const qf_op_schema *info = qf_op_schema_get(op);
    size_t nin = qf_trim_count(np->input, np->n_input);
    size_t nout = qf_trim_count(np->output, np->n_output);
    char range[48];
    if ((int64_t)nin < info->min_inputs ||
        (info->max_inputs >= 0 && (int64_t)nin > info->max_inputs))
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): %zu inputs, the op takes %s", name, op_type, nin,
                        qf_arity_str(info->min_inputs, info->max_inputs, range, sizeof range));
    if ((int64_t)nout < info->min_outputs ||
        (info->max_outputs >= 0 && (int64_t)nout > info->max_outputs))
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): %zu outputs, the op has %s", name, op_type, nout,
                        qf_arity_str(info->min_outputs, info->max_outputs, range, sizeof range));
    for (int k = 0; k < info->min_inputs; k++)
        if (!qf_str(np->input[k])[0])
            return qf_error(QF_ERR_INVALID, "node '%s' (%s): required input %d is empty", name,
                            op_type, k);
    if (nin > INT_MAX || nout > INT_MAX)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s': too many inputs", name);

    /* Inputs are bound in a later pass, once every producer exists. */
    qf_value **none = qf_calloc(nin ? nin : 1, sizeof *none);
    if (!none) return QF_ERR_NOMEM;
    qf_node *n = qf_graph_add_node(im->g, op, name, (int)nin, none, (int)nout);
    qf_free(none);
    if (!n) return QF_ERR_NOMEM;
    return qf_import_node_tail(im, i, n, true);
}

static qf_status qf_import_node_inputs(qf_import *im, size_t i)
{
    const Onnx__NodeProto *np = im->gp->node[i];
    qf_node *n = im->nodes[i];
    for (int k = 0; k < n->ninputs; k++) {
        const char *name = qf_str(np->input[k]);
        if (!*name) continue;
        qf_value *v = qf_import_find(im, name);
        if (!v)
            return qf_error(
                QF_ERR_INVALID,
                "node '%s' reads '%s', which is neither a graph input, an initializer nor a "
                "node output",
                n->name, name);
        QF_TRY(qf_node_set_input(im->g, n, k, v));
    }
    return QF_OK;
}

static qf_status qf_import_outputs(qf_import *im)
{
    const Onnx__GraphProto *gp = im->gp;
    if (gp->n_output == 0) return qf_error(QF_ERR_INVALID, "the graph has no outputs");
    for (size_t i = 0; i < gp->n_output; i++) {
        const char *name = qf_str(gp->output[i]->name);
        if (!*name) return qf_error(QF_ERR_INVALID, "graph output %zu has no name", i);
        qf_value *v = qf_import_find(im, name);
        if (!v)
            return qf_error(
                QF_ERR_INVALID,
                "graph output '%s' is neither produced by a node nor a graph input or an "
                "initializer",
                name);
        if (v->is_output)
            return qf_error(QF_ERR_INVALID, "graph output '%s' is listed twice", name);
        QF_TRY(qf_graph_add_output(im->g, v));
        /* A float16 / bfloat16 output: computed in float32, given back in
         * the model's dtype (qfold run, export). */
        const Onnx__TypeProto *tp = gp->output[i]->type;
        if (tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE && tp->tensor_type &&
            tp->tensor_type->has_elem_type && qf_onnx_half_code(tp->tensor_type->elem_type))
            v->store = tp->tensor_type->elem_type;
    }
    return QF_OK;
}

/* Only the weight (input 1) of a Conv, ConvTranspose, Gemm, MatMul or
 * linear stays in the file (the BN fold, canonicalize and the exporter
 * know how to read it there); any other deferred payload is read now. */
static qf_status qf_import_defer_policy(qf_graph *g)
{
    for (int i = 0; i < g->nvalues; i++) {
        qf_value *v = g->values[i];
        if (!v || !v->deferred) continue;
        bool keep = !v->is_output && v->nuses > 0;
        for (int u = 0; u < v->nuses && keep; u++) {
            const qf_use *us = &v->uses[u];
            qf_op op = us->node->op;
            keep = us->slot == 1 && (op == QF_OP_CONV || op == QF_OP_CONV_TRANSPOSE || op == QF_OP_GEMM ||
                                     op == QF_OP_MATMUL || op == QF_OP_LINEAR);
        }
        if (!keep) QF_TRY(qf_value_load(g, v));
    }
    return QF_OK;
}

static qf_status qf_import_graph(qf_import *im, const Onnx__ModelProto *m)
{
    qf_graph *g = im->g;
    const Onnx__GraphProto *gp = im->gp;
    QF_TRY(qf_import_opset(m, &g->opset));
    g->ir_version = m->ir_version;
    if (gp->name && *gp->name && !(g->name = qf_graph_strdup(g, gp->name))) return QF_ERR_NOMEM;
    if (m->producer_name && *m->producer_name &&
        !(g->producer_name = qf_graph_strdup(g, m->producer_name)))
        return QF_ERR_NOMEM;
    QF_TRY(qf_keep_import_model(g, m));
    QF_TRY(qf_import_initializers(im));
    QF_TRY(qf_import_inputs(im));
    im->nodes = qf_calloc(gp->n_node ? gp->n_node : 1, sizeof *im->nodes);
    im->names = qf_calloc(gp->n_node ? gp->n_node : 1, sizeof *im->names);
    if (!im->nodes || !im->names) return QF_ERR_NOMEM;
    im->id0 = g->next_node_id;
    for (size_t i = 0; i < gp->n_node; i++) QF_TRY(qf_import_node(im, i));
    for (size_t i = 0; i < gp->n_node; i++) QF_TRY(qf_import_node_inputs(im, i));
    QF_TRY(qf_import_outputs(im));
    /* Versioned ops onto qfold's forms (src/io/onnx_opset.c). */
    QF_TRY(qf_onnx_opset_import(g, g->opset));
    return qf_import_defer_policy(g);
}

/* Protobuf -> graph; the ModelProto is freed by the caller right after. */
static qf_status qf_import_model(qf_import *im, const Onnx__ModelProto *m, qf_graph **out)
{
    if (!m->has_ir_version || !m->graph)
        return qf_error(QF_ERR_PARSE, "not a valid ONNX model (it has no %s)",
                        m->has_ir_version ? "graph" : "ir_version");
    im->gp = m->graph;
    QF_TRY(qf_graph_init(&im->g));
    if (im->src_fd >= 0) {
        qf_status st = qf_graph_set_source(im->g, im->src_fd, im->path);
        im->src_fd = -1; /* the graph's (closed on failure) */
        if (st != QF_OK) {
            qf_graph_free(im->g);
            return st;
        }
    }
    qf_status st = qf_import_graph(im, m);
    qf_free(im->nodes);
    qf_free(im->names);
    if (st != QF_OK) {
        qf_graph_free(im->g);
        return st;
    }
    *out = im->g;
    return QF_OK;
}

/* Sort, fold shape chains, infer, classify, verify. */
static qf_status qf_import_finish(qf_graph *g)
{
    QF_TRY(qf_graph_toposort(g));
    QF_TRY(qf_graph_fold_constants(g, NULL));
    QF_TRY(qf_graph_infer_shapes(g));
    bool changed;
    QF_TRY(qf_onnx_opset_finish(g, &changed));
    if (changed) {
        QF_TRY(qf_graph_toposort(g));
        QF_TRY(qf_graph_infer_shapes(g));
    }
    qf_graph_classify_constants(g);
    return qf_graph_verify(g);
}

/* Check, decode and import buf (size bytes from qf_malloc, writable; taken
 * over: adopted by the graph or freed).
 *
 * Memory: the usual model (one graph field) is decoded as a skeleton without
 * initializers, then each initializer on its own without its raw_data
 * (qf_onnx_initializer_unpack), whose bytes the tensor borrows in buf: the
 * weights exist once, in the buffer the file was read into. Any other shape
 * is decoded whole (protobuf-c copies every weight; the tensors take those
 * copies) and buf is freed right after. */
static qf_status qf_onnx_decode(void *buf, size_t size, const char *path, const qf_onnx_load_options *lo,
                                 qf_problems *problems, qf_defer_src *ds, qf_graph **out)
{
    *out = NULL;
    qf_status st = size ? qf_pb_check(&onnx__model_proto__descriptor, buf, size, "ONNX model")
                        : qf_error(QF_ERR_PARSE, "not a valid ONNX model (the file is empty)");
    qf_onnx_split split = {0};
    if (st == QF_OK) st = qf_onnx_split_model(buf, size, &split);
    if (st == QF_OK && ds && ds->nholes && !split.init) {
        /* Decoded whole: protobuf-c copies every payload, so all are read. */
        for (size_t i = 0; i < ds->nholes && st == QF_OK; i++)
            st = qf_onnx_fill_hole(ds->fd, path, buf, ds->holes[i]);
        ds->nholes = 0;
    }
    Onnx__ModelProto *m = NULL;
    bool oom;
    ProtobufCAllocator alloc = qf_pb_allocator_make(&oom);
    if (st == QF_OK) {
        if (split.skeleton)
            m = onnx__model_proto__unpack(&alloc, split.skeleton_size, split.skeleton);
        else
            m = onnx__model_proto__unpack(&alloc, size, buf);
        if (!m) st = qf_pb_unpack_failed(oom, "ONNX model");
    }
    qf_free(split.skeleton);
    split.skeleton = NULL;
    if (!split.init) {
        /* Decoded whole (or failed): the file bytes are not needed any more. */
        qf_free(buf);
        buf = NULL;
    }
    qf_import im = {.data = buf,
                    .adopt = buf,
                    .size = size,
                    .init = split.init,
                    .ninit = split.ninit,
                    .alloc = &alloc,
                    .oom = &oom,
                    .problems = problems,
                    .holes = ds ? ds->holes : NULL,
                    .nholes = ds ? ds->nholes : 0,
                    .src_fd = ds && ds->nholes ? ds->fd : -1,
                    .hole_fd = ds ? ds->fd : -1,
                    .path = path};
    if (ds && ds->nholes) ds->fd = -1; /* im's, then the graph's */
    if (st == QF_OK)
        st = qf_ext_reader_init(&im.ext, path, lo ? lo->external_location : NULL,
                                lo ? lo->external_path : NULL);
    if (st == QF_OK) st = qf_import_model(&im, m, out);
    qf_ext_reader_free(im.ext);
    if (m) onnx__model_proto__free_unpacked(m, &alloc);
    qf_onnx_split_free(&split);
    qf_free(im.scratch.buf);
    qf_free(im.adopt); /* not adopted: the import failed before the initializers */
    if (im.src_fd >= 0) close(im.src_fd);
    return st;
}

/* Decode (taking buf), then finish; `what` (may be NULL) prefixes error
 * messages. */
static qf_status qf_onnx_load_impl(void *buf, size_t size, const char *what, const char *path,
                                   const qf_onnx_load_options *lo, qf_problems *problems, qf_defer_src *ds,
                                   qf_graph **out)
{
    *out = NULL;
    qf_graph *g = NULL;
    qf_problems own = {0};
    qf_status st = qf_onnx_decode(buf, size, path, lo, problems ? problems : &own, ds, &g);
    qf_problems_free(&own);
    if (st == QF_OK) {
        st = qf_import_finish(g);
        if (st != QF_OK) qf_graph_free(g);
    }
    if (st != QF_OK) return what ? qf_error_prefix(st, "%s: ", what) : st;
    *out = g;
    return QF_OK;
}

qf_status qf_onnx_load_buffer(const void *data, size_t size, const char *what, qf_graph **out)
{
    *out = NULL;
    /* The graph keeps its weights in a buffer of its own: the caller's may
     * go away after this call. */
    void *buf = qf_malloc(size ? size : 1);
    if (!buf) return what ? qf_error_prefix(QF_ERR_NOMEM, "%s: ", what) : QF_ERR_NOMEM;
    if (size) memcpy(buf, data, size);
    return qf_onnx_load_impl(buf, size, what, NULL, NULL, NULL, NULL, out);
}

/* The smallest payload left in the file with o->defer: QF_DEFER_MIN, or
 * QF_TEST_DEFER=BYTES from the environment (a test hook: the small test
 * models' weights stay in the file too, so that every `qfold fuse` test
 * runs with them there); 0: none. Callers that do not ask for it never
 * see a deferred payload. */
static size_t qf_defer_min(const qf_onnx_load_options *o)
{
    if (!o || !o->defer) return 0;
    const char *e = getenv("QF_TEST_DEFER");
    if (e && *e) {
        char *end;
        unsigned long long n = strtoull(e, &end, 10);
        if (!*end && n) return (size_t)n;
    }
    return QF_DEFER_MIN;
}

static qf_status qf_onnx_load_deferred(const char *path, const qf_onnx_load_options *o, qf_problems *problems,
                                       size_t min, qf_graph **out)
{
    int fd;
    struct stat st;
    QF_TRY(qf_file_open_regular(path, &fd, &st));
    if ((uint64_t)st.st_size > 0x7fffffffu) {
        close(fd);
        return qf_error(QF_ERR_PARSE, "%s: not a valid ONNX model (%lld bytes, over protobuf's 2 GiB limit)",
                        path, (long long)st.st_size);
    }
    uint8_t *buf;
    qf_onnx_range *holes;
    qf_defer_src ds = {.fd = fd};
    qf_status s = qf_onnx_read_sparse(fd, path, (size_t)st.st_size, min, &buf, &holes, &ds.nholes);
    if (s != QF_OK) {
        close(fd);
        return qf_error_prefix(s, "%s: ", path);
    }
    ds.holes = holes;
    s = qf_onnx_load_impl(buf, (size_t)st.st_size, path, path, o, problems, &ds, out);
    if (ds.fd >= 0) close(ds.fd); /* no holes: the graph did not take it */
    qf_free(holes);
    return s;
}

static qf_status qf_onnx_load_path(const char *path, const qf_onnx_load_options *o, qf_problems *problems,
                                   qf_graph **out)
{
    *out = NULL;
    void *buf;
    size_t size;
    size_t min = qf_defer_min(o);
    if (min) return qf_onnx_load_deferred(path, o, problems, min, out);
    /* A protobuf message is at most 2 GiB: anything larger is not a model. */
    QF_TRY(qf_file_read_max(path, 0x7fffffffu, &buf, &size));
    if (!buf)
        return qf_error(QF_ERR_PARSE,
                        "%s: not a valid ONNX model (%zu bytes, over protobuf's 2 GiB limit)", path,
                        size);
    return qf_onnx_load_impl(buf, size, path, path, o, problems, NULL, out);
}

qf_status qf_onnx_load(const char *path, qf_graph **out) { return qf_onnx_load_path(path, NULL, NULL, out); }

qf_status qf_onnx_load_ex(const char *path, const qf_onnx_load_options *o, qf_graph **out)
{
    return qf_onnx_load_path(path, o, NULL, out);
}

qf_status qf_onnx_load_collect(const char *path, qf_problems *p, qf_graph **out)
{
    p->collect = true;
    return qf_onnx_load_path(path, NULL, p, out);
}
