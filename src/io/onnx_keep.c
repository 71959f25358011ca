/* What an ONNX model carries that qfold does not interpret, from import to
 * export, and opaque nodes (onnx_keep.h). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "../ir/graph_notes.h"
#include "core/strbuf.h"
#include "onnx_keep.h"
#include "onnx_problems.h"
#include "qfold/io.h"
#include "qfold/quant.h"
#include "qfold/schema.h"

/* Graph note kinds (the notes' name field in parentheses). */
enum {
    QF_KEEP_PRODUCER_VERSION = 0x4b00, /* string */
    QF_KEEP_DOMAIN,                    /* string */
    QF_KEEP_MODEL_VERSION,             /* int64 */
    QF_KEEP_DOC,                       /* model doc_string */
    QF_KEEP_GRAPH_DOC,                 /* graph doc_string */
    QF_KEEP_METADATA,                  /* (key) a packed StringStringEntryProto */
    QF_KEEP_FUNCTION,                  /* a packed FunctionProto */
    QF_KEEP_OPSET,                     /* (domain) int64 version */
    QF_KEEP_TYPE,                      /* (value) int64: elem_type, rank, dims (-1 unknown) */
    QF_KEEP_DIM_NAMES,                 /* (value) rank NUL-terminated names, "" = none */
    QF_KEEP_VALUE_DOC,                 /* (value) doc_string of a graph input / output */
    QF_KEEP_VALUE_INFO,                /* (value) a packed ValueInfoProto */
    QF_KEEP_NODE_DOC,                  /* (node) doc_string */
};


static const char *qf_keep_str(const char *s) { return s ? s : ""; }

static qf_status qf_keep_string(qf_graph *g, int kind, const char *name, const char *s)
{
    if (!s || !*s) return QF_OK;
    return qf_graph_note_add(g, kind, name, s, strlen(s) + 1);
}

/* A sub-message, packed as it was read (protobuf-c packs the fields it
 * decoded in field order, and the unknown ones after them). */
static qf_status qf_keep_msg(qf_graph *g, int kind, const char *name, const ProtobufCMessage *msg)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = qf_malloc(n ? n : 1);
    if (!buf) return QF_ERR_NOMEM;
    qf_status st = protobuf_c_message_pack(msg, buf) == n
                       ? qf_graph_note_add(g, kind, name, buf, n)
                       : qf_error(QF_ERR_INTERNAL, "protobuf packing went wrong");
    qf_free(buf);
    return st;
}

static size_t qf_varint_put(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    do {
        p[n] = v & 0x7f;
        v >>= 7;
        p[n++] |= v ? 0x80 : 0;
    } while (v);
    return n;
}

static size_t qf_varint_size(uint64_t v)
{
    size_t n = 1;
    while (v >>= 7) n++;
    return n;
}

/* Read a varint at p[0, end): its size, 0 when malformed. */
static size_t qf_varint_get(const uint8_t *p, const uint8_t *end, uint64_t *v)
{
    *v = 0;
    for (size_t n = 0; n < 10 && p + n < end; n++) {
        *v |= (uint64_t)(p[n] & 0x7f) << (7 * n);
        if (!(p[n] & 0x80)) return n + 1;
    }
    return 0;
}

/* The declared type of a ValueInfoProto: elem_type, rank, dims; dim names
 * (NUL-terminated each) into names. False when it is no tensor with a shape. */
static bool qf_keep_vi_type(const Onnx__ValueInfoProto *vi, int64_t *t, int *nt, char *names,
                            size_t cap, size_t *nlen)
{
    const Onnx__TypeProto *tp = vi->type;
    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type) return false;
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    if (!tt->has_elem_type || !tt->shape || tt->shape->n_dim > QF_MAX_DIMS) return false;
    int nd = (int)tt->shape->n_dim;
    t[0] = tt->elem_type;
    t[1] = nd;
    *nlen = 0;
    for (int i = 0; i < nd; i++) {
        const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
        bool val = d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        t[2 + i] = val && d->dim_value >= 0 ? d->dim_value : -1;
        const char *nm = d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM
                             ? qf_keep_str(d->dim_param)
                             : "";
        size_t l = strlen(nm) + 1;
        if (*nlen + l > cap) return false;
        memcpy(names + *nlen, nm, l);
        *nlen += l;
    }
    *nt = 2 + nd;
    return true;
}

