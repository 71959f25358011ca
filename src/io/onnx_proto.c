/* The protobuf side of ONNX: allocator hook, a wire-format pre-check, dtypes,
 * TensorProto -> qf_tensor, the model split and the raw_data-less
 * initializer decoding of the import fast path, and the TensorProto file
 * loader. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "../core/half.h"
#include "onnx_proto.h"

/* raw_data is little-endian by definition; qfold copies it as is. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "qfold's ONNX reader assumes a little-endian host"
#endif

static void *qf_pb_alloc(void *ud, size_t size)
{
    void *p = qf_malloc(size);
    if (!p && ud) *(bool *)ud = true;
    return p;
}

static void qf_pb_free(void *ud, void *p)
{
    (void)ud;
    qf_free(p);
}

ProtobufCAllocator qf_pb_allocator_make(bool *failed)
{
    *failed = false;
    return (ProtobufCAllocator){qf_pb_alloc, qf_pb_free, failed};
}

qf_status qf_pb_unpack_failed(bool alloc_failed, const char *kind)
{
    if (alloc_failed) return qf_error(QF_ERR_NOMEM, "out of memory while decoding the %s", kind);
    return qf_error(QF_ERR_PARSE, "not a valid %s (protobuf decoding failed)", kind);
}

/* --- wire-format pre-check ------------------------------------------------ */

#define QF_PB_MAX_DEPTH 64

enum { QF_PB_OK = 0, QF_PB_MALFORMED, QF_PB_TOO_DEEP, QF_PB_NUL };

/* Where the walk found a string field holding a NUL byte. protobuf-c hands
 * every `string` field over as a NUL-terminated char *, so after unpacking
 * "Relu\0Evil" is "Relu", an attribute "strides\0x" is "strides" and an
 * external-data location "w.bin\0../x" is "w.bin": the bytes are checked
 * here, on the wire, before anything is unpacked (ONNX Runtime refuses such
 * strings too). */
typedef struct {
    const ProtobufCMessageDescriptor *msg; /* the message holding the field */
    const ProtobufCFieldDescriptor *field;
    char node[128];    /* the enclosing node's or tensor's name (cut at its own NUL), or "" */
    const char *owner; /* "node", "tensor" */
    size_t at;         /* the NUL's offset in the string */
} qf_pb_nul;

static int qf_pb_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t r = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (*p >= end) return -1;
        uint8_t b = *(*p)++;
        if (shift < 64) r |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = r;
            return 0;
        }
    }
    return -1;
}

/* The first occurrence of string field `number` in the message [p, end), cut
 * at a NUL and at size - 1, into out ("" when absent). The message passed
 * the walk up to here, so only the lengths need guarding. */
static void qf_pb_string_field(const uint8_t *p, const uint8_t *end, unsigned number, char *out,
                               size_t size)
{
    out[0] = 0;
    while (p < end) {
        uint64_t key, len = 0;
        if (qf_pb_varint(&p, end, &key)) return;
        switch (key & 7) {
        case 0:
            if (qf_pb_varint(&p, end, &len)) return;
            break;
        case 1: p += end - p < 8 ? end - p : 8; break;
        case 5: p += end - p < 4 ? end - p : 4; break;
        case 2:
            if (qf_pb_varint(&p, end, &len) || len > (uint64_t)(end - p)) return;
            if ((key >> 3) == number) {
                size_t n = strnlen((const char *)p, len < size - 1 ? (size_t)len : size - 1);
                memcpy(out, p, n);
                out[n] = 0;
                return;
            }
            p += len;
            break;
        default: return;
        }
    }
}

/* Walk one message. Only length-delimited fields that the descriptor says
 * are messages are descended into, and string fields are searched for a NUL
 * (nul: where); everything else is skipped by size, so the walk costs
 * nothing for raw_data blobs. */
