/* Several outputs written all or nothing (qfold/io.h, "several outputs"):
 * checked up front, staged under temporary names next to their final ones,
 * renamed together. The CLI's commands write their model, report and side
 * files through it; so can any program. */
/* realpath() is XSI in glibc's headers. */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qfold/io.h"

/* The parent directory of path and the name in it ("." for "o.onnx"). */
static void qf_outputs_split(const char *path, char *dir, size_t size, const char **name)
{
    const char *slash = strrchr(path, '/');
    *name = slash ? slash + 1 : path;
    if (!slash)
        snprintf(dir, size, ".");
    else if (slash == path)
        snprintf(dir, size, "/");
    else
        snprintf(dir, size, "%.*s", (int)(slash - path), path);
}

/* Identity of path: device + inode when it exists, and realpath(parent) +
 * "/" + name (NULL when the parent cannot be resolved). */
static void qf_outputs_identity(const char *path, bool *exists, unsigned long long *dev,
                                unsigned long long *ino, char **resolved)
{
    struct stat st;
    *exists = stat(path, &st) == 0;
    *dev = *exists ? (unsigned long long)st.st_dev : 0;
    *ino = *exists ? (unsigned long long)st.st_ino : 0;
    *resolved = NULL;
    char dir[PATH_MAX];
    const char *name;
    qf_outputs_split(path, dir, sizeof dir, &name);
    char *real = realpath(dir, NULL);
    if (!real) return;
    size_t n = strlen(real) + strlen(name) + 2;
    char *r = qf_malloc(n);
    if (r) snprintf(r, n, "%s/%s", strcmp(real, "/") == 0 ? "" : real, name);
    free(real); /* realpath's buffer comes from libc's malloc */
    *resolved = r;
}

static bool qf_outputs_same_identity(const qf_output *a, bool exists, unsigned long long dev,
                                     unsigned long long ino, const char *resolved)
{
    if (a->exists && exists) return a->dev == dev && a->ino == ino;
    return a->resolved && resolved && strcmp(a->resolved, resolved) == 0;
}

void qf_outputs_init(qf_outputs *s) { memset(s, 0, sizeof *s); }

static qf_status qf_outputs_add_one(qf_outputs *s, const char *what, const char *path);

/* The side file's path for model output `path`: `name` (NULL: the output's
 * base name + ".data") in the output's directory. Never a temporary's name:
 * the model records the side file's name, and both are renamed. */
static char *qf_outputs_side_path(const char *path, const char *name)
{
    const char *slash = strrchr(path, '/');
    size_t dlen = slash ? (size_t)(slash - path) + 1 : 0;
    size_t n = dlen + (name ? strlen(name) : strlen(path + dlen) + 5) + 1;
    char *p = qf_malloc(n);
    if (!p) return NULL;
    if (name)
        snprintf(p, n, "%.*s%s", (int)dlen, path, name);
    else
        snprintf(p, n, "%s.data", path);
    return p;
}

static void qf_outputs_side_free(qf_output *o)
{
    qf_output *d = o->side;
    if (d) {
        if (d->tmp) qf_file_temp_discard(d->tmp);
        qf_free(d->tmp);
        qf_free(d->resolved);
        qf_free(d);
    }
    qf_free(o->side_path);
    o->side = NULL;
    o->side_path = NULL;
}

/* Give output o its side file `name` (see qf_outputs_side_path), not staged. */
static qf_status qf_outputs_side_new(qf_output *o, const char *name, const char *what)
{
    qf_outputs_side_free(o);
    char *path = qf_outputs_side_path(o->path, name);
    qf_output *d = qf_calloc(1, sizeof *d);
    if (!path || !d) {
        qf_free(path);
        qf_free(d);
        return QF_ERR_NOMEM;
    }
    d->what = what;
    d->path = o->side_path = path;
    o->side = d;
    return QF_OK;
}

/* The same for output i, checked as an output of its own against every
 * other output and side file (external_data: the file will be written). */
static qf_status qf_outputs_side_check(qf_outputs *s, int i, const char *name)
{
    QF_TRY(qf_outputs_side_new(&s->o[i], name, "--external-data file"));
    QF_TRY(qf_outputs_add_one(s, "--external-data file", s->o[i].side_path));
    *s->o[i].side = s->o[--s->n];
    return QF_OK;
}

qf_status qf_outputs_add(qf_outputs *s, const char *what, const char *path)
{
    QF_TRY(qf_outputs_add_one(s, what, path));
    /* The side file of the model (the first output) is checked as an output
     * of its own, against every output before and after it. */
    if (s->n == 1 && s->external_data) return qf_outputs_side_check(s, 0, s->external_name);
    return QF_OK;
}

