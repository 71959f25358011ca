/* .npy arrays: read versions 1.0, 2.0, 3.0; write version 1.0.
 *
 * Layout: "\x93NUMPY", major, minor, header length (uint16 LE in v1, uint32
 * LE in v2/v3), an ASCII (v3: UTF-8) Python dict literal
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * padded with spaces and ended by '\n', then the raw C-order data. The dict
 * is parsed strictly (exactly these three keys, Python literal syntax); the
 * data must be exactly numel * itemsize bytes. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/half.h"
#include "io_internal.h"

static const struct {
    const char *descr;
    qf_dtype dt;
} qf_npy_types[] = {
    {"<f4", QF_DTYPE_F32}, {"<f8", QF_DTYPE_F64}, {"|i1", QF_DTYPE_I8},   {"|u1", QF_DTYPE_U8},
    {"<i4", QF_DTYPE_I32}, {"<i8", QF_DTYPE_I64}, {"|b1", QF_DTYPE_BOOL},
};

#define QF_NPY_NTYPES (sizeof qf_npy_types / sizeof qf_npy_types[0])

static qf_status qf_npy_bad(const char *why)
{
    return qf_error(QF_ERR_PARSE, "not a valid .npy file (%s)", why);
}

/* --- header dict parser ------------------------------------------------------ */

typedef struct qf_npy_header {
    char descr[16];
    int fortran; /* -1 = not seen */
    int ndim;    /* -1 = not seen */
    int64_t dims[QF_MAX_DIMS];
} qf_npy_header;

static const char *qf_skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

/* A quoted Python string without escapes into buf; NULL on error. */
static const char *qf_npy_string(const char *p, const char *end, char *buf, size_t size)
{
    if (p >= end || (*p != '\'' && *p != '"')) return NULL;
    char q = *p++;
    size_t n = 0;
    while (p < end && *p != q) {
        if (*p == '\\' || *p == '\n' || n + 1 >= size) return NULL;
        buf[n++] = *p++;
    }
    if (p >= end) return NULL;
    buf[n] = '\0';
    return p + 1;
}

static qf_status qf_npy_shape(const char **pp, const char *end, qf_npy_header *h)
{
    const char *p = *pp;
    if (p >= end || *p != '(') return qf_npy_bad("'shape' is not a tuple");
    p = qf_skip_ws(p + 1, end);
    int n = 0;
    bool comma = false;
    while (p < end && *p != ')') {
        if (*p < '0' || *p > '9')
            return qf_npy_bad("'shape' holds something other than non-negative integers");
        int64_t v = 0;
        while (p < end && *p >= '0' && *p <= '9') {
            if (v > (INT64_MAX - 9) / 10) return qf_npy_bad("a dimension in 'shape' is too large");
            v = v * 10 + (*p++ - '0');
        }
        if (p < end && *p == 'L') p++; /* Python 2 long literal */
        if (n == QF_MAX_DIMS)
            return qf_error(QF_ERR_UNSUPPORTED, "the array has more than %d dimensions",
                            QF_MAX_DIMS);
        h->dims[n++] = v;
        p = qf_skip_ws(p, end);
        comma = p < end && *p == ',';
        if (comma)
            p = qf_skip_ws(p + 1, end);
        else if (p < end && *p != ')')
            return qf_npy_bad("'shape' is not a tuple");
    }
    if (p >= end) return qf_npy_bad("'shape' is not closed");
    /* "(3)" is the integer 3 in Python, not a tuple. */
    if (n == 1 && !comma) return qf_npy_bad("'shape' is not a tuple");
    h->ndim = n;
    *pp = p + 1;
    return QF_OK;
}