static int qf_pb_walk(const ProtobufCMessageDescriptor *d, const uint8_t *p, const uint8_t *end,
                      int depth, qf_pb_nul *nul)
{
    if (d == &onnx__node_proto__descriptor) {
        qf_pb_string_field(p, end, 3, nul->node, sizeof nul->node); /* NodeProto.name */
        nul->owner = "node";
    } else if (d == &onnx__tensor_proto__descriptor) {
        qf_pb_string_field(p, end, 8, nul->node, sizeof nul->node); /* TensorProto.name */
        nul->owner = "tensor";
    }
    if (depth > QF_PB_MAX_DEPTH) return QF_PB_TOO_DEEP;
    while (p < end) {
        uint64_t key, len;
        if (qf_pb_varint(&p, end, &key) || (key >> 3) == 0 || (key >> 3) > 0x1fffffff)
            return QF_PB_MALFORMED;
        switch (key & 7) {
        case 0:
            if (qf_pb_varint(&p, end, &len)) return QF_PB_MALFORMED;
            break;
        case 1:
            if (end - p < 8) return QF_PB_MALFORMED;
            p += 8;
            break;
        case 5:
            if (end - p < 4) return QF_PB_MALFORMED;
            p += 4;
            break;
        case 2: {
            if (qf_pb_varint(&p, end, &len) || len > (uint64_t)(end - p)) return QF_PB_MALFORMED;
            const ProtobufCFieldDescriptor *f =
                d ? protobuf_c_message_descriptor_get_field(d, (unsigned)(key >> 3)) : NULL;
            if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
                char node[sizeof nul->node];
                const char *owner = nul->owner;
                memcpy(node, nul->node, sizeof node);
                int r = qf_pb_walk(f->descriptor, p, p + len, depth + 1, nul);
                if (r) return r;
                memcpy(nul->node, node, sizeof node); /* back in the enclosing node */
                nul->owner = owner;
            } else if (f && f->type == PROTOBUF_C_TYPE_STRING) {
                const uint8_t *z = memchr(p, 0, (size_t)len);
                if (z) {
                    nul->msg = d;
                    nul->field = f;
                    nul->at = (size_t)(z - p);
                    return QF_PB_NUL;
                }
            }
            p += len;
            break;
        }
        default: /* groups (3, 4) are not used by onnx.proto; 6, 7 do not exist */
            return QF_PB_MALFORMED;
        }
    }
    return QF_PB_OK;
}

qf_status qf_pb_check(const ProtobufCMessageDescriptor *d, const void *data, size_t size,
                      const char *kind)
{
    const uint8_t *p = data;
    qf_pb_nul nul = {0};
    int r = qf_pb_walk(d, p, p + size, 0, &nul);
    if (r == QF_PB_NUL)
        return qf_error(QF_ERR_PARSE,
                        "not a valid %s: string field %s.%s%s%s%s%s%s holds a NUL byte at "
                        "offset %zu (it would be read cut there)",
                        kind, nul.msg->short_name, nul.field->name, nul.node[0] ? " of " : "",
                        nul.node[0] ? nul.owner : "", nul.node[0] ? " '" : "", nul.node,
                        nul.node[0] ? "'" : "", nul.at);
    if (r == QF_PB_MALFORMED)
        return qf_error(QF_ERR_PARSE, "not a valid %s (malformed or truncated protobuf data)",
                        kind);
    if (r == QF_PB_TOO_DEEP)
        return qf_error(QF_ERR_PARSE, "not a valid %s (messages nested more than %d levels deep)",
                        kind, QF_PB_MAX_DEPTH);
    return QF_OK;
}

/* --- dtypes ----------------------------------------------------------------- */

const char *qf_onnx_dtype_name(int code)
{
    static const char *const names[] = {"undefined",  "float32", "uint8",  "int8",   "uint16",
                                        "int16",      "int32",   "int64",  "string", "bool",
                                        "float16",    "float64", "uint32", "uint64", "complex64",
                                        "complex128", "bfloat16"};
    if (code >= 0 && code < (int)(sizeof names / sizeof names[0])) return names[code];
    return "unknown";
}

qf_status qf_onnx_dtype(int code, const char *what, qf_dtype *out)
{
    if (code == 0 || !qf_dtype_valid(code))
        return qf_error(QF_ERR_UNSUPPORTED,
                        "%s has dtype %s (code %d); qfold handles float32, float64, int8, uint8, "
                        "int32, int64 and bool",
                        what, qf_onnx_dtype_name(code), code);
    *out = (qf_dtype)code;
    return QF_OK;
}

int qf_onnx_half_code(int code)
{
    return code == QF_ONNX_FLOAT16 || code == QF_ONNX_BFLOAT16 ? code : 0;
}

qf_status qf_onnx_dtype_store(int code, const char *what, qf_dtype *out, int *store)
{
    *store = qf_onnx_half_code(code);
    if (*store) {
        *out = QF_DTYPE_F32;
        return QF_OK;
    }
    return qf_onnx_dtype(code, what, out);
}

/* --- TensorProto -> qf_tensor ---------------------------------------------- */

/* Typed-field payloads: count check, then one conversion loop (the typed
 * fields are only used by small tensors; big weights come as raw_data). */
