/* ONNX external data: reading initializers from side files confined to the
 * model's directory, and writing big initializers to one side file. See
 * external_data.h. */
/* realpath() and pread() are XSI / POSIX 2008 in glibc's headers. */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "external_data.h"

/* --- reading ----------------------------------------------------------------- */

typedef struct qf_ext_file {
    char *location; /* as the model wrote it */
    int fd;
    uint64_t size;
} qf_ext_file;

struct qf_ext_reader {
    char *dir;      /* the model's directory as given ("." when none) */
    char *dir_real; /* its real path, without symbolic links */
    const char *redirect_location, *redirect_path;
    qf_ext_file *files;
    size_t n, cap;
};

static char *qf_ext_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = qf_malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

bool qf_ext_is_external(const Onnx__TensorProto *tp)
{
    return tp->n_external_data ||
           (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL);
}

qf_status qf_ext_reader_init(qf_ext_reader **out, const char *model_path, const char *redirect_location,
                             const char *redirect_path)
{
    *out = NULL;
    qf_ext_reader *r = qf_calloc(1, sizeof *r);
    if (!r) return QF_ERR_NOMEM;
    r->redirect_location = redirect_location;
    r->redirect_path = redirect_path;
    if (model_path) {
        const char *slash = strrchr(model_path, '/');
        size_t n = slash ? (size_t)(slash - model_path) : 0;
        r->dir = qf_malloc(n + 2);
        if (!r->dir) {
            qf_free(r);
            return QF_ERR_NOMEM;
        }
        if (!slash)
            strcpy(r->dir, ".");
        else if (n == 0)
            strcpy(r->dir, "/");
        else {
            memcpy(r->dir, model_path, n);
            r->dir[n] = '\0';
        }
    }
    *out = r;
    return QF_OK;
}

void qf_ext_reader_free(qf_ext_reader *r)
{
    if (!r) return;
    for (size_t i = 0; i < r->n; i++) {
        if (r->files[i].fd >= 0) close(r->files[i].fd);
        qf_free(r->files[i].location);
    }
    qf_free(r->files);
    qf_free(r->dir);
    free(r->dir_real); /* from realpath */
    qf_free(r);
}

/* A decimal uint64 (offset, length): digits only, no sign, no overflow. */
static bool qf_ext_parse_u64(const char *s, uint64_t *v)
{
    if (!s || !*s) return false;
    uint64_t r = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return false;
        unsigned d = (unsigned)(*s - '0');
        if (r > (UINT64_MAX - d) / 10) return false;
        r = r * 10 + d;
    }
    *v = r;
    return true;
}

/* Is `location` a relative path without "." / ".." tricks that could leave
 * the directory? Returns the problem, or NULL. */
static const char *qf_ext_location_problem(const char *loc)
{
    if (!*loc) return "is empty";
    if (loc[0] == '/') return "is an absolute path";
    for (const char *p = loc; *p;) {
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.') return "has a '..' component";
        p += n;
        while (*p == '/') p++;
    }
    return NULL;
}