static qf_status qf_npy_dict(const char *p, const char *end, qf_npy_header *h)
{
    h->descr[0] = '\0';
    h->fortran = -1;
    h->ndim = -1;
    p = qf_skip_ws(p, end);
    if (p >= end || *p != '{') return qf_npy_bad("the header is not a dict");
    p = qf_skip_ws(p + 1, end);
    while (p < end && *p != '}') {
        char key[32];
        if (!(p = qf_npy_string(p, end, key, sizeof key)))
            return qf_npy_bad("bad key in the header");
        p = qf_skip_ws(p, end);
        if (p >= end || *p != ':') return qf_npy_bad("the header is not a dict");
        p = qf_skip_ws(p + 1, end);
        if (strcmp(key, "descr") == 0) {
            if (h->descr[0]) return qf_npy_bad("'descr' appears twice");
            if (!(p = qf_npy_string(p, end, h->descr, sizeof h->descr)) || !h->descr[0])
                return qf_npy_bad("'descr' is not a simple dtype string");
        } else if (strcmp(key, "fortran_order") == 0) {
            if (h->fortran >= 0) return qf_npy_bad("'fortran_order' appears twice");
            if (end - p >= 4 && memcmp(p, "True", 4) == 0) {
                h->fortran = 1;
                p += 4;
            } else if (end - p >= 5 && memcmp(p, "False", 5) == 0) {
                h->fortran = 0;
                p += 5;
            } else {
                return qf_npy_bad("'fortran_order' is not True or False");
            }
        } else if (strcmp(key, "shape") == 0) {
            if (h->ndim >= 0) return qf_npy_bad("'shape' appears twice");
            QF_TRY(qf_npy_shape(&p, end, h));
        } else {
            return qf_npy_bad("unexpected key in the header");
        }
        p = qf_skip_ws(p, end);
        if (p < end && *p == ',')
            p = qf_skip_ws(p + 1, end);
        else if (p < end && *p != '}')
            return qf_npy_bad("the header is not a dict");
    }
    if (p >= end) return qf_npy_bad("the header dict is not closed");
    if (qf_skip_ws(p + 1, end) != end) return qf_npy_bad("text after the header dict");
    if (!h->descr[0] || h->fortran < 0 || h->ndim < 0)
        return qf_npy_bad("the header lacks 'descr', 'fortran_order' or 'shape'");
    return QF_OK;
}

static qf_status qf_npy_dtype(const char *descr, qf_dtype *dt)
{
    for (size_t i = 0; i < QF_NPY_NTYPES; i++) {
        const char *d = qf_npy_types[i].descr;
        /* 1-byte types have no byte order: accept '|', '<' and '=' alike. */
        bool one = d[0] == '|' && (descr[0] == '<' || descr[0] == '=' || descr[0] == '|');
        if (strcmp(descr, d) == 0 || (one && strcmp(descr + 1, d + 1) == 0)) {
            *dt = qf_npy_types[i].dt;
            return QF_OK;
        }
    }
    if (descr[0] == '>')
        return qf_error(QF_ERR_UNSUPPORTED,
                        "big-endian data ('%s'); qfold reads little-endian arrays", descr);
    return qf_error(
        QF_ERR_UNSUPPORTED,
        "dtype '%s'; qfold reads float32, float64, int8, uint8, int32, int64 and bool arrays",
        descr);
}

/* --- load ----------------------------------------------------------------------- */

static qf_status qf_read_exact(int fd, void *buf, size_t n, size_t *got)
{
    unsigned char *p = buf;
    *got = 0;
    while (*got < n) {
        ssize_t r = read(fd, p + *got, n - *got);
        if (r < 0) {
            if (errno == EINTR) continue;
            return qf_error(QF_ERR_IO, "read failed: %s", strerror(errno));
        }
        if (r == 0) break;
        *got += (size_t)r;
    }
    return QF_OK;
}

/* The header: dtype and shape into *info (data NULL), the data's offset
 * into *off. A regular file must hold exactly the data the shape needs. */