static qf_status qf_tensor_typed(const Onnx__TensorProto *tp, const char *what, qf_tensor *t,
                                 int64_t numel, const char *shape)
{
    size_t have;
    switch (t->dtype) {
    case QF_DTYPE_F32: have = tp->n_float_data; break;
    case QF_DTYPE_F64: have = tp->n_double_data; break;
    case QF_DTYPE_I64: have = tp->n_int64_data; break;
    default: have = tp->n_int32_data; break;
    }
    if (have != (uint64_t)numel)
        return qf_error(QF_ERR_PARSE, "%s holds %zu values, but its shape %s of %s needs %" PRId64,
                        what, have, shape, qf_dtype_name(t->dtype), numel);
    size_t n = (size_t)numel;
    switch (t->dtype) {
    case QF_DTYPE_F32: memcpy(t->data, tp->float_data, n * sizeof(float)); break;
    case QF_DTYPE_F64: memcpy(t->data, tp->double_data, n * sizeof(double)); break;
    case QF_DTYPE_I64: memcpy(t->data, tp->int64_data, n * sizeof(int64_t)); break;
    case QF_DTYPE_I32: memcpy(t->data, tp->int32_data, n * sizeof(int32_t)); break;
    case QF_DTYPE_I8:
        for (size_t i = 0; i < n; i++) ((int8_t *)t->data)[i] = (int8_t)tp->int32_data[i];
        break;
    case QF_DTYPE_U8:
        for (size_t i = 0; i < n; i++) ((uint8_t *)t->data)[i] = (uint8_t)tp->int32_data[i];
        break;
    case QF_DTYPE_BOOL:
        for (size_t i = 0; i < n; i++) ((uint8_t *)t->data)[i] = tp->int32_data[i] != 0;
        break;
    case QF_DTYPE_UNDEFINED: break;
    }
    return QF_OK;
}

qf_status qf_onnx_tensor_meta(const Onnx__TensorProto *tp, const char *what, qf_tensor *out,
                              size_t *nbytes)
{
    memset(out, 0, sizeof *out);
    *nbytes = 0;
    if (!tp->has_data_type) return qf_error(QF_ERR_PARSE, "%s has no data type", what);
    qf_dtype dt = QF_DTYPE_UNDEFINED;
    int half;
    QF_TRY(qf_onnx_dtype_store(tp->data_type, what, &dt, &half));
    if (tp->n_dims > QF_MAX_DIMS)
        return qf_error(QF_ERR_UNSUPPORTED, "%s has rank %zu (qfold handles up to %d)", what,
                        tp->n_dims, QF_MAX_DIMS);
    if (tp->segment) return qf_error(QF_ERR_UNSUPPORTED, "%s is a segment of a tensor", what);
    /* Guard the element count: dims come from the file, and a product that
     * overflows would size the allocation wrongly. */
    size_t esize = half ? 2 : qf_dtype_size(dt);
    int64_t numel = 1;
    for (size_t i = 0; i < tp->n_dims; i++) {
        int64_t d = tp->dims[i];
        if (d < 0)
            return qf_error(QF_ERR_PARSE, "%s has a negative dimension (%" PRId64 ")", what, d);
        if (d && numel > (int64_t)(SIZE_MAX / esize / 2) / d)
            return qf_error(QF_ERR_PARSE, "%s: its shape has too many elements", what);
        numel *= d;
    }
    qf_tensor t = {.dtype = dt, .ndim = (int)tp->n_dims};
    for (size_t i = 0; i < tp->n_dims; i++) t.dims[i] = tp->dims[i];
    /* Also an empty tensor: a zero dim must not hide absurd others, which
     * later products (Flatten, Reshape) would overflow on. */
    if (!qf_shape_fits(dt, t.ndim, t.dims)) {
        char shape[160];
        return qf_error(QF_ERR_SHAPE, "%s has shape %s, larger than qfold handles (%lld bytes)", what,
                        qf_shape_str(t.ndim, t.dims, shape, sizeof shape), (long long)QF_MAX_TENSOR_BYTES);
    }
    *out = t;
    *nbytes = (size_t)numel * esize;
    return QF_OK;
}

/* Shared by the copying, the taking and the borrowing decoder: `take`, when
 * not NULL, is tp itself, whose raw_data buffer the tensor may take over;
 * `base`, when not NULL, is where tp's bytes start in a writable buffer that
 * raw_data points into (qf_onnx_tensor_borrow). */