/* The side file `loc`, opened once and kept open for the next tensor. */
static qf_status qf_ext_open(qf_ext_reader *r, const char *loc, const char *what, qf_ext_file **out)
{
    for (size_t i = 0; i < r->n; i++)
        if (strcmp(r->files[i].location, loc) == 0) {
            *out = &r->files[i];
            return QF_OK;
        }
    char *path = NULL, *real = NULL;
    qf_status st = QF_OK;
    bool trusted = r->redirect_location && strcmp(loc, r->redirect_location) == 0;
    if (trusted) {
        path = qf_ext_strdup(r->redirect_path);
        if (!path) return QF_ERR_NOMEM;
    } else {
        const char *problem = qf_ext_location_problem(loc);
        if (problem)
            return qf_error(QF_ERR_INVALID,
                            "%s: external data location '%s' %s; side files must be in the model's "
                            "directory",
                            what, loc, problem);
        if (!r->dir_real && !(r->dir_real = realpath(r->dir, NULL)))
            return qf_error(QF_ERR_IO, "%s: cannot resolve the model's directory '%s': %s", what, r->dir,
                            strerror(errno));
        size_t n = strlen(r->dir) + strlen(loc) + 2;
        char *joined = qf_malloc(n);
        if (!joined) return QF_ERR_NOMEM;
        snprintf(joined, n, "%s/%s", r->dir, loc);
        /* Symbolic links are resolved before anything is opened: the file
         * actually read must lie under the model's directory. */
        real = realpath(joined, NULL);
        int e = errno;
        qf_free(joined);
        if (!real)
            return qf_error(QF_ERR_IO, "%s: cannot open external data file '%s': %s", what, loc, strerror(e));
        size_t dl = strlen(r->dir_real);
        if (strcmp(real, r->dir_real) == 0) {
            free(real);
            return qf_error(QF_ERR_INVALID,
                            "%s: external data location '%s' names the model's directory itself, not a side "
                            "file in it",
                            what, loc);
        }
        bool inside = strncmp(real, r->dir_real, dl) == 0 &&
                      (real[dl] == '/' || (dl == 1 && r->dir_real[0] == '/'));
        if (!inside) {
            free(real);
            return qf_error(QF_ERR_INVALID,
                            "%s: external data location '%s' leads outside the model's directory "
                            "(through a symbolic link)",
                            what, loc);
        }
        path = real;
    }
    int fd = -1;
    struct stat sb;
    st = qf_file_open_regular(path, &fd, &sb);
    if (trusted)
        qf_free(path);
    else
        free(real);
    if (st != QF_OK) return qf_error_prefix(st, "%s: external data '%s': ", what, loc);
    if (r->n == r->cap) {
        size_t ncap = r->cap ? r->cap * 2 : 4;
        qf_ext_file *nf = qf_realloc(r->files, ncap * sizeof *nf);
        if (!nf) {
            close(fd);
            return QF_ERR_NOMEM;
        }
        r->files = nf;
        r->cap = ncap;
    }
    qf_ext_file *f = &r->files[r->n];
    f->location = qf_ext_strdup(loc);
    if (!f->location) {
        close(fd);
        return QF_ERR_NOMEM;
    }
    f->fd = fd;
    f->size = (uint64_t)sb.st_size;
    r->n++;
    *out = f;
    return QF_OK;
}

qf_status qf_ext_read_tensor(qf_ext_reader *r, const Onnx__TensorProto *tp, const char *what, qf_tensor *out)
{
    memset(out, 0, sizeof *out);
    if (!r || !r->dir)
        return qf_error(QF_ERR_UNSUPPORTED,
                        "%s keeps its data in an external file, which only a model loaded from its file can read",
                        what);
    qf_tensor t;
    size_t nbytes;
    QF_TRY(qf_onnx_tensor_meta(tp, what, &t, &nbytes));
    const char *loc = NULL, *off_s = NULL, *len_s = NULL;
    for (size_t i = 0; i < tp->n_external_data; i++) {
        const Onnx__StringStringEntryProto *e = tp->external_data[i];
        if (!e->key) continue;
        /* The last entry of a key wins, as in onnx's loader; checksum and
         * unknown keys are ignored. */
        if (strcmp(e->key, "location") == 0) loc = e->value ? e->value : "";
        else if (strcmp(e->key, "offset") == 0) off_s = e->value ? e->value : "";
        else if (strcmp(e->key, "length") == 0) len_s = e->value ? e->value : "";
    }
    if (!loc) return qf_error(QF_ERR_INVALID, "%s: external data without a 'location'", what);
    uint64_t off = 0, len = nbytes;
    if (off_s && !qf_ext_parse_u64(off_s, &off))
        return qf_error(QF_ERR_INVALID, "%s: external data offset '%s' is not a number of bytes", what, off_s);
    if (len_s && !qf_ext_parse_u64(len_s, &len))
        return qf_error(QF_ERR_INVALID, "%s: external data length '%s' is not a number of bytes", what, len_s);
    char shape[160];
    qf_shape_str(t.ndim, t.dims, shape, sizeof shape);
    if (len != nbytes)
        return qf_error(QF_ERR_INVALID,
                        "%s: external data length %" PRIu64 ", but its shape %s of %s needs %zu bytes", what, len,
                        shape, qf_onnx_dtype_name(tp->data_type), nbytes);
    qf_ext_file *f = NULL;
    QF_TRY(qf_ext_open(r, loc, what, &f));
    /* The range must lie in the file: checked without overflow. */
    if (off > f->size || len > f->size - off)
        return qf_error(QF_ERR_INVALID,
                        "%s: external data bytes %" PRIu64 " to %" PRIu64 " are past the end of '%s' (%" PRIu64
                        " bytes)",
                        what, off, off + len < off ? UINT64_MAX : off + len, loc, f->size);
    /* One allocation per tensor, filled by pread straight from the file: the
     * weights exist once in memory, as for a payload of the model buffer. */
    t.data = qf_malloc(nbytes ? nbytes : 1);
    if (!t.data) return QF_ERR_NOMEM;
    t.owns = true;
    uint8_t *p = t.data;
    size_t done = 0;
    while (done < nbytes) {
        size_t chunk = nbytes - done < ((size_t)1 << 30) ? nbytes - done : ((size_t)1 << 30);
        ssize_t k = pread(f->fd, p + done, chunk, (off_t)(off + done));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            qf_status st = k < 0 ? qf_error(QF_ERR_IO, "%s: cannot read external data '%s': %s", what, loc,
                                            strerror(errno))
                                 : qf_error(QF_ERR_PARSE, "%s: external data '%s' was truncated while read",
                                            what, loc);
            qf_tensor_free(&t);
            return st;
        }
        done += (size_t)k;
    }
    int half = qf_onnx_half_code(tp->data_type);
    if (half) {
        /* The 2-byte values read, then widened to the float32 qfold holds. */
        qf_tensor wide;
        qf_status st = qf_onnx_half_decode(t.data, NULL, &t, half, &wide);
        qf_tensor_free(&t);
        QF_TRY(st);
        t = wide;
    }
    *out = t;
    return QF_OK;
}