/* Type, dim names, and (interface values) doc string of one ValueInfoProto. */
static qf_status qf_keep_value(qf_graph *g, const Onnx__ValueInfoProto *vi, bool iface)
{
    const char *name = qf_keep_str(vi->name);
    if (!*name) return QF_OK; /* the importer names the problem */
    int64_t t[2 + QF_MAX_DIMS];
    int nt = 0;
    char names[2048];
    size_t nlen = 0;
    if (qf_keep_vi_type(vi, t, &nt, names, sizeof names, &nlen)) {
        QF_TRY(qf_graph_note_add(g, QF_KEEP_TYPE, name, t, sizeof *t * (size_t)nt));
        QF_TRY(qf_graph_note_add(g, QF_KEEP_DIM_NAMES, name, names, nlen));
    }
    if (iface) return qf_keep_string(g, QF_KEEP_VALUE_DOC, name, vi->doc_string);
    return qf_keep_msg(g, QF_KEEP_VALUE_INFO, name, &vi->base);
}

static bool qf_keep_default_domain(const char *d)
{
    return !d || !*d || strcmp(d, "ai.onnx") == 0;
}

qf_status qf_keep_import_model(qf_graph *g, const Onnx__ModelProto *m)
{
    const Onnx__GraphProto *gp = m->graph;
    QF_TRY(qf_keep_string(g, QF_KEEP_PRODUCER_VERSION, NULL, m->producer_version));
    QF_TRY(qf_keep_string(g, QF_KEEP_DOMAIN, NULL, m->domain));
    if (m->has_model_version)
        QF_TRY(qf_graph_note_add(g, QF_KEEP_MODEL_VERSION, NULL, &m->model_version,
                                 sizeof m->model_version));
    QF_TRY(qf_keep_string(g, QF_KEEP_DOC, NULL, m->doc_string));
    QF_TRY(qf_keep_string(g, QF_KEEP_GRAPH_DOC, NULL, gp->doc_string));
    for (size_t i = 0; i < m->n_metadata_props; i++)
        QF_TRY(qf_keep_msg(g, QF_KEEP_METADATA, qf_keep_str(m->metadata_props[i]->key), &m->metadata_props[i]->base));
    for (size_t i = 0; i < m->n_functions; i++)
        QF_TRY(qf_keep_msg(g, QF_KEEP_FUNCTION, NULL, &m->functions[i]->base));
    for (size_t i = 0; i < m->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = m->opset_import[i];
        if (qf_keep_default_domain(o->domain) || !o->has_version) continue;
        if (qf_graph_note_find(g, QF_KEEP_OPSET, o->domain)) continue;
        QF_TRY(qf_graph_note_add(g, QF_KEEP_OPSET, o->domain, &o->version, sizeof o->version));
    }
    /* value_info first: an opaque node's outputs take their types from it,
     * then from the graph outputs. */
    for (size_t i = 0; i < gp->n_value_info; i++) QF_TRY(qf_keep_value(g, gp->value_info[i], false));
    for (size_t i = 0; i < gp->n_input; i++) QF_TRY(qf_keep_value(g, gp->input[i], true));
    for (size_t i = 0; i < gp->n_output; i++) QF_TRY(qf_keep_value(g, gp->output[i], true));
    return QF_OK;
}

qf_status qf_keep_import_node_doc(qf_graph *g, const Onnx__NodeProto *np, const char *name)
{
    return qf_keep_string(g, QF_KEEP_NODE_DOC, name, np->doc_string);
}

const char *qf_keep_op_key(const char *domain, const char *op_type, char *buf, size_t size)
{
    if (qf_keep_default_domain(domain))
        snprintf(buf, size, "%s", qf_keep_str(op_type));
    else
        snprintf(buf, size, "%s.%s", domain, qf_keep_str(op_type));
    return buf;
}

static const char *qf_keep_attr_type_name(int t)
{
    return t == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH ? "GRAPH" : "GRAPHS";
}