static qf_status qf_tensor_decode(const Onnx__TensorProto *tp, Onnx__TensorProto *take,
                                  const uint8_t *base, const char *what, qf_tensor *out)
{
    memset(out, 0, sizeof *out);
    if (tp->n_external_data ||
        (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL))
        return qf_error(
            QF_ERR_UNSUPPORTED,
            "%s keeps its data in an external file, which only a model loaded from its file "
            "can read",
            what);
    qf_tensor t;
    size_t nbytes;
    QF_TRY(qf_onnx_tensor_meta(tp, what, &t, &nbytes));
    qf_dtype dt = t.dtype;
    int half = qf_onnx_half_code(tp->data_type);
    size_t esize = half ? 2 : qf_dtype_size(dt);
    int64_t numel = esize ? (int64_t)(nbytes / esize) : 0;
    char shape[160];
    qf_shape_str(t.ndim, t.dims, shape, sizeof shape);
    if (half) {
        /* Held as float32: converted, never borrowed. raw_data holds the
         * 2-byte values; the typed form keeps each in an int32_data entry. */
        const char *tname = qf_onnx_dtype_name(half);
        if (tp->has_raw_data && tp->raw_data.len != nbytes)
            return qf_error(QF_ERR_PARSE, "%s has %zu bytes of raw_data, but its shape %s of %s needs %zu", what,
                            tp->raw_data.len, shape, tname, nbytes);
        if (!tp->has_raw_data && numel > 0 && tp->n_int32_data != (size_t)numel)
            return qf_error(QF_ERR_PARSE, "%s holds %zu values, but its shape %s of %s needs %" PRId64, what,
                            tp->n_int32_data, shape, tname, numel);
        return qf_onnx_half_decode(tp->has_raw_data ? tp->raw_data.data : NULL,
                                   tp->has_raw_data ? NULL : tp->int32_data, &t, half, out);
    }
    if (tp->has_raw_data && tp->raw_data.len != nbytes)
        return qf_error(QF_ERR_PARSE,
                        "%s has %zu bytes of raw_data, but its shape %s of %s needs %zu", what,
                        tp->raw_data.len, shape, qf_dtype_name(dt), nbytes);
    if (base && tp->has_raw_data && nbytes) {
        /* The payload stays where it is in the model buffer. A kernel reads
         * it as float / int64 / ...: when it is not aligned for its dtype
         * (raw_data can start at any offset in the file), it moves back by
         * up to esize - 1 bytes over the message's own earlier bytes (the
         * raw_data key and length at least; all decoded by now), and is
         * copied only when there is not that much room. */
        uint8_t *p = tp->raw_data.data;
        size_t shift = (uintptr_t)p % esize, room = (size_t)(p - base);
        if (shift <= room) {
            if (shift) memmove(p - shift, p, nbytes);
            t.data = p - shift;
            t.owns = false;
            t.writable = true;
            *out = t;
            return QF_OK;
        }
    }
    if (take && tp->has_raw_data && nbytes && tp->raw_data.data &&
        (uintptr_t)tp->raw_data.data % esize == 0) {
        /* protobuf-c allocated raw_data through qf_pb_alloc (qf_malloc) for
         * exactly these bytes: the tensor takes the buffer over instead of
         * copying it, and the message forgets it (free_unpacked skips NULL).
         * The alignment check is for allocation hooks weaker than malloc. */
        t.data = take->raw_data.data;
        t.owns = true;
        take->raw_data.data = NULL;
        take->raw_data.len = 0;
        take->has_raw_data = 0;
        *out = t;
        return QF_OK;
    }
    t.data = qf_malloc(nbytes ? nbytes : 1);
    if (!t.data) return QF_ERR_NOMEM;
    t.owns = true;
    if (tp->has_raw_data) {
        if (nbytes) memcpy(t.data, tp->raw_data.data, nbytes);
    } else if (numel > 0) {
        qf_status st = qf_tensor_typed(tp, what, &t, numel, shape);
        if (st != QF_OK) {
            qf_tensor_free(&t);
            return st;
        }
    }
    *out = t;
    return QF_OK;
}

qf_status qf_onnx_half_decode(const uint8_t *raw, const int32_t *typed, const qf_tensor *meta, int code,
                              qf_tensor *out)
{
    qf_tensor t = *meta;
    int64_t n = qf_tensor_numel(&t);
    t.data = qf_malloc(n > 0 ? (size_t)n * sizeof(float) : 1);
    if (!t.data) return QF_ERR_NOMEM;
    t.owns = true;
    t.writable = false;
    float *y = t.data;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = raw ? (uint16_t)(raw[2 * i] | raw[2 * i + 1] << 8) : (uint16_t)typed[i];
        y[i] = qf_half_to_f32(h, code);
    }
    *out = t;
    return QF_OK;
}

