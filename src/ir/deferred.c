/* Payloads left in the model file (graph.h, "payloads left in the file"):
 * where they are, the pending per-channel scale of a BN fold, and reading
 * them, scaled or not, into a caller's buffer or into the value's own. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/mem.h"
#include "graph_impl.h"

qf_status qf_graph_set_source(qf_graph *g, int fd, const char *path)
{
    struct qf_graph_impl *im = g->impl;
    struct stat st;
    if (im->has_src || fstat(fd, &st) != 0) {
        close(fd);
        return qf_error(QF_ERR_IO, "cannot read '%s': %s", path,
                        im->has_src ? "a second source" : strerror(errno));
    }
    im->src_path = qf_graph_strdup(g, path);
    if (!im->src_path) {
        close(fd);
        return QF_ERR_NOMEM;
    }
    im->has_src = true;
    im->src_fd = fd;
    im->src_size = (int64_t)st.st_size;
    im->src_mtime_sec = (int64_t)st.st_mtim.tv_sec;
    im->src_mtime_nsec = (int64_t)st.st_mtim.tv_nsec;
    return QF_OK;
}

qf_status qf_value_defer(qf_graph *g, qf_value *v, int64_t off)
{
    size_t n = qf_tensor_nbytes(&v->type);
    if (!g->impl->has_src || v->type.data || v->deferred || off < 0 || (int64_t)n < 0 ||
        off > g->impl->src_size - (int64_t)n)
        return qf_error(QF_ERR_INTERNAL, "value '%s' cannot be left in the file", v->name);
    v->deferred = qf_calloc(1, sizeof *v->deferred);
    if (!v->deferred) return QF_ERR_NOMEM;
    v->deferred->off = off;
    return QF_OK;
}

bool qf_value_has_data(const qf_value *v) { return v && (v->type.data || v->deferred); }

bool qf_graph_has_deferred(const qf_graph *g)
{
    for (int i = 0; i < g->nvalues; i++)
        if (g->values[i] && g->values[i]->deferred) return true;
    return false;
}

qf_status qf_value_defer_scale(qf_value *v, qf_scale_axis axis, int64_t groups, const double *s,
                               int64_t n)
{
    qf_deferred *d = v->deferred;
    if (!d || d->scale || v->type.dtype != QF_DTYPE_F32 || n < 1)
        return qf_error(QF_ERR_INTERNAL, "value '%s': no pending scale possible", v->name);
    d->scale = qf_malloc((size_t)n * sizeof *d->scale);
    if (!d->scale) return QF_ERR_NOMEM;
    memcpy(d->scale, s, (size_t)n * sizeof *s);
    d->nscale = n;
    d->axis = axis;
    d->groups = groups > 0 ? groups : 1;
    return QF_OK;
}

static qf_status qf_source_changed(const qf_graph *g, const qf_value *v, const char *how)
{
    return qf_error(QF_ERR_IO, "initializer '%s': the input file '%s' %s since it was loaded",
                    v->name, g->impl->src_path, how);
}

/* Raw bytes [off, off + n) of the payload. */
static qf_status qf_source_read(const qf_graph *g, const qf_value *v, size_t off, void *dst,
                                size_t n)
{
    const struct qf_graph_impl *im = g->impl;
    struct stat st;
    if (fstat(im->src_fd, &st) != 0)
        return qf_error(QF_ERR_IO, "cannot read '%s': %s", im->src_path, strerror(errno));
    if ((int64_t)st.st_size != im->src_size || (int64_t)st.st_mtim.tv_sec != im->src_mtime_sec ||
        (int64_t)st.st_mtim.tv_nsec != im->src_mtime_nsec)
        return qf_source_changed(g, v, "changed");
    unsigned char *p = dst;
    int64_t pos = v->deferred->off + (int64_t)off;
    while (n) {
        ssize_t k = pread(im->src_fd, p, n, (off_t)pos);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0)
            return qf_error(QF_ERR_IO, "cannot read '%s': %s", im->src_path, strerror(errno));
        if (k == 0) return qf_source_changed(g, v, "got shorter");
        p += k;
        pos += k;
        n -= (size_t)k;
    }
    return QF_OK;
}