qf_status qf_outputs_add_model(qf_outputs *s, const char *what, const char *path)
{
    QF_TRY(qf_outputs_add_one(s, what, path));
    return s->external_data ? qf_outputs_side_check(s, s->n - 1, NULL) : QF_OK;
}

/* Does output k (or its side file) have this identity? */
static const qf_output *qf_outputs_same_as(const qf_outputs *s, int k, bool exists,
                                           unsigned long long dev, unsigned long long ino,
                                           const char *resolved)
{
    if (qf_outputs_same_identity(&s->o[k], exists, dev, ino, resolved)) return &s->o[k];
    const qf_output *d = s->o[k].side;
    if (d && d->resolved && qf_outputs_same_identity(d, exists, dev, ino, resolved)) return d;
    return NULL;
}

static qf_status qf_outputs_add_one(qf_outputs *s, const char *what, const char *path)
{
    char dir[PATH_MAX];
    const char *name;
    struct stat st;
    if (!*path) return qf_error(QF_ERR_INVALID, "%s: the path is empty", what);
    qf_outputs_split(path, dir, sizeof dir, &name);
    if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0 ||
        (stat(path, &st) == 0 && S_ISDIR(st.st_mode)))
        return qf_error(QF_ERR_INVALID, "%s '%s' is a directory: give a file name", what, path);
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return qf_error(QF_ERR_INVALID,
                        "%s '%s' is not a regular file (a device, FIFO or socket): refusing to "
                        "replace it",
                        what, path);
    if (stat(dir, &st) != 0)
        return qf_error(QF_ERR_INVALID, "%s '%s': directory '%s': %s", what, path, dir,
                        strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return qf_error(QF_ERR_INVALID, "%s '%s': '%s' is not a directory", what, path, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return qf_error(QF_ERR_INVALID, "%s '%s': cannot write in directory '%s': %s", what, path,
                        dir, strerror(errno));
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 4;
        qf_output *o = qf_realloc(s->o, (size_t)cap * sizeof *o);
        if (!o) return QF_ERR_NOMEM;
        s->o = o;
        s->cap = cap;
    }
    qf_output *o = &s->o[s->n];
    memset(o, 0, sizeof *o);
    o->what = what;
    o->path = path;
    qf_outputs_identity(path, &o->exists, &o->dev, &o->ino, &o->resolved);
    if (!o->resolved)
        return qf_error(QF_ERR_INVALID, "%s '%s': cannot resolve directory '%s': %s", what, path,
                        dir, strerror(errno));
    s->n++;
    for (int k = 0; k < s->n - 1; k++) {
        const qf_output *e = qf_outputs_same_as(s, k, o->exists, o->dev, o->ino, o->resolved);
        if (e)
            return qf_error(QF_ERR_INVALID,
                            "%s '%s' and %s '%s' are the same file: one would be lost", e->what,
                            e->path, what, path);
    }
    return QF_OK;
}

qf_status qf_outputs_input(const qf_outputs *s, const char *what, const char *path)
{
    bool exists;
    unsigned long long dev, ino;
    char *resolved;
    qf_outputs_identity(path, &exists, &dev, &ino, &resolved);
    qf_status st = QF_OK;
    for (int k = 0; k < s->n && st == QF_OK; k++) {
        const qf_output *d = s->o[k].side && s->o[k].side->resolved ? s->o[k].side : NULL;
        const qf_output *e = strcmp(s->o[k].path, path) == 0 ? &s->o[k]
                             : d && strcmp(d->path, path) == 0
                                 ? d
                                 : qf_outputs_same_as(s, k, exists, dev, ino, resolved);
        if (e)
            st = qf_error(QF_ERR_INVALID, "%s '%s' is %s '%s': refusing to overwrite it", e->what,
                          e->path, what, path);
    }
    qf_free(resolved);
    return st;
}

static qf_status qf_output_stage(qf_output *o, const char **tmp)
{
    if (o->tmp) {
        qf_file_temp_discard(o->tmp);
        qf_free(o->tmp);
        o->tmp = NULL;
    }
    QF_TRY(qf_file_temp_create(o->path, &o->tmp));
    /* The writers keep the mode of the file they replace: give the staged
     * file the mode the output would get (the old file's, else 0644). */
    struct stat old;
    mode_t mode = stat(o->path, &old) == 0 ? (old.st_mode & 07777) : 0644;
    qf_status st = QF_OK;
    if (chmod(o->tmp, mode) != 0)
        st = qf_error(QF_ERR_IO, "cannot set the mode of '%s': %s", o->tmp, strerror(errno));
    *tmp = o->tmp;
    return st;
}