qf_status qf_onnx_tensor_take(Onnx__TensorProto *tp, const char *what, qf_tensor *out)
{
    return qf_tensor_decode(tp, tp, NULL, what, out);
}

qf_status qf_onnx_tensor_borrow(const Onnx__TensorProto *tp, const uint8_t *base, const char *what,
                                qf_tensor *out)
{
    return qf_tensor_decode(tp, NULL, base, what, out);
}

/* --- the model split of the import fast path ---------------------------------- */

/* One field of a message: key at `start`, payload from `body` to `end`. */
typedef struct qf_pb_field {
    uint64_t num;
    unsigned wire;
    size_t start, body, end;
} qf_pb_field;

/* The field at *pos in data[0, size), or false when the bytes are not a
 * well-formed field (qf_pb_check has run, so this only guards the walk). */
static bool qf_pb_next(const uint8_t *data, size_t size, size_t *pos, qf_pb_field *f)
{
    const uint8_t *p = data + *pos, *end = data + size;
    uint64_t key, len;
    f->start = *pos;
    if (qf_pb_varint(&p, end, &key)) return false;
    f->num = key >> 3;
    f->wire = (unsigned)(key & 7);
    switch (f->wire) {
    case 0:
        f->body = (size_t)(p - data);
        if (qf_pb_varint(&p, end, &len)) return false;
        break;
    case 1:
    case 5: {
        size_t n = f->wire == 1 ? 8 : 4;
        if ((size_t)(end - p) < n) return false;
        f->body = (size_t)(p - data);
        p += n;
        break;
    }
    case 2:
        if (qf_pb_varint(&p, end, &len) || len > (uint64_t)(end - p)) return false;
        f->body = (size_t)(p - data);
        p += len;
        break;
    default: return false;
    }
    f->end = (size_t)(p - data);
    *pos = f->end;
    return true;
}

static size_t qf_pb_put_varint(uint8_t *out, uint64_t v)
{
    size_t n = 0;
    do {
        uint8_t b = v & 0x7f;
        v >>= 7;
        out[n++] = (uint8_t)(b | (v ? 0x80 : 0));
    } while (v);
    return n;
}

/* ModelProto.graph = 7, GraphProto.initializer = 5, both length-delimited. */
#define QF_PB_MODEL_GRAPH       7
#define QF_PB_GRAPH_INITIALIZER 5

void qf_onnx_split_free(qf_onnx_split *s)
{
    qf_free(s->skeleton);
    qf_free(s->init);
    memset(s, 0, sizeof *s);
}

qf_status qf_onnx_split_model(const void *data, size_t size, qf_onnx_split *out)
{
    memset(out, 0, sizeof *out);
    const uint8_t *d = data;
    qf_pb_field f, graph = {0};
    size_t ngraph = 0;
    for (size_t pos = 0; pos < size;) {
        if (!qf_pb_next(d, size, &pos, &f)) return QF_OK;
        if (f.num == QF_PB_MODEL_GRAPH && f.wire == 2) {
            graph = f;
            ngraph++;
        }
    }
    /* Two graph fields would be merged by the decoder: leave that to it. */
    if (ngraph != 1) return QF_OK;
    size_t ninit = 0, init_bytes = 0;
    for (size_t pos = graph.body; pos < graph.end;) {
        if (!qf_pb_next(d, graph.end, &pos, &f)) return QF_OK;
        if (f.num == QF_PB_GRAPH_INITIALIZER && f.wire == 2) {
            ninit++;
            init_bytes += f.end - f.start;
        }
    }
    if (ninit == 0) return QF_OK;

    /* skeleton = model bytes before the graph field, the graph field with
     * its initializers cut out (new length), the model bytes after it. The
     * fields keep their order, so decoding it gives the same ModelProto less
     * the initializers. */
    size_t body = graph.end - graph.body - init_bytes;
    uint8_t hdr[1 + 10];
    hdr[0] = (QF_PB_MODEL_GRAPH << 3) | 2;
    size_t hlen = 1 + qf_pb_put_varint(hdr + 1, body);
    out->skeleton_size = graph.start + hlen + body + (size - graph.end);
    out->skeleton = qf_malloc(out->skeleton_size);
    out->init = qf_malloc(ninit * sizeof *out->init);
    if (!out->skeleton || !out->init) {
        qf_onnx_split_free(out);
        return QF_ERR_NOMEM;
    }
    uint8_t *w = out->skeleton;
    memcpy(w, d, graph.start);
    w += graph.start;
    memcpy(w, hdr, hlen);
    w += hlen;
    for (size_t pos = graph.body; pos < graph.end;) {
        qf_pb_next(d, graph.end, &pos, &f); /* succeeded on the same bytes above */
        if (f.num == QF_PB_GRAPH_INITIALIZER && f.wire == 2) {
            out->init[out->ninit++] = (qf_onnx_range){f.body, f.end - f.body};
        } else {
            memcpy(w, d + f.start, f.end - f.start);
            w += f.end - f.start;
        }
    }
    memcpy(w, d + graph.end, size - graph.end);
    return QF_OK;
}

