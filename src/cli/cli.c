/* Helpers shared by the subcommands: exit codes, error lines, the option
 * parser, JSON and number formatting, atomic file output. */
/* realpath() is XSI in glibc's headers. */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "qfold/graph.h"
#include "qfold/io.h"

int qf_cli_exit_code(qf_status st)
{
    switch (st) {
    case QF_OK: return QF_EXIT_OK;
    case QF_ERR_MISMATCH:
    case QF_ERR_NOMEM:
    case QF_ERR_INTERRUPTED:
    case QF_ERR_DIVERGED:
    case QF_ERR_INTERNAL: return QF_EXIT_FAIL;
    case QF_ERR_IO:
    case QF_ERR_PARSE:
    case QF_ERR_UNSUPPORTED:
    case QF_ERR_INVALID:
    case QF_ERR_SHAPE:
    case QF_ERR_NUMERIC: return QF_EXIT_USAGE;
    }
    return QF_EXIT_FAIL;
}

int qf_cli_fail(qf_status st)
{
    const char *msg = qf_error_message();
    /* A status with no message recorded (should not happen) still says what
     * kind of failure it was. */
    if (!msg || !*msg || strcmp(msg, "no error") == 0) msg = qf_status_name(st);
    fprintf(stderr, "qfold: %s\n", msg);
    return qf_cli_exit_code(st);
}