/* --- writing ----------------------------------------------------------------- */

void qf_ext_plan_free(qf_ext_plan *p)
{
    qf_free(p->e);
    memset(p, 0, sizeof *p);
}

static Onnx__StringStringEntryProto *qf_ext_kv(const char *key, const char *value,
                                               void *(*alloc)(void *, size_t), void *ctx)
{
    Onnx__StringStringEntryProto *e = alloc(ctx, sizeof *e);
    size_t n = strlen(value) + 1;
    char *v = alloc(ctx, n);
    if (!e || !v) return NULL;
    onnx__string_string_entry_proto__init(e);
    memcpy(v, value, n);
    e->key = (char *)key;
    e->value = v;
    return e;
}

qf_status qf_ext_plan_build(qf_ext_plan *p, Onnx__GraphProto *gp, const char *location, size_t threshold,
                            void *(*alloc)(void *ctx, size_t size), void *ctx)
{
    memset(p, 0, sizeof *p);
    for (size_t i = 0; i < gp->n_initializer; i++) {
        Onnx__TensorProto *tp = gp->initializer[i];
        if (!tp->has_raw_data || tp->raw_data.len < threshold || !tp->raw_data.len) continue;
        uint64_t off = (p->end + QF_EXT_ALIGN - 1) / QF_EXT_ALIGN * QF_EXT_ALIGN;
        if (p->n == p->cap) {
            size_t ncap = p->cap ? p->cap * 2 : 16;
            qf_ext_entry *ne = qf_realloc(p->e, ncap * sizeof *ne);
            if (!ne) return QF_ERR_NOMEM;
            p->e = ne;
            p->cap = ncap;
        }
        p->e[p->n++] = (qf_ext_entry){tp->raw_data.data, tp->raw_data.len, off};
        char ofs[24], len[24];
        snprintf(ofs, sizeof ofs, "%" PRIu64, off);
        snprintf(len, sizeof len, "%zu", tp->raw_data.len);
        Onnx__StringStringEntryProto **kv = alloc(ctx, 3 * sizeof *kv);
        if (!kv || !(kv[0] = qf_ext_kv("location", location, alloc, ctx)) ||
            !(kv[1] = qf_ext_kv("offset", ofs, alloc, ctx)) || !(kv[2] = qf_ext_kv("length", len, alloc, ctx)))
            return QF_ERR_NOMEM;
        p->end = off + tp->raw_data.len;
        tp->n_external_data = 3;
        tp->external_data = kv;
        tp->has_data_location = 1;
        tp->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
        tp->has_raw_data = 0;
        tp->raw_data.data = NULL;
        tp->raw_data.len = 0;
    }
    return QF_OK;
}

void qf_ext_plan_write(const qf_ext_plan *p, qf_file_writer *w)
{
    static const uint8_t zeros[QF_EXT_ALIGN];
    uint64_t pos = 0;
    for (size_t i = 0; i < p->n; i++) {
        /* Padding up to the aligned offset: less than one page. */
        qf_file_writer_put(w, zeros, (size_t)(p->e[i].offset - pos));
        qf_file_writer_put(w, p->e[i].data, p->e[i].size);
        pos = p->e[i].offset + p->e[i].size;
    }
}