qf_status qf_keep_opaque_node(qf_graph *g, const Onnx__NodeProto *np, const char *name,
                              bool attrs, qf_node **out)
{
    *out = NULL;
    const char *op_type = qf_keep_str(np->op_type);
    size_t total = 0;
    for (size_t k = 0; attrs && k < np->n_attribute; k++) {
        const Onnx__AttributeProto *a = np->attribute[k];
        if (a->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH ||
            a->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS || a->g || a->n_graphs)
            return qf_error(QF_ERR_UNSUPPORTED,
                            "node '%s' (%s): attribute '%s' is a subgraph (%s); qfold keeps ops it "
                            "does not know only without subgraphs",
                            name, op_type, qf_keep_str(a->name), qf_keep_attr_type_name(a->type));
        size_t n = protobuf_c_message_get_packed_size(&a->base);
        total += qf_varint_size(n) + n;
    }
    if (!np->n_output)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): the node has no outputs", name, op_type);
    if (np->n_input > INT32_MAX || np->n_output > INT32_MAX)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s': too many inputs", name);
    int nin = (int)np->n_input, nout = (int)np->n_output;
    qf_value **none = qf_calloc(nin ? (size_t)nin : 1, sizeof *none);
    if (!none) return QF_ERR_NOMEM;
    qf_node *n = qf_graph_add_node(g, QF_OP_OPAQUE, name, nin, none, nout);
    qf_free(none);
    if (!n) return QF_ERR_NOMEM;
    QF_TRY(qf_node_set_attr_string(g, n, "op_type", op_type));
    QF_TRY(qf_node_set_attr_string(g, n, "domain", qf_keep_str(np->domain)));
    if (!np->name || !*np->name) QF_TRY(qf_node_set_attr_int(g, n, "unnamed", 1));
    if (total) {
        /* Each AttributeProto as varint(length) + bytes: the payload of a
         * length-delimited protobuf-c unknown field, as export writes it. */
        int64_t len = (int64_t)total;
        qf_tensor t;
        QF_TRY(qf_tensor_init(&t, QF_DTYPE_U8, 1, &len));
        uint8_t *p = t.data;
        for (size_t k = 0; k < np->n_attribute; k++) {
            size_t sz = protobuf_c_message_get_packed_size(&np->attribute[k]->base);
            p += qf_varint_put(p, sz);
            p += protobuf_c_message_pack(&np->attribute[k]->base, p);
        }
        qf_status st = (size_t)(p - (uint8_t *)t.data) == total
                           ? qf_node_set_attr_tensor(g, n, "attributes", &t)
                           : qf_error(QF_ERR_INTERNAL, "protobuf packing went wrong");
        qf_tensor_free(&t);
        QF_TRY(st);
    }
    /* Output types as the model declares them; dtype 0 = unknown. */
    int64_t *types = qf_calloc((size_t)nout * (2 + QF_MAX_DIMS) + 1, sizeof *types);
    int64_t *empty = qf_calloc((size_t)nout + 1, sizeof *empty);
    if (!types || !empty) {
        qf_free(types);
        qf_free(empty);
        return QF_ERR_NOMEM;
    }
    int nt = 0, ne = 0;
    for (int k = 0; k < nout; k++) {
        const char *o = qf_keep_str(np->output[k]);
        if (!*o) empty[ne++] = k;
        const qf_graph_note *tn = *o ? qf_graph_note_find(g, QF_KEEP_TYPE, o) : NULL;
        const int64_t *t = tn ? (const int64_t *)(const void *)tn->data : NULL;
        if (t && qf_dtype_valid((int)t[0])) {
            for (int d = 0; d < 2 + (int)t[1]; d++) types[nt++] = t[d];
        } else {
            types[nt++] = QF_DTYPE_UNDEFINED;
            types[nt++] = 0;
        }
    }
    qf_status st = nout ? qf_node_set_attr_ints(g, n, "output_types", types, nt) : QF_OK;
    if (st == QF_OK && ne) st = qf_node_set_attr_ints(g, n, "empty_outputs", empty, ne);
    qf_free(types);
    qf_free(empty);
    QF_TRY(st);
    *out = n;
    return QF_OK;
}

/* --- export ------------------------------------------------------------------ */