static qf_status qf_npy_read_header(int fd, qf_tensor *info, size_t *off_out, bool *half)
{
    unsigned char pre[12];
    size_t got;
    QF_TRY(qf_read_exact(fd, pre, 10, &got));
    if (got < 10 && (got < 6 || memcmp(pre, "\x93NUMPY", 6) == 0))
        return qf_npy_bad(got ? "the file is too short" : "the file is empty");
    if (memcmp(pre, "\x93NUMPY", 6) != 0) return qf_npy_bad("bad magic");
    int major = pre[6], minor = pre[7];
    if (major < 1 || major > 3 || minor != 0) {
        char why[64];
        snprintf(why, sizeof why, "unknown format version %d.%d", major, minor);
        return qf_npy_bad(why);
    }
    size_t hlen = (size_t)pre[8] | (size_t)pre[9] << 8, off = 10;
    if (major >= 2) {
        QF_TRY(qf_read_exact(fd, pre + 10, 2, &got));
        if (got < 2) return qf_npy_bad("truncated header");
        hlen |= (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
        off = 12;
    }
    if (hlen == 0 || hlen > (1u << 20)) return qf_npy_bad("bad header length");
    char *hdr = qf_malloc(hlen);
    if (!hdr) return QF_ERR_NOMEM;
    qf_status st = qf_read_exact(fd, hdr, hlen, &got);
    if (st == QF_OK && got < hlen) st = qf_npy_bad("truncated header");
    if (st == QF_OK && hdr[hlen - 1] != '\n')
        st = qf_npy_bad("the header does not end with a newline");
    if (st == QF_OK && memchr(hdr, '\0', hlen)) st = qf_npy_bad("NUL byte in the header");
    qf_npy_header h;
    if (st == QF_OK) st = qf_npy_dict(hdr, hdr + hlen, &h);
    qf_free(hdr);
    QF_TRY(st);

    qf_dtype dt = QF_DTYPE_UNDEFINED;
    /* float16 (a half-precision model's data): read whole into float32. */
    bool f16 = half && (strcmp(h.descr, "<f2") == 0 || strcmp(h.descr, "=f2") == 0);
    if (half) *half = f16;
    if (f16)
        dt = QF_DTYPE_F32;
    else
        QF_TRY(qf_npy_dtype(h.descr, &dt));
    if (h.fortran)
        return qf_error(QF_ERR_UNSUPPORTED,
                        "Fortran-order array; save it in C order (np.ascontiguousarray)");
    size_t es = f16 ? 2 : qf_dtype_size(dt);
    int64_t numel = 1;
    for (int i = 0; i < h.ndim; i++) {
        if (h.dims[i] && numel > (int64_t)(SIZE_MAX / es / 2) / h.dims[i])
            return qf_npy_bad("shape too large");
        numel *= h.dims[i];
    }
    size_t nbytes = (size_t)numel * es;
    struct stat sb;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode)) {
        uint64_t rest = (uint64_t)sb.st_size - (off + hlen);
        if ((uint64_t)sb.st_size < off + hlen || rest != nbytes) {
            char why[200], shape[160];
            snprintf(why, sizeof why, "%" PRIu64 " data bytes, but shape %s of %s needs %zu",
                     (uint64_t)sb.st_size < off + hlen ? 0 : rest,
                     qf_shape_str(h.ndim, h.dims, shape, sizeof shape), f16 ? "float16" : qf_dtype_name(dt),
                     nbytes);
            return qf_npy_bad(why);
        }
    }
    qf_tensor_view(info, dt, h.ndim, h.dims, NULL);
    *off_out = off + hlen;
    return QF_OK;
}

/* Header, then the data read straight into the tensor: no second copy of a
 * large calibration set. */
static qf_status qf_npy_read(int fd, qf_tensor *out)
{
    qf_tensor info;
    size_t off, got;
    bool half;
    QF_TRY(qf_npy_read_header(fd, &info, &off, &half));
    size_t nbytes = qf_tensor_nbytes(&info);
    qf_tensor t;
    QF_TRY(qf_tensor_init(&t, info.dtype, info.ndim, info.dims));
    /* float16: the 2-byte values into the float32 buffer's upper half, then
     * widened in place from the front (element i's source lies at or past i). */
    if (half) nbytes /= 2;
    unsigned char *dst = (unsigned char *)t.data + (half ? nbytes : 0);
    qf_status st = qf_read_exact(fd, dst, nbytes, &got);
    unsigned char extra;
    size_t more = 0;
    if (st == QF_OK && got == nbytes) st = qf_read_exact(fd, &extra, 1, &more);
    if (st == QF_OK && (got != nbytes || more))
        st = qf_npy_bad(got != nbytes ? "truncated data" : "extra bytes after the data");
    if (st != QF_OK) {
        qf_tensor_free(&t);
        return st;
    }
    if (half) {
        float *y = t.data;
        for (size_t i = 0; i < nbytes / 2; i++) y[i] = qf_f16_to_f32((uint16_t)(dst[2 * i] | dst[2 * i + 1] << 8));
    }
    *out = t;
    return QF_OK;
}

qf_status qf_npy_load(const char *path, qf_tensor *out)
{
    memset(out, 0, sizeof *out);
    int fd;
    struct stat st_file;
    QF_TRY(qf_file_open_regular(path, &fd, &st_file));
    qf_status st = qf_npy_read(fd, out);
    close(fd);
    if (st != QF_OK) return qf_error_prefix(st, "%s: ", path);
    return QF_OK;
}