int qf_cli_error(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("qfold: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

int qf_cli_usage_error(const qf_cli_command *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("qfold: ", stderr);
    if (cmd) fprintf(stderr, "%s: ", cmd->name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (cmd)
        fprintf(stderr, "usage: %s\n", cmd->usage);
    else
        fputs("usage: qfold COMMAND [ARGS]   (commands: qfold help)\n", stderr);
    return QF_EXIT_USAGE;
}

/* --- option parser ------------------------------------------------------- */

qf_cli_args qf_cli_args_begin(const qf_cli_command *cmd, int argc, char **argv)
{
    return (qf_cli_args){.cmd = cmd, .argc = argc, .argv = argv, .i = 0};
}

bool qf_cli_args_next(qf_cli_args *a)
{
    if (a->failed) return false;
    a->i++;
    if (a->i < a->argc && !a->only_positional && strcmp(a->argv[a->i], "--") == 0) {
        a->only_positional = true;
        a->i++;
    }
    return a->i < a->argc;
}

static bool qf_cli_is_option(const qf_cli_args *a)
{
    const char *s = a->argv[a->i];
    /* "-" alone conventionally means stdin/stdout: treat it as an argument. */
    return !a->only_positional && s[0] == '-' && s[1] != '\0';
}

bool qf_cli_args_flag(qf_cli_args *a, const char *name, const char *alias)
{
    if (!qf_cli_is_option(a)) return false;
    const char *s = a->argv[a->i];
    return strcmp(s, name) == 0 || (alias && strcmp(s, alias) == 0);
}

/* s is `name` or `name=...`; returns the part after '=' or "" for an exact
 * match, NULL for no match. */
static const char *qf_cli_match(const char *s, const char *name)
{
    size_t k = strlen(name);
    if (strncmp(s, name, k) != 0) return NULL;
    if (s[k] == '\0') return "";
    /* "--name=value"; short options ("-o") take their value separately. */
    if (s[k] == '=' && name[1] == '-') return s + k + 1;
    return NULL;
}

bool qf_cli_args_value(qf_cli_args *a, const char *name, const char *alias, const char **val)
{
    if (!qf_cli_is_option(a)) return false;
    const char *s = a->argv[a->i];
    const char *m = qf_cli_match(s, name);
    const char *used = name;
    if (!m && alias) {
        m = qf_cli_match(s, alias);
        used = alias;
    }
    if (!m) return false;
    if (*m) {
        *val = m;
        return true;
    }
    if (s[strlen(used)] == '=') { /* "--name=" with nothing after it */
        qf_cli_usage_error(a->cmd, "option '%s' needs a value", used);
        a->failed = true;
        return true;
    }
    if (a->i + 1 >= a->argc) {
        qf_cli_usage_error(a->cmd, "option '%s' needs a value", used);
        a->failed = true;
        return true;
    }
    *val = a->argv[++a->i];
    return true;
}

bool qf_cli_args_positional(qf_cli_args *a, const char **val)
{
    if (qf_cli_is_option(a)) return false;
    *val = a->argv[a->i];
    return true;
}

int qf_cli_args_unknown(qf_cli_args *a)
{
    a->failed = true;
    if (qf_cli_is_option(a))
        return qf_cli_usage_error(a->cmd, "unknown option '%s'", a->argv[a->i]);
    return qf_cli_usage_error(a->cmd, "unexpected argument '%s'", a->argv[a->i]);
}

/* --- JSON and numbers ---------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s, or 0 if it is not one (overlong
 * forms, surrogates and code points past U+10FFFF are invalid). */
static int qf_utf8_len(const unsigned char *s)
{
    unsigned c = s[0];
    int n;
    unsigned cp, min;
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) {
        n = 2;
        cp = c & 0x1F;
        min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        n = 3;
        cp = c & 0x0F;
        min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
        n = 4;
        cp = c & 0x07;
        min = 0x10000;
    } else {
        return 0;
    }
    for (int k = 1; k < n; k++) {
        if ((s[k] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

void qf_cli_json_string(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    fputc('"', f);
    while (*p) {
        unsigned c = *p;
        if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc((int)c, f);
            p++;
        } else if (c == '\n') {
            fputs("\\n", f);
            p++;
        } else if (c == '\t') {
            fputs("\\t", f);
            p++;
        } else if (c == '\r') {
            fputs("\\r", f);
            p++;
        } else if (c < 0x20 || c == 0x7F) {
            fprintf(f, "\\u%04x", c);
            p++;
        } else if (c < 0x80) {
            fputc((int)c, f);
            p++;
        } else {
            int n = qf_utf8_len(p);
            if (n == 0) {
                fputs("\\ufffd", f);
                p++;
            } else {
                fwrite(p, 1, (size_t)n, f);
                p += n;
            }
        }
    }
    fputc('"', f);
}

void qf_cli_json_shape(FILE *f, int ndim, const int64_t *dims)
{
    fputc('[', f);
    for (int i = 0; i < ndim; i++) {
        if (i) fputs(", ", f);
        if (dims[i] < 0)
            fputs("null", f);
        else
            fprintf(f, "%lld", (long long)dims[i]);
    }
    fputc(']', f);
}

char *qf_cli_thousands(long long v, char *buf, size_t size)
{
    char digits[32];
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    int n = snprintf(digits, sizeof digits, "%llu", u);
    size_t k = 0;
    if (v < 0 && k + 1 < size) buf[k++] = '-';
    for (int i = 0; i < n && k + 1 < size; i++) {
        if (i && (n - i) % 3 == 0 && k + 2 < size) buf[k++] = ',';
        buf[k++] = digits[i];
    }
    buf[k] = '\0';
    return buf;
}

char *qf_cli_bytes(unsigned long long v, char *buf, size_t size)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double x = (double)v;
    int u = 0;
    while (x >= 1024.0 && u < 4) {
        x /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, size, "%llu B", v);
    else
        snprintf(buf, size, "%.1f %s", x, unit[u]);
    return buf;
}

/* --- files --------------------------------------------------------------- */

qf_status qf_cli_write_file(const char *path, void (*print)(FILE *f, const void *ctx),
                            const void *ctx)
{
    /* Build the whole text in memory, then hand it to the library's atomic
     * writer (temporary file + fsync + rename). open_memstream's buffer comes
     * from libc's malloc, so it is released with free(). */
    char *buf = NULL;
    size_t size = 0;
    FILE *mem = open_memstream(&buf, &size);
    if (!mem) return qf_error(QF_ERR_NOMEM, "out of memory while writing '%s'", path);
    print(mem, ctx);
    if (fclose(mem) != 0 || !buf) {
        free(buf);
        return qf_error(QF_ERR_NOMEM, "out of memory while writing '%s'", path);
    }
    qf_status st = qf_file_write_atomic(path, buf, size);
    free(buf);
    return st;
}

/* --- outputs ------------------------------------------------------------- */

/* The parent directory of path and the name in it ("." for "o.onnx"). */
static void qf_cli_split(const char *path, char *dir, size_t size, const char **name)
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
static void qf_cli_identity(const char *path, bool *exists, unsigned long long *dev,
                            unsigned long long *ino, char **resolved)
{
    struct stat st;
    *exists = stat(path, &st) == 0;
    *dev = *exists ? (unsigned long long)st.st_dev : 0;
    *ino = *exists ? (unsigned long long)st.st_ino : 0;
    *resolved = NULL;
    char dir[PATH_MAX];
    const char *name;
    qf_cli_split(path, dir, sizeof dir, &name);
    char *real = realpath(dir, NULL);
    if (!real) return;
    size_t n = strlen(real) + strlen(name) + 2;
    char *r = qf_malloc(n);
    if (r) snprintf(r, n, "%s/%s", strcmp(real, "/") == 0 ? "" : real, name);
    free(real); /* realpath's buffer comes from libc's malloc */
    *resolved = r;
}

static bool qf_cli_same_identity(const qf_cli_output *a, bool exists, unsigned long long dev,
                                 unsigned long long ino, const char *resolved)
{
    if (a->exists && exists) return a->dev == dev && a->ino == ino;
    return a->resolved && resolved && strcmp(a->resolved, resolved) == 0;
}

void qf_cli_outputs_init(qf_cli_outputs *s) { memset(s, 0, sizeof *s); }

/* --external-data as main.c found it (one command per process). */
static struct {
    bool on;
    const char *name; /* NULL: "<output>.data" */
    /* The last model qf_cli_outputs_save_model staged, for qf_cli_load_staged. */
    char *staged_model, *staged_side, *location;
} qf_cli_ext;

static int qf_cli_outputs_add_one(qf_cli_outputs *s, const char *what, const char *path);

/* The side file's path for model output `path`: `name` (NULL: the output's
 * base name + ".data") in the output's directory. Never a temporary's name:
 * the model records the side file's name, and both are renamed. */
static char *qf_cli_side_path(const char *path, const char *name)
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

static void qf_cli_side_free(qf_cli_output *o)
{
    qf_cli_output *d = o->side;
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

/* Give output o its side file `name` (see qf_cli_side_path), not staged. */
static qf_status qf_cli_side_new(qf_cli_output *o, const char *name, const char *what)
{
    qf_cli_side_free(o);
    char *path = qf_cli_side_path(o->path, name);
    qf_cli_output *d = qf_calloc(1, sizeof *d);
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
 * other output and side file (--external-data: the file will be written). */
static int qf_cli_side_check(qf_cli_outputs *s, int i, const char *name)
{
    if (qf_cli_side_new(&s->o[i], name, "--external-data file") != QF_OK) return qf_cli_fail(QF_ERR_NOMEM);
    int rc = qf_cli_outputs_add_one(s, "--external-data file", s->o[i].side_path);
    if (rc != QF_EXIT_OK) return rc;
    *s->o[i].side = s->o[--s->n];
    return QF_EXIT_OK;
}

int qf_cli_outputs_add(qf_cli_outputs *s, const char *what, const char *path)
{
    int rc = qf_cli_outputs_add_one(s, what, path);
    if (rc != QF_EXIT_OK) return rc;
    /* The side file of the model (the first output) is checked as an output
     * of its own, against every output before and after it. */
    if (s->n == 1 && qf_cli_ext.on) rc = qf_cli_side_check(s, 0, qf_cli_ext.name);
    return rc;
}

int qf_cli_outputs_add_model(qf_cli_outputs *s, const char *what, const char *path)
{
    int rc = qf_cli_outputs_add_one(s, what, path);
    if (rc == QF_EXIT_OK && qf_cli_ext.on)
        rc = qf_cli_side_check(s, s->n - 1, NULL);
    return rc;
}

/* Does output k (or its side file) have this identity? */
static const qf_cli_output *qf_cli_same_as(const qf_cli_outputs *s, int k, bool exists, unsigned long long dev,
                                           unsigned long long ino, const char *resolved)
{
    if (qf_cli_same_identity(&s->o[k], exists, dev, ino, resolved)) return &s->o[k];
    const qf_cli_output *d = s->o[k].side;
    if (d && d->resolved && qf_cli_same_identity(d, exists, dev, ino, resolved)) return d;
    return NULL;
}

static int qf_cli_outputs_add_one(qf_cli_outputs *s, const char *what, const char *path)
{
    char dir[PATH_MAX];
    const char *name;
    struct stat st;
    if (!*path) return qf_cli_error(QF_EXIT_USAGE, "%s: the path is empty", what);
    qf_cli_split(path, dir, sizeof dir, &name);
    if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0 ||
        (stat(path, &st) == 0 && S_ISDIR(st.st_mode)))
        return qf_cli_error(QF_EXIT_USAGE, "%s '%s' is a directory: give a file name", what, path);
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return qf_cli_error(QF_EXIT_USAGE,
                            "%s '%s' is not a regular file (a device, FIFO or socket): refusing to "
                            "replace it",
                            what, path);
    if (stat(dir, &st) != 0)
        return qf_cli_error(QF_EXIT_USAGE, "%s '%s': directory '%s': %s", what, path, dir,
                            strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return qf_cli_error(QF_EXIT_USAGE, "%s '%s': '%s' is not a directory", what, path, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return qf_cli_error(QF_EXIT_USAGE, "%s '%s': cannot write in directory '%s': %s", what,
                            path, dir, strerror(errno));
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 4;
        qf_cli_output *o = qf_realloc(s->o, (size_t)cap * sizeof *o);
        if (!o) return qf_cli_fail(QF_ERR_NOMEM);
        s->o = o;
        s->cap = cap;
    }
    qf_cli_output *o = &s->o[s->n];
    memset(o, 0, sizeof *o);
    o->what = what;
    o->path = path;
    qf_cli_identity(path, &o->exists, &o->dev, &o->ino, &o->resolved);
    if (!o->resolved)
        return qf_cli_error(QF_EXIT_USAGE, "%s '%s': cannot resolve directory '%s': %s", what, path,
                            dir, strerror(errno));
    s->n++;
    for (int k = 0; k < s->n - 1; k++) {
        const qf_cli_output *e = qf_cli_same_as(s, k, o->exists, o->dev, o->ino, o->resolved);
        if (e)
            return qf_cli_error(QF_EXIT_USAGE, "%s '%s' and %s '%s' are the same file: one would be lost", e->what,
                                e->path, what, path);
    }
    return QF_EXIT_OK;
}

int qf_cli_outputs_input(const qf_cli_outputs *s, const char *what, const char *path)
{
    bool exists;
    unsigned long long dev, ino;
    char *resolved;
    qf_cli_identity(path, &exists, &dev, &ino, &resolved);
    int rc = QF_EXIT_OK;
    for (int k = 0; k < s->n && rc == QF_EXIT_OK; k++) {
        const qf_cli_output *d = s->o[k].side && s->o[k].side->resolved ? s->o[k].side : NULL;
        const qf_cli_output *e = strcmp(s->o[k].path, path) == 0       ? &s->o[k]
                                 : d && strcmp(d->path, path) == 0      ? d
                                                                        : qf_cli_same_as(s, k, exists, dev, ino, resolved);
        if (e)
            rc = qf_cli_error(QF_EXIT_USAGE, "%s '%s' is %s '%s': refusing to overwrite it", e->what, e->path, what,
                              path);
    }
    qf_free(resolved);
    return rc;
}

static qf_status qf_cli_output_stage(qf_cli_output *o, const char **tmp)
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

qf_status qf_cli_outputs_stage(qf_cli_outputs *s, int i, const char **tmp)
{
    return qf_cli_output_stage(&s->o[i], tmp);
}

static void qf_cli_output_unstage(qf_cli_output *o)
{
    if (!o->tmp) return;
    qf_file_temp_discard(o->tmp);
    qf_free(o->tmp);
    o->tmp = NULL;
}

static qf_status qf_cli_strdup_to(char **dst, const char *src)
{
    qf_free(*dst);
    *dst = NULL;
    if (!src) return QF_OK;
    size_t n = strlen(src) + 1;
    if (!(*dst = qf_malloc(n))) return QF_ERR_NOMEM;
    memcpy(*dst, src, n);
    return QF_OK;
}

qf_status qf_cli_outputs_save_model(qf_cli_outputs *s, int i, const qf_graph *g, const char **tmp)
{
    qf_cli_output *o = &s->o[i];
    if (qf_cli_is_tflite(o->path)) {
        /* quantize / qat / finalize -o X.tflite (tflite_out.c): one file */
        if (qf_cli_ext.on)
            return qf_error(QF_ERR_INVALID, "--external-data: '%s' is a TFLite file (external data is ONNX's)",
                            o->path);
        QF_TRY(qf_cli_output_stage(o, tmp));
        return qf_cli_save_model(g, o->path, *tmp);
    }
    QF_TRY(qf_cli_output_stage(o, tmp));
    /* Both files are staged here (and renamed by qf_cli_outputs_commit): the
     * writer fills them directly. */
    qf_onnx_save_options so = {.always = qf_cli_ext.on, .staged = true};
    /* For tests: the size past which a model goes out with external data
     * without being asked (protobuf's 2 GiB otherwise, too big for CI). */
    const char *lim = getenv("QFOLD_EXTERNAL_DATA_LIMIT");
    if (lim && *lim) so.limit = (size_t)strtoull(lim, NULL, 10);
    /* No --external-data: the side file of a model over the limit,
     * "<output>.data", staged in case it is needed. */
    if (!o->side) QF_TRY(qf_cli_side_new(o, NULL, "external data file"));
    const char *stmp = NULL;
    QF_TRY(qf_cli_output_stage(o->side, &stmp));
    const char *slash = strrchr(o->side->path, '/');
    so.external_data = stmp;
    so.location = slash ? slash + 1 : o->side->path;
    qf_status st = qf_onnx_save_ex(g, *tmp, &so);
    if (st == QF_OK && !so.wrote_external) qf_cli_output_unstage(o->side);
    if (st == QF_OK) st = qf_cli_strdup_to(&qf_cli_ext.staged_model, *tmp);
    if (st == QF_OK) st = qf_cli_strdup_to(&qf_cli_ext.staged_side, so.wrote_external ? stmp : NULL);
    if (st == QF_OK) st = qf_cli_strdup_to(&qf_cli_ext.location, so.wrote_external ? so.location : NULL);
    return st;
}

qf_status qf_cli_load_staged(const char *path, qf_graph **out)
{
    if (qf_cli_ext.staged_model && qf_cli_ext.staged_side && strcmp(path, qf_cli_ext.staged_model) == 0) {
        qf_onnx_load_options lo = {.external_location = qf_cli_ext.location,
                                   .external_path = qf_cli_ext.staged_side};
        return qf_onnx_load_ex(path, &lo, out);
    }
    return qf_onnx_load(path, out);
}

int qf_cli_extdata_strip(int *argc, char **argv)
{
    static const char *const writers[] = {"fuse", "quantize", "finalize", "train", "qat"};
    bool writes = false;
    for (size_t k = 0; k < sizeof writers / sizeof writers[0]; k++)
        writes = writes || (*argc > 1 && strcmp(argv[1], writers[k]) == 0);
    /* Other commands see the option and refuse it as unknown. */
    if (!writes) return QF_EXIT_OK;
    int out = 2;
    for (int i = 2; i < *argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            while (i < *argc) argv[out++] = argv[i++];
            break;
        }
        if (strncmp(a, "--external-data", 15) != 0 || (a[15] != 0 && a[15] != '=')) {
            argv[out++] = argv[i];
            continue;
        }
        qf_cli_ext.on = true;
        qf_cli_ext.name = NULL;
        if (a[15] == '=') {
            const char *v = a + 16;
            if (!*v || strchr(v, '/') || strcmp(v, ".") == 0 || strcmp(v, "..") == 0)
                return qf_cli_usage_error(qf_cli_find(argv[1]),
                                          "--external-data '%s': expected a file name (no directory: the side "
                                          "file is written next to the output)",
                                          v);
            qf_cli_ext.name = v;
        }
    }
    *argc = out;
    argv[out] = NULL;
    return QF_EXIT_OK;
}

int qf_cli_outputs_commit(qf_cli_outputs *s)
{
    /* The side files first: a model never names a side file not yet there. */
    for (int i = -s->n; i < s->n; i++) {
        qf_cli_output *o = i < 0 ? s->o[s->n + i].side : &s->o[i];
        if (!o || !o->tmp) continue;
        if (rename(o->tmp, o->path) != 0)
            return qf_cli_error(QF_EXIT_FAIL, "cannot rename '%s' to '%s': %s", o->tmp, o->path,
                                strerror(errno));
        qf_file_temp_forget(o->tmp);
        qf_free(o->tmp);
        o->tmp = NULL;
        /* Make the rename durable; a failure here loses nothing. */
        char dir[PATH_MAX];
        const char *name;
        qf_cli_split(o->path, dir, sizeof dir, &name);
        int dfd = open(dir, O_RDONLY);
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
    }
    return QF_EXIT_OK;
}

void qf_cli_outputs_drop(qf_cli_outputs *s, int i)
{
    qf_cli_output *o = &s->o[i];
    if (o->tmp) qf_file_temp_discard(o->tmp);
    qf_free(o->tmp);
    o->tmp = NULL;
    if (o->side) qf_cli_output_unstage(o->side);
}

void qf_cli_outputs_free(qf_cli_outputs *s)
{
    qf_free(qf_cli_ext.staged_model);
    qf_free(qf_cli_ext.staged_side);
    qf_free(qf_cli_ext.location);
    qf_cli_ext.staged_model = qf_cli_ext.staged_side = qf_cli_ext.location = NULL;
    for (int i = 0; i < s->n; i++) {
        if (s->o[i].tmp) qf_file_temp_discard(s->o[i].tmp);
        qf_free(s->o[i].tmp);
        qf_free(s->o[i].resolved);
        qf_cli_side_free(&s->o[i]);
    }
    qf_free(s->o);
    memset(s, 0, sizeof *s);
}

int qf_cli_fail_write(const qf_cli_outputs *s, int i, qf_status st)
{
    qf_error_prefix(st, "%s '%s': ", s->o[i].what, s->o[i].path);
    int rc = qf_cli_fail(st);
    return st == QF_ERR_IO ? QF_EXIT_FAIL : rc;
}

/* --- data files ------------------------------------------------------------ */

#define QF_CLI_SCAN_BYTES ((size_t)4 << 20) /* the NaN / Inf scan reads this much at a time */

/* Element k (C order) of the file holding data t for input v is x: as the
 * other bad-data messages, the file, the input and the shape it expects,
 * then where the value is (its sample and its index within the sample). */
static qf_status qf_cli_npy_nonfinite(const char *what, const char *path, const qf_value *v, const qf_tensor *t,
                                      int64_t k, float x)
{
    char want[160], at[160];
    int64_t dims[QF_MAX_DIMS], idx[QF_MAX_DIMS];
    memcpy(dims, v->type.dims, sizeof dims);
    dims[0] = -1; /* the sample count: the file's own */
    int64_t rest = k;
    for (int d = t->ndim - 1; d >= 0; d--) {
        idx[d] = t->dims[d] > 0 ? rest % t->dims[d] : 0;
        rest = t->dims[d] > 0 ? rest / t->dims[d] : 0;
    }
    qf_shape_str(t->ndim - 1, idx + 1, at, sizeof at);
    return qf_error(QF_ERR_NUMERIC,
                    "%s '%s' for input '%s' (expects %s %s, samples first, finite): element %lld (sample %lld, at "
                    "%s) is %s",
                    what, path, v->name, qf_dtype_name(v->type.dtype),
                    qf_shape_str(v->type.ndim, dims, want, sizeof want), (long long)k, (long long)idx[0], at,
                    isnan(x) ? "NaN" : "infinite");
}

qf_status qf_cli_npy_check_finite(const char *what, const char *path, const qf_value *v, qf_npy_file *f)
{
    const qf_tensor *t = qf_npy_info(f);
    if (t->dtype != QF_DTYPE_F32) return QF_OK;
    size_t row = qf_npy_row_bytes(f);
    int64_t n = t->dims[0], step = row ? (int64_t)(QF_CLI_SCAN_BYTES / row) : n;
    if (step < 1) step = 1;
    if (step > n) step = n;
    size_t bytes = (size_t)step * row;
    float *buf = qf_malloc(bytes ? bytes : 1);
    if (!buf) return QF_ERR_NOMEM;
    qf_status st = QF_OK;
    int64_t per_row = (int64_t)(row / sizeof(float));
    for (int64_t first = 0; first < n && st == QF_OK; first += step) {
        int64_t count = n - first < step ? n - first : step;
        st = qf_npy_read_rows(f, first, count, buf);
        for (int64_t i = 0, m = count * per_row; i < m && st == QF_OK; i++)
            if (!isfinite(buf[i])) st = qf_cli_npy_nonfinite(what, path, v, t, first * per_row + i, buf[i]);
    }
    qf_free(buf);
    return st;
}

/* --- half precision ------------------------------------------------------------ */

const char *qf_cli_dtype_label(const qf_value *v)
{
    switch (v->store & QF_STORE_DTYPE) {
    case QF_STORE_F16: return "float16";
    case QF_STORE_BF16: return "bfloat16";
    default: return qf_dtype_name(v->type.dtype);
    }
}

double qf_cli_half_tolerance(const qf_graph *g, double tol)
{
    /* A folded weight rounded to float16 moves by up to 2^-11 of itself,
     * to bfloat16 by 2^-8: outputs move by about as much, summed over a
     * few layers. */
    double need = 0;
    for (int i = 0; i < g->nvalues; i++) {
        const qf_value *v = g->values[i];
        int s = v ? v->store & QF_STORE_DTYPE : 0;
        if (s == QF_STORE_F16 && need < 1e-2) need = 1e-2;
        if (s == QF_STORE_BF16) need = 5e-2;
    }
    return tol > need ? tol : need;
}