const char *qf_keep_dim_name(const qf_graph *g, const char *name, int ndim, int i, bool *declared)
{
    *declared = false;
    const qf_graph_note *tn = qf_graph_note_find(g, QF_KEEP_TYPE, name);
    const qf_graph_note *dn = qf_graph_note_find(g, QF_KEEP_DIM_NAMES, name);
    if (!tn || !dn || ((const int64_t *)(const void *)tn->data)[1] != ndim || i >= ndim) return NULL;
    *declared = true;
    const char *p = (const char *)dn->data, *end = p + dn->len;
    for (int k = 0; k < i && p < end; k++) p += strlen(p) + 1;
    return p < end && *p ? p : NULL;
}

const char *qf_onnx_dim_name(const qf_graph *g, const char *value, int ndim, int i)
{
    bool declared;
    return qf_keep_dim_name(g, value, ndim, i, &declared);
}

bool qf_keep_declared_type(const qf_graph *g, const char *name, int32_t *elem_type, int *ndim,
                           int64_t *dims)
{
    const qf_graph_note *tn = qf_graph_note_find(g, QF_KEEP_TYPE, name);
    if (!tn) return false;
    const int64_t *t = (const int64_t *)(const void *)tn->data;
    *elem_type = (int32_t)t[0];
    *ndim = (int)t[1];
    for (int d = 0; d < *ndim; d++) dims[d] = t[2 + d];
    return true;
}

bool qf_onnx_declared_shape(const qf_graph *g, const char *value, int *ndim, int64_t *dims)
{
    int32_t et;
    return qf_keep_declared_type(g, value, &et, ndim, dims);
}

const char *qf_keep_value_doc(const qf_graph *g, const char *name, qf_arena *a)
{
    (void)a;
    const qf_graph_note *n = qf_graph_note_find(g, QF_KEEP_VALUE_DOC, name);
    return n ? (const char *)n->data : NULL;
}

static ProtobufCMessageUnknownField *qf_keep_unknown(qf_arena *a, ProtobufCMessage *msg, size_t more)
{
    size_t n = msg->n_unknown_fields;
    ProtobufCMessageUnknownField *f = qf_arena_alloc(a, sizeof *f * (n + more + 1));
    if (!f) return NULL;
    if (n) memcpy(f, msg->unknown_fields, sizeof *f * n);
    msg->unknown_fields = f;
    return f + n;
}

/* Append `len` bytes of a packed message as length-delimited field `tag` of msg. */
static qf_status qf_keep_put_field(qf_arena *a, ProtobufCMessage *msg, uint32_t tag,
                                   const uint8_t *data, size_t len)
{
    ProtobufCMessageUnknownField *f = qf_keep_unknown(a, msg, 1);
    uint8_t *buf = qf_arena_alloc(a, qf_varint_size(len) + len + 1);
    if (!f || !buf) return qf_error(QF_ERR_NOMEM, "out of memory");
    size_t h = qf_varint_put(buf, len);
    if (len) memcpy(buf + h, data, len);
    f->tag = tag;
    f->wire_type = PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED;
    f->len = h + len;
    f->data = buf;
    msg->n_unknown_fields++;
    return QF_OK;
}

qf_status qf_keep_opaque_fill(const qf_node *n, qf_arena *a, Onnx__NodeProto *np)
{
    const char *domain = qf_node_attr_string(n, "domain", "");
    np->domain = *domain ? (char *)domain : NULL;
    if (qf_node_attr_int(n, "unnamed", 0)) np->name = NULL;
    int ne = 0;
    const int64_t *empty = qf_node_attr_ints(n, "empty_outputs", &ne);
    for (int k = 0; k < ne; k++) {
        int64_t s = empty[k];
        /* An output named "" in the file: still nameless unless a pass gave it a reader. */
        if (s >= 0 && s < (int64_t)np->n_output && s < n->noutputs && !n->outputs[s]->nuses &&
            !n->outputs[s]->is_output)
            np->output[s] = "";
    }
    const qf_attr *at = qf_node_attr(n, "attributes");
    if (!at || at->type != QF_ATTR_TENSOR || !at->t || !at->t->data) return QF_OK;
    const uint8_t *p = at->t->data, *end = p + qf_tensor_nbytes(at->t);
    size_t count = 0;
    for (const uint8_t *q = p; q < end; count++) {
        uint64_t len;
        size_t h = qf_varint_get(q, end, &len);
        if (!h || len > (uint64_t)(end - q - (ptrdiff_t)h))
            return qf_error(QF_ERR_INVALID, "node '%s' (%s): its kept attributes are malformed",
                            n->name, qf_op_label(n));
        q += h + len;
    }
    ProtobufCMessageUnknownField *f = qf_keep_unknown(a, &np->base, count);
    if (!f) return qf_error(QF_ERR_NOMEM, "out of memory");
    for (size_t k = 0; k < count; k++) {
        uint64_t len;
        size_t h = qf_varint_get(p, end, &len);
        f[k].tag = 5; /* NodeProto.attribute */
        f[k].wire_type = PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED;
        f[k].len = h + (size_t)len;
        f[k].data = (uint8_t *)p;
        p += h + len;
    }
    np->base.n_unknown_fields += (unsigned)count;
    return QF_OK;
}