/* --- reading rows --------------------------------------------------------------- */

struct qf_npy_file {
    int fd;
    char *path;
    size_t off;      /* the data's offset in the file */
    size_t row;      /* bytes per row (one index of the first axis) */
    qf_tensor info;  /* dtype and shape; data NULL */
};

qf_status qf_npy_open(const char *path, qf_npy_file **out)
{
    *out = NULL;
    qf_npy_file *f = qf_calloc(1, sizeof *f);
    size_t n = strlen(path) + 1;
    char *p = qf_malloc(n);
    if (!f || !p) {
        qf_free(f);
        qf_free(p);
        return QF_ERR_NOMEM;
    }
    memcpy(p, path, n);
    f->path = p;
    /* A regular file only (a FIFO would block, /dev/zero never end): rows are
     * read at offsets. */
    struct stat sb;
    qf_status st = qf_file_open_regular(path, &f->fd, &sb);
    if (st != QF_OK) {
        qf_npy_close(f);
        return st;
    }
    st = qf_npy_read_header(f->fd, &f->info, &f->off, NULL);
    if (st != QF_OK) {
        qf_npy_close(f);
        return qf_error_prefix(st, "%s: ", path);
    }
    /* One row: the element size times every dim but the first (dims past
     * the header's size check: their product fits). */
    f->row = qf_dtype_size(f->info.dtype);
    for (int d = 1; d < f->info.ndim; d++) f->row *= (size_t)f->info.dims[d];
    *out = f;
    return QF_OK;
}

const qf_tensor *qf_npy_info(const qf_npy_file *f) { return &f->info; }

size_t qf_npy_row_bytes(const qf_npy_file *f) { return f->row; }

qf_status qf_npy_read_rows(qf_npy_file *f, int64_t first, int64_t count, void *dst)
{
    int64_t n = f->info.ndim >= 1 ? f->info.dims[0] : 0;
    if (first < 0 || count < 0 || first > n || count > n - first)
        return qf_error(QF_ERR_INVALID, "%s: rows %lld..%lld of %lld", f->path, (long long)first,
                        (long long)(first + count - 1), (long long)n);
    unsigned char *p = dst;
    size_t want = (size_t)count * f->row, got = 0;
    off_t at = (off_t)(f->off + (size_t)first * f->row);
    while (got < want) {
        ssize_t r = pread(f->fd, p + got, want - got, at + (off_t)got);
        if (r < 0) {
            if (errno == EINTR) continue;
            return qf_error(QF_ERR_IO, "%s: read failed: %s", f->path, strerror(errno));
        }
        if (r == 0) return qf_error(QF_ERR_PARSE, "%s: not a valid .npy file (truncated data)", f->path);
        got += (size_t)r;
    }
    return QF_OK;
}

void qf_npy_close(qf_npy_file *f)
{
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    qf_free(f->path);
    qf_free(f);
}

/* --- a data source over .npy files ----------------------------------------------- */

struct qf_npy_source {
    qf_data_source src;
    int n;
    qf_npy_file *files[QF_NPY_SOURCE_MAX];
    const qf_tensor *info[QF_NPY_SOURCE_MAX];
    void *buf[QF_NPY_SOURCE_MAX];
    size_t cap[QF_NPY_SOURCE_MAX];
};

static qf_status qf_npy_source_read(const qf_data_source *src, int64_t first, int64_t count, const void **rows)
{
    qf_npy_source *s = src->ud;
    for (int i = 0; i < s->n; i++) {
        size_t need = (size_t)count * s->files[i]->row;
        if (need > s->cap[i]) {
            /* Not realloc: the old rows need not be kept. */
            qf_free(s->buf[i]);
            s->cap[i] = 0;
            if (!(s->buf[i] = qf_malloc(need ? need : 1))) return QF_ERR_NOMEM;
            s->cap[i] = need;
        }
        QF_TRY(qf_npy_read_rows(s->files[i], first, count, s->buf[i]));
        rows[i] = s->buf[i];
    }
    return QF_OK;
}