qf_status qf_outputs_stage(qf_outputs *s, int i, const char **tmp)
{
    return qf_output_stage(&s->o[i], tmp);
}

static void qf_output_unstage(qf_output *o)
{
    if (!o->tmp) return;
    qf_file_temp_discard(o->tmp);
    qf_free(o->tmp);
    o->tmp = NULL;
}

static qf_status qf_outputs_strdup_to(char **dst, const char *src)
{
    qf_free(*dst);
    *dst = NULL;
    if (!src) return QF_OK;
    size_t n = strlen(src) + 1;
    if (!(*dst = qf_malloc(n))) return QF_ERR_NOMEM;
    memcpy(*dst, src, n);
    return QF_OK;
}

qf_status qf_outputs_save_model(qf_outputs *s, int i, const qf_graph *g, const char **tmp)
{
    qf_output *o = &s->o[i];
    QF_TRY(qf_output_stage(o, tmp));
    /* Both files are staged here (and renamed by qf_outputs_commit): the
     * writer fills them directly. */
    qf_onnx_save_options so = {
        .always = s->external_data, .staged = true, .limit = s->external_limit};
    /* No external data asked for: the side file of a model over the limit,
     * "<output>.data", staged in case it is needed. */
    if (!o->side) QF_TRY(qf_outputs_side_new(o, NULL, "external data file"));
    const char *stmp = NULL;
    QF_TRY(qf_output_stage(o->side, &stmp));
    const char *slash = strrchr(o->side->path, '/');
    so.external_data = stmp;
    so.location = slash ? slash + 1 : o->side->path;
    qf_status st = qf_onnx_save_ex(g, *tmp, &so);
    if (st == QF_OK && !so.wrote_external) qf_output_unstage(o->side);
    if (st == QF_OK) st = qf_outputs_strdup_to(&s->staged_model, *tmp);
    if (st == QF_OK) st = qf_outputs_strdup_to(&s->staged_side, so.wrote_external ? stmp : NULL);
    if (st == QF_OK)
        st = qf_outputs_strdup_to(&s->location, so.wrote_external ? so.location : NULL);
    return st;
}

qf_status qf_outputs_load_staged(const qf_outputs *s, const char *path, qf_graph **out)
{
    if (s && s->staged_model && s->staged_side && strcmp(path, s->staged_model) == 0) {
        qf_onnx_load_options lo = {.external_location = s->location,
                                   .external_path = s->staged_side};
        return qf_onnx_load_ex(path, &lo, out);
    }
    return qf_onnx_load(path, out);
}

qf_status qf_outputs_commit(qf_outputs *s)
{
    /* The side files first: a model never names a side file not yet there. */
    for (int i = -s->n; i < s->n; i++) {
        qf_output *o = i < 0 ? s->o[s->n + i].side : &s->o[i];
        if (!o || !o->tmp) continue;
        if (rename(o->tmp, o->path) != 0)
            return qf_error(QF_ERR_IO, "cannot rename '%s' to '%s': %s", o->tmp, o->path,
                            strerror(errno));
        qf_file_temp_forget(o->tmp);
        qf_free(o->tmp);
        o->tmp = NULL;
        /* Make the rename durable; a failure here loses nothing. */
        char dir[PATH_MAX];
        const char *name;
        qf_outputs_split(o->path, dir, sizeof dir, &name);
        int dfd = open(dir, O_RDONLY);
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
    }
    return QF_OK;
}

void qf_outputs_drop(qf_outputs *s, int i)
{
    qf_output *o = &s->o[i];
    if (o->tmp) qf_file_temp_discard(o->tmp);
    qf_free(o->tmp);
    o->tmp = NULL;
    if (o->side) qf_output_unstage(o->side);
}

void qf_outputs_free(qf_outputs *s)
{
    qf_free(s->staged_model);
    qf_free(s->staged_side);
    qf_free(s->location);
    for (int i = 0; i < s->n; i++) {
        if (s->o[i].tmp) qf_file_temp_discard(s->o[i].tmp);
        qf_free(s->o[i].tmp);
        qf_free(s->o[i].resolved);
        qf_outputs_side_free(&s->o[i]);
    }
    qf_free(s->o);
    memset(s, 0, sizeof *s);
}