qf_status qf_keep_node_doc(const qf_graph *g, qf_arena *a, Onnx__NodeProto *np)
{
    (void)a;
    if (!np->name) return QF_OK;
    const qf_graph_note *d = qf_graph_note_find(g, QF_KEEP_NODE_DOC, np->name);
    if (d) np->doc_string = (char *)d->data;
    return QF_OK;
}

/* Whether the model's value_info entry for v still describes it. */
static bool qf_keep_vi_fits(const qf_graph *g, const qf_value *v)
{
    if (!v->producer || v->is_output) return false;
    if (v->type.dtype == QF_DTYPE_UNDEFINED) return true; /* the model's word is all there is */
    int32_t et;
    int nd;
    int64_t dims[QF_MAX_DIMS];
    if (!qf_keep_declared_type(g, v->name, &et, &nd, dims)) return true; /* declares no shape */
    if (et != (int32_t)v->type.dtype || nd != v->type.ndim) return false;
    for (int d = 0; d < nd; d++)
        if (dims[d] >= 0 && v->type.dims[d] >= 0 && dims[d] != v->type.dims[d]) return false;
    return true;
}

qf_status qf_keep_export_model(const qf_graph *g, qf_arena *a, Onnx__ModelProto *m,
                               Onnx__GraphProto *gp)
{
    size_t nopset = 0;
    for (const qf_graph_note *n = qf_graph_notes(g); n; n = n->next) {
        switch (n->kind) {
        case QF_KEEP_PRODUCER_VERSION: m->producer_version = (char *)n->data; break;
        case QF_KEEP_DOMAIN: m->domain = (char *)n->data; break;
        case QF_KEEP_MODEL_VERSION:
            m->has_model_version = 1;
            memcpy(&m->model_version, n->data, sizeof m->model_version);
            break;
        case QF_KEEP_DOC: m->doc_string = (char *)n->data; break;
        case QF_KEEP_GRAPH_DOC: gp->doc_string = (char *)n->data; break;
        case QF_KEEP_OPSET: nopset++; break;
        default: break;
        }
    }
    /* Unknown fields go out in the order they were added: metadata_props
     * (14) before functions (25), as protobuf orders them. */
    for (const qf_graph_note *n = qf_graph_notes(g); n; n = n->next)
        if (n->kind == QF_KEEP_METADATA) QF_TRY(qf_keep_put_field(a, &m->base, 14, n->data, n->len));
    for (const qf_graph_note *n = qf_graph_notes(g); n; n = n->next)
        if (n->kind == QF_KEEP_FUNCTION) QF_TRY(qf_keep_put_field(a, &m->base, 25, n->data, n->len));
    for (const qf_graph_note *n = qf_graph_notes(g); n; n = n->next) {
        if (n->kind != QF_KEEP_VALUE_INFO) continue;
        const qf_value *v = qf_graph_find_value(g, n->name);
        if (v && qf_keep_vi_fits(g, v)) QF_TRY(qf_keep_put_field(a, &gp->base, 13, n->data, n->len));
    }
    if (!nopset) return QF_OK;
    size_t total = m->n_opset_import + nopset;
    Onnx__OperatorSetIdProto **arr = qf_arena_alloc(a, sizeof *arr * total);
    Onnx__OperatorSetIdProto *ids = qf_arena_alloc(a, sizeof *ids * nopset);
    if (!arr || !ids) return qf_error(QF_ERR_NOMEM, "out of memory");
    memcpy(arr, m->opset_import, sizeof *arr * m->n_opset_import);
    size_t k = 0;
    for (const qf_graph_note *n = qf_graph_notes(g); n; n = n->next) {
        if (n->kind != QF_KEEP_OPSET) continue;
        onnx__operator_set_id_proto__init(&ids[k]);
        ids[k].domain = (char *)n->name;
        ids[k].has_version = 1;
        memcpy(&ids[k].version, n->data, sizeof ids[k].version);
        arr[m->n_opset_import + k] = &ids[k];
        k++;
    }
    m->opset_import = arr;
    m->n_opset_import = total;
    return QF_OK;
}