int64_t qf_scale_channel(const qf_tensor *t, qf_scale_axis axis, int64_t groups, int64_t e,
                         int64_t *run_end)
{
    int64_t numel = qf_tensor_numel(t);
    if (axis == QF_SCALE_AXIS0) {
        int64_t inner = t->dims[0] ? numel / t->dims[0] : 1;
        if (inner < 1) inner = 1;
        *run_end = (e / inner + 1) * inner;
        return e / inner;
    }
    int64_t cin = t->dims[0], og = t->dims[1], cin_g = cin / (groups > 0 ? groups : 1);
    int64_t kk = cin > 0 && og > 0 ? numel / (cin * og) : 1;
    if (kk < 1) kk = 1;
    int64_t b = e / kk, c = b / og, j = b % og;
    *run_end = (b + 1) * kk;
    return (c / cin_g) * og + j;
}

/* The pending scale of float element e of v, and the end of e's run. */
static double qf_pending_scale(const qf_value *v, int64_t e, int64_t *run_end)
{
    const qf_deferred *d = v->deferred;
    return d->scale[qf_scale_channel(&v->type, d->axis, d->groups, e, run_end)];
}

static float qf_scale_one(float w, double s) { return (float)((double)w * s); }

qf_status qf_value_read(const qf_graph *g, const qf_value *v, size_t off, void *dst, size_t n,
                        bool scaled)
{
    if (!v->deferred) {
        if (!v->type.data) return qf_error(QF_ERR_INTERNAL, "value '%s' has no payload", v->name);
        memcpy(dst, (const unsigned char *)v->type.data + off, n);
        return QF_OK;
    }
    const qf_deferred *d = v->deferred;
    if (off + n < off || off + n > qf_tensor_nbytes(&v->type))
        return qf_error(QF_ERR_INTERNAL, "value '%s': read past its payload", v->name);
    QF_TRY(qf_source_read(g, v, off, dst, n));
    if (!scaled || !d->scale || !n) return QF_OK;
    unsigned char *p = dst;
    const size_t es = sizeof(float);
    size_t pos = off, end = off + n;
    /* A piece may start or end inside an element: that element is read
     * whole on its own, scaled, and its bytes in the piece replaced. */
    if (pos % es) {
        size_t e0 = pos / es, from = pos % es, k = es - from < end - pos ? es - from : end - pos;
        unsigned char b[sizeof(float)];
        QF_TRY(qf_source_read(g, v, e0 * es, b, es));
        int64_t run;
        float w;
        memcpy(&w, b, es);
        w = qf_scale_one(w, qf_pending_scale(v, (int64_t)e0, &run));
        memcpy(b, &w, es);
        memcpy(p, b + from, k);
        p += k;
        pos += k;
    }
    size_t tail = end > pos ? (end - pos) % es : 0;
    int64_t e = (int64_t)(pos / es), e_end = (int64_t)((end - tail) / es);
    while (e < e_end) {
        int64_t run;
        double s = qf_pending_scale(v, e, &run);
        if (run > e_end) run = e_end;
        for (int64_t k = e; k < run; k++, p += es) {
            float w;
            memcpy(&w, p, es);
            w = qf_scale_one(w, s);
            memcpy(p, &w, es);
        }
        e = run;
    }
    if (tail) {
        unsigned char b[sizeof(float)];
        QF_TRY(qf_source_read(g, v, (size_t)e_end * es, b, es));
        int64_t run;
        float w;
        memcpy(&w, b, es);
        w = qf_scale_one(w, qf_pending_scale(v, e_end, &run));
        memcpy(b, &w, es);
        memcpy(p, b, tail);
    }
    return QF_OK;
}

qf_status qf_value_load(const qf_graph *g, qf_value *v)
{
    if (!v->deferred) return QF_OK;
    qf_tensor t = v->type;
    t.data = NULL;
    t.owns = t.writable = false;
    size_t n = qf_tensor_nbytes(&t);
    t.data = qf_malloc(n ? n : 1);
    if (!t.data) return QF_ERR_NOMEM;
    t.owns = true;
    qf_status st = qf_value_read(g, v, 0, t.data, n, true);
    if (st != QF_OK) {
        qf_tensor_free(&t);
        return st;
    }
    qf_value_set_data(v, &t);
    return QF_OK;
}

qf_status qf_graph_load_all(const qf_graph *g)
{
    for (int i = 0; i < g->nvalues; i++)
        if (g->values[i] && g->values[i]->deferred) QF_TRY(qf_value_load(g, g->values[i]));
    return QF_OK;
}
