/* Reading a model file with its big initializer payloads left in it
 * (onnx_defer.h). The walk follows only the path to the weights: the
 * ModelProto's graph (field 7), the graph's initializers (field 5) and
 * their raw_data (field 9); every other field is read whole, with one
 * pread per field header and per field. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "onnx_defer.h"

typedef struct qf_sparse {
    int fd;
    const char *path;
    uint8_t *buf;
    size_t size, min;
    qf_onnx_range *holes;
    size_t nholes, cap;
    bool bad; /* not the expected structure: read whole */
} qf_sparse;

static qf_status qf_sparse_pread(int fd, const char *path, uint8_t *dst, size_t off, size_t n)
{
    while (n) {
        ssize_t k = pread(fd, dst, n, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return qf_error(QF_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
        if (k == 0)
            return qf_error(QF_ERR_IO, "cannot read '%s': it got shorter while being read", path);
        dst += k;
        off += (size_t)k;
        n -= (size_t)k;
    }
    return QF_OK;
}

static qf_status qf_sparse_read(qf_sparse *s, size_t off, size_t n)
{
    return qf_sparse_pread(s->fd, s->path, s->buf + off, off, n);
}

static bool qf_sparse_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t r = 0;
    for (int i = 0; i < 10 && *p < end; i++) {
        uint8_t b = *(*p)++;
        r |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *v = r;
            return true;
        }
    }
    return false;
}

/* One message in [start, end) at nesting `level` (0 model, 1 graph, 2 tensor). */
static qf_status qf_sparse_walk(qf_sparse *s, int level, size_t start, size_t end)
{
    size_t pos = start;
    while (pos < end && !s->bad) {
        size_t h = end - pos < 24 ? end - pos : 24;
        QF_TRY(qf_sparse_read(s, pos, h));
        const uint8_t *p = s->buf + pos, *e = p + h;
        uint64_t key, len = 0;
        if (!qf_sparse_varint(&p, e, &key)) break;
        unsigned wire = (unsigned)(key & 7);
        uint64_t field = key >> 3;
        if (wire == 0) {
            if (!qf_sparse_varint(&p, e, &len)) break;
            pos = (size_t)(p - s->buf);
            continue;
        }
        if (wire == 1 || wire == 5) {
            size_t k = wire == 1 ? 8 : 4;
            size_t body = (size_t)(p - s->buf);
            if (end - body < k) break;
            QF_TRY(qf_sparse_read(s, body, k));
            pos = body + k;
            continue;
        }
        if (wire != 2 || !qf_sparse_varint(&p, e, &len)) break;
        size_t body = (size_t)(p - s->buf);
        if (len > end - body) break;
        if ((level == 0 && field == 7) || (level == 1 && field == 5)) {
            QF_TRY(qf_sparse_walk(s, level + 1, body, body + (size_t)len));
        } else if (level == 2 && field == 9 && len >= s->min) {
            if (s->nholes == s->cap) {
                size_t nc = s->cap ? s->cap * 2 : 64;
                qf_onnx_range *nh = qf_realloc(s->holes, nc * sizeof *nh);
                if (!nh) return QF_ERR_NOMEM;
                s->holes = nh;
                s->cap = nc;
            }
            s->holes[s->nholes++] = (qf_onnx_range){body, (size_t)len};
        } else if (len) {
            QF_TRY(qf_sparse_read(s, body, (size_t)len));
        }
        pos = body + (size_t)len;
    }
    if (pos != end) s->bad = true;
    return QF_OK;
}

qf_status qf_onnx_read_sparse(int fd, const char *path, size_t size, size_t min, uint8_t **buf,
                              qf_onnx_range **holes, size_t *nholes)
{
    *buf = NULL;
    *holes = NULL;
    *nholes = 0;
    qf_sparse s = {.fd = fd, .path = path, .size = size, .min = min ? min : 1};
    s.buf = qf_malloc(size + 1);
    if (!s.buf) return QF_ERR_NOMEM;
    qf_status st = qf_sparse_walk(&s, 0, 0, size);
    if (st == QF_OK && s.bad) {
        /* Not the usual structure: the whole file, for the decoder to judge. */
        s.nholes = 0;
        st = qf_sparse_read(&s, 0, size);
    }
    if (st != QF_OK) {
        qf_free(s.buf);
        qf_free(s.holes);
        return st;
    }
    s.buf[size] = 0;
    *buf = s.buf;
    if (s.nholes) {
        *holes = s.holes;
        *nholes = s.nholes;
    } else {
        qf_free(s.holes);
    }
    return QF_OK;
}

qf_status qf_onnx_fill_hole(int fd, const char *path, uint8_t *buf, qf_onnx_range hole)
{
    return qf_sparse_pread(fd, path, buf + hole.off, hole.off, hole.len);
}