/* --- metadata_props (qfold/io.h) ------------------------------------------------ */

qf_status qf_onnx_metadata(const qf_graph *g, const char *key, char *buf, size_t size, bool *found)
{
    *found = false;
    if (size) buf[0] = 0;
    const qf_graph_note *n = qf_graph_note_find(g, QF_KEEP_METADATA, key);
    if (!n) return QF_OK;
    /* StringStringEntryProto: key 1, value 2 (both length-delimited);
     * other fields skipped by wire type. */
    const uint8_t *p = n->data, *end = n->data + n->len;
    while (p < end) {
        uint64_t tag, v;
        size_t k = qf_varint_get(p, end, &tag);
        if (!k) break;
        p += k;
        unsigned wt = (unsigned)(tag & 7);
        if (wt == 0) {
            if (!(k = qf_varint_get(p, end, &v))) break;
            p += k;
        } else if (wt == 1 || wt == 5) {
            if ((size_t)(end - p) < (wt == 1 ? 8u : 4u)) break;
            p += wt == 1 ? 8 : 4;
        } else if (wt == 2) {
            if (!(k = qf_varint_get(p, end, &v)) || v > (uint64_t)(end - (p + k))) break;
            p += k;
            if (tag >> 3 == 2) {
                if (v >= size || memchr(p, 0, (size_t)v))
                    return qf_error(QF_ERR_INVALID, "metadata_props '%s': the value is %s", key,
                                    v >= size ? "too long" : "not a string");
                memcpy(buf, p, (size_t)v);
                buf[v] = 0;
            }
            p += v;
        } else {
            break;
        }
    }
    if (p != end) return qf_error(QF_ERR_INVALID, "metadata_props '%s': malformed entry", key);
    *found = true;
    return QF_OK;
}

qf_status qf_onnx_metadata_set(qf_graph *g, const char *key, const char *value)
{
    size_t kl = strlen(key), vl = strlen(value);
    size_t n = 2 + qf_varint_size(kl) + kl + qf_varint_size(vl) + vl;
    uint8_t *b = qf_malloc(n), *p = b;
    if (!b) return QF_ERR_NOMEM;
    *p++ = (1 << 3) | 2;
    p += qf_varint_put(p, kl);
    memcpy(p, key, kl);
    p += kl;
    *p++ = (2 << 3) | 2;
    p += qf_varint_put(p, vl);
    memcpy(p, value, vl);
    qf_graph_note_remove(g, QF_KEEP_METADATA, key);
    qf_status st = qf_graph_note_add(g, QF_KEEP_METADATA, key, b, n);
    qf_free(b);
    return st;
}

qf_status qf_onnx_record_excluded(qf_graph *g, const qf_quant_float_node *left, int nleft)
{
    qf_strbuf b = {0};
    for (int i = 0; i < nleft; i++) {
        if (strcmp(left[i].reason, QF_QUANT_EXCLUDED) != 0) continue;
        if (b.len) qf_strbuf_puts(&b, "\n");
        qf_strbuf_puts(&b, left[i].name);
    }
    qf_status st = b.oom ? QF_ERR_NOMEM : b.len ? qf_onnx_metadata_set(g, QF_QUANT_EXCLUDED_KEY, b.p) : QF_OK;
    qf_strbuf_free(&b);
    return st;
}