/* TensorProto.raw_data = 9, length-delimited. */
#define QF_PB_TENSOR_RAW_DATA 9

qf_status qf_onnx_initializer_unpack(uint8_t *data, qf_onnx_range r, ProtobufCAllocator *alloc,
                                     const bool *oom, qf_onnx_scratch *scratch,
                                     Onnx__TensorProto **out)
{
    *out = NULL;
    const uint8_t *msg = data + r.off;
    /* The message less every raw_data field into scratch; the payload of the
     * last one (protobuf: the last occurrence of a field wins) is raw_data. */
    if (scratch->cap < r.len) {
        uint8_t *p = qf_realloc(scratch->buf, r.len ? r.len : 1);
        if (!p) return QF_ERR_NOMEM;
        scratch->buf = p;
        scratch->cap = r.len;
    }
    size_t n = 0, raw_body = 0, raw_len = 0;
    bool raw = false;
    qf_pb_field f;
    for (size_t pos = 0; pos < r.len;) {
        if (!qf_pb_next(msg, r.len, &pos, &f))
            return qf_error(QF_ERR_PARSE, "not a valid ONNX model (malformed initializer)");
        if (f.num == QF_PB_TENSOR_RAW_DATA && f.wire == 2) {
            raw = true;
            raw_body = f.body;
            raw_len = f.end - f.body;
        } else {
            memcpy(scratch->buf + n, msg + f.start, f.end - f.start);
            n += f.end - f.start;
        }
    }
    Onnx__TensorProto *tp = onnx__tensor_proto__unpack(alloc, n, scratch->buf);
    if (!tp) return qf_pb_unpack_failed(*oom, "ONNX model");
    if (raw) {
        tp->has_raw_data = 1;
        tp->raw_data.len = raw_len;
        tp->raw_data.data = data + r.off + raw_body;
    }
    *out = tp;
    return QF_OK;
}

void qf_onnx_initializer_free(Onnx__TensorProto *tp, ProtobufCAllocator *alloc)
{
    if (!tp) return;
    /* raw_data points into the model buffer: not protobuf-c's to free. */
    tp->raw_data.data = NULL;
    tp->raw_data.len = 0;
    tp->has_raw_data = 0;
    onnx__tensor_proto__free_unpacked(tp, alloc);
}

qf_status qf_onnx_tensor_load(const char *path, qf_tensor *out)
{
    memset(out, 0, sizeof *out);
    void *data;
    size_t size;
    QF_TRY(qf_file_read(path, &data, &size));
    qf_status st =
        size ? qf_pb_check(&onnx__tensor_proto__descriptor, data, size, "ONNX tensor file")
             : qf_error(QF_ERR_PARSE, "not a valid ONNX tensor file (the file is empty)");
    Onnx__TensorProto *tp = NULL;
    bool oom;
    ProtobufCAllocator alloc = qf_pb_allocator_make(&oom);
    if (st == QF_OK) {
        tp = onnx__tensor_proto__unpack(&alloc, size, data);
        if (!tp) st = qf_pb_unpack_failed(oom, "ONNX tensor file");
    }
    qf_free(data);
    if (st == QF_OK) {
        char what[300];
        if (tp->name && tp->name[0])
            snprintf(what, sizeof what, "tensor '%.256s'", tp->name);
        else
            snprintf(what, sizeof what, "the tensor");
        st = qf_onnx_tensor_take(tp, what, out);
    }
    if (tp) onnx__tensor_proto__free_unpacked(tp, &alloc);
    if (st != QF_OK) return qf_error_prefix(st, "%s: ", path);
    return QF_OK;
}