qf_status qf_npy_source_init(qf_npy_source **out, qf_npy_file *const *files, int n)
{
    *out = NULL;
    if (n < 1 || n > QF_NPY_SOURCE_MAX)
        return qf_error(QF_ERR_INVALID, "a data source of %d files (1 to %d)", n, QF_NPY_SOURCE_MAX);
    qf_npy_source *s = qf_calloc(1, sizeof *s);
    if (!s) return QF_ERR_NOMEM;
    s->n = n;
    for (int i = 0; i < n; i++) {
        s->files[i] = files[i];
        s->info[i] = &files[i]->info;
    }
    s->src = (qf_data_source){.ninputs = n, .inputs = s->info, .read = qf_npy_source_read, .ud = s};
    *out = s;
    return QF_OK;
}

const qf_data_source *qf_npy_source_get(const qf_npy_source *s) { return &s->src; }

void qf_npy_source_free(qf_npy_source *s)
{
    if (!s) return;
    for (int i = 0; i < s->n; i++) qf_free(s->buf[i]);
    qf_free(s);
}

/* --- save ------------------------------------------------------------------------ */

qf_status qf_npy_save(const char *path, const qf_tensor *t)
{
    return qf_npy_save_as(path, t, 0);
}

qf_status qf_npy_save_as(const char *path, const qf_tensor *t, int store)
{
    const char *descr = NULL;
    for (size_t i = 0; i < QF_NPY_NTYPES; i++)
        if (qf_npy_types[i].dt == t->dtype) descr = qf_npy_types[i].descr;
    if (!descr)
        return qf_error(QF_ERR_UNSUPPORTED, "%s: cannot save a tensor of dtype %s", path,
                        qf_dtype_name(t->dtype));
    if (t->ndim < 0 || t->ndim > QF_MAX_DIMS || qf_tensor_numel(t) < 0)
        return qf_error(QF_ERR_INVALID, "%s: the tensor's shape is not known", path);
    size_t nbytes = qf_tensor_nbytes(t);
    if (nbytes && !t->data) return qf_error(QF_ERR_INVALID, "%s: the tensor has no data", path);
    store &= QF_STORE_DTYPE;
    if (t->dtype != QF_DTYPE_F32) store = 0;
    /* float16: written as numpy's '<f2'; bfloat16 (no numpy dtype): float32
     * holding the bfloat16 values. Both rounded to nearest even. */
    void *conv = NULL;
    const void *payload = t->data;
    if (store) {
        int64_t n = qf_tensor_numel(t);
        size_t out_bytes = store == QF_STORE_F16 ? (size_t)n * 2 : nbytes;
        conv = qf_malloc(out_bytes ? out_bytes : 1);
        if (!conv) return QF_ERR_NOMEM;
        const float *x = t->data;
        for (int64_t i = 0; i < n; i++) {
            if (store == QF_STORE_F16)
                ((uint16_t *)conv)[i] = qf_f32_to_f16(x[i]);
            else
                ((float *)conv)[i] = qf_half_round(x[i], QF_ONNX_BFLOAT16);
        }
        if (store == QF_STORE_F16) descr = "<f2";
        nbytes = out_bytes;
        payload = conv;
    }

    char shape[QF_MAX_DIMS * 24 + 8];
    size_t k = 0;
    k += (size_t)snprintf(shape + k, sizeof shape - k, "(");
    for (int i = 0; i < t->ndim; i++)
        k += (size_t)snprintf(shape + k, sizeof shape - k, "%s%" PRId64, i ? ", " : "", t->dims[i]);
    snprintf(shape + k, sizeof shape - k, t->ndim == 1 ? ",)" : ")");

    /* 10 bytes of preamble + dict + spaces + '\n', padded to a multiple of 64
     * as numpy does (aligned data for memory-mapping readers). */
    char hdr[512];
    memcpy(hdr, "\x93NUMPY\x01\x00", 8);
    int dict = snprintf(hdr + 10, sizeof hdr - 10,
                        "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
    size_t total = 10 + (size_t)dict + 1;
    total = (total + 63) / 64 * 64;
    memset(hdr + 10 + dict, ' ', total - 10 - (size_t)dict - 1);
    hdr[total - 1] = '\n';
    size_t hlen = total - 10;
    hdr[8] = (char)(hlen & 0xff);
    hdr[9] = (char)(hlen >> 8);

    const void *parts[2] = {hdr, payload};
    size_t sizes[2] = {total, nbytes};
    qf_status st = qf_file_write_parts(path, nbytes ? 2 : 1, parts, sizes);
    qf_free(conv);
    return st;
}
