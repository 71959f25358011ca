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

/* "qfold: [cmd: ]<message>" on stderr: the error line of a bad command line. */
static void cli_command_line_error(const qf_cli_command *cmd, const char *fmt, va_list ap)
{
    fputs("qfold: ", stderr);
    if (cmd) fprintf(stderr, "%s: ", cmd->name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

int qf_cli_value_error(const qf_cli_command *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cli_command_line_error(cmd, fmt, ap);
    va_end(ap);
    return QF_EXIT_USAGE;
}

int qf_cli_usage_error(const qf_cli_command *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cli_command_line_error(cmd, fmt, ap);
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

/* --- numbers ------------------------------------------------------------ */

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

/* --- outputs: the library's qf_outputs (io.h), with the CLI's exit codes ---- */

/* --external-data as main.c found it (one command per process), and the
 * set of outputs the command writes (for qf_cli_load_staged). */
static struct {
    bool on;
    const char *name; /* NULL: "<output>.data" */
    qf_cli_outputs *current;
} qf_cli_ext;

void qf_cli_outputs_init(qf_cli_outputs *s)
{
    qf_outputs_init(s);
    s->external_data = qf_cli_ext.on;
    s->external_name = qf_cli_ext.name;
    /* For tests: the size past which a model goes out with external data
     * without being asked (protobuf's 2 GiB otherwise, too big for CI). */
    const char *lim = getenv("QFOLD_EXTERNAL_DATA_LIMIT");
    if (lim && *lim) s->external_limit = (size_t)strtoull(lim, NULL, 10);
    qf_cli_ext.current = s;
}

static int qf_cli_rc(qf_status st) { return st == QF_OK ? QF_EXIT_OK : qf_cli_fail(st); }

int qf_cli_outputs_add(qf_cli_outputs *s, const char *what, const char *path)
{
    return qf_cli_rc(qf_outputs_add(s, what, path));
}

int qf_cli_outputs_add_model(qf_cli_outputs *s, const char *what, const char *path)
{
    return qf_cli_rc(qf_outputs_add_model(s, what, path));
}

int qf_cli_outputs_input(const qf_cli_outputs *s, const char *what, const char *path)
{
    return qf_cli_rc(qf_outputs_input(s, what, path));
}

qf_status qf_cli_outputs_stage(qf_cli_outputs *s, int i, const char **tmp) { return qf_outputs_stage(s, i, tmp); }

qf_status qf_cli_outputs_save_model(qf_cli_outputs *s, int i, const qf_graph *g, const char **tmp)
{
    const char *path = s->o[i].path;
    if (!qf_cli_is_tflite(path)) return qf_outputs_save_model(s, i, g, tmp);
    /* quantize / qat / finalize -o X.tflite (tflite_out.c): one file */
    if (s->external_data)
        return qf_error(QF_ERR_INVALID, "--external-data: '%s' is a TFLite file (external data is ONNX's)", path);
    QF_TRY(qf_outputs_stage(s, i, tmp));
    return qf_cli_save_model(g, path, *tmp);
}

qf_status qf_cli_load_staged(const char *path, qf_graph **out)
{
    return qf_outputs_load_staged(qf_cli_ext.current, path, out);
}

int qf_cli_extdata_strip(const qf_cli_command *cmd, int *argc, char **argv)
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
                return qf_cli_value_error(cmd,
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
    qf_status st = qf_outputs_commit(s);
    /* A rename that fails is a failure while processing (exit 1). */
    if (st != QF_OK) return qf_cli_fail(st) == QF_EXIT_OK ? QF_EXIT_OK : QF_EXIT_FAIL;
    return QF_EXIT_OK;
}

void qf_cli_outputs_drop(qf_cli_outputs *s, int i) { qf_outputs_drop(s, i); }

void qf_cli_outputs_free(qf_cli_outputs *s)
{
    if (qf_cli_ext.current == s) qf_cli_ext.current = NULL;
    qf_outputs_free(s);
}

int qf_cli_fail_write(const qf_cli_outputs *s, int i, qf_status st)
{
    qf_error_prefix(st, "%s '%s': ", s->o[i].what, s->o[i].path);
    int rc = qf_cli_fail(st);
    return st == QF_ERR_IO ? QF_EXIT_FAIL : rc;
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
