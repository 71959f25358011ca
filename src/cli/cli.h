/* The qfold command: shared declarations of the subcommands.
 *
 * Adding a subcommand `foo`:
 *   1. write src/cli/cmd_foo.c defining
 *        const qf_cli_command qf_cli_cmd_foo = {"foo", "one-line summary",
 *            "qfold foo IN.onnx -o OUT.onnx [--bar]", "options text", qf_cli_foo};
 *   2. add `X(foo)` to QF_CLI_COMMANDS below (the order is the order `qfold help` lists).
 * help.c builds the dispatch table from that list; nothing else changes.
 *
 * A command's function gets argv with argv[0] = the command name and returns
 * the process exit status: QF_EXIT_OK, QF_EXIT_FAIL (processing failed: a
 * verification mismatch, out of memory, a bug) or QF_EXIT_USAGE (bad usage or
 * a bad input file). Errors go to stderr as one line "qfold: <message>".
 */
#ifndef QF_CLI_H
#define QF_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "qfold/io.h"
#include "qfold/status.h"

#define QF_CLI_COMMANDS(X) \
    X(help)                \
    X(inspect)             \
    X(run)                 \
    X(fuse)                \
    X(quantize)            \
    X(finalize)            \
    X(export)              \
    X(check)               \
    X(eval)                \
    X(train)               \
    X(qat)                 \
    X(passes)

enum { QF_EXIT_OK = 0, QF_EXIT_FAIL = 1, QF_EXIT_USAGE = 2 };

typedef struct qf_cli_command {
    const char *name;
    const char *summary; /* one line for `qfold help` */
    const char *usage;   /* synopsis, without the leading "usage: " */
    const char *details; /* option descriptions for `qfold help CMD` (may be NULL) */
    int (*fn)(int argc, char **argv);
} qf_cli_command;

#define QF_CLI_DECLARE_(name) extern const qf_cli_command qf_cli_cmd_##name;
QF_CLI_COMMANDS(QF_CLI_DECLARE_)
#undef QF_CLI_DECLARE_

/* The dispatch table (help.c), in QF_CLI_COMMANDS order. */
const qf_cli_command *const *qf_cli_commands(int *count);
const qf_cli_command *qf_cli_find(const char *name);
/* Full help of one command on f: usage line, summary, details. */
void qf_cli_print_help(const qf_cli_command *cmd, FILE *f);
/* The top-level help: synopsis and the list of commands. */
void qf_cli_print_overview(FILE *f);

/* --- errors and exit codes ------------------------------------------------ */
/* QF_OK -> 0; MISMATCH, NOMEM, INTERNAL -> 1; what the input causes -> 2. */
int qf_cli_exit_code(qf_status st);
/* Print "qfold: <library message>" (or the status name if none) on stderr
 * and return the exit code for st. */
int qf_cli_fail(qf_status st);
/* Print "qfold: <message>" on stderr and return `code`. */
int qf_cli_error(int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* A malformed command line (an unknown option, a missing argument): print
 * "qfold: <message>" and the command's usage line on stderr; returns
 * QF_EXIT_USAGE. */
int qf_cli_usage_error(const qf_cli_command *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* A known option with a value it does not take (`--batch 0`, `--lr nan`):
 * the one error line, no usage (the line says what the option takes);
 * QF_EXIT_USAGE. */
int qf_cli_value_error(const qf_cli_command *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* --- a tiny option parser ---------------------------------------------------
 *
 *   qf_cli_args a = qf_cli_args_begin(&qf_cli_cmd_run, argc, argv);
 *   const char *v;
 *   while (qf_cli_args_next(&a)) {
 *       if (qf_cli_args_flag(&a, "--json", NULL)) json = true;
 *       else if (qf_cli_args_value(&a, "-o", "--output", &v)) out = v;
 *       else if (qf_cli_args_positional(&a, &v)) model = v;
 *       else return qf_cli_args_unknown(&a);
 *   }
 *   if (a.failed) return QF_EXIT_USAGE;
 *
 * Options take their value as the next argument ("-o x", "--output x") or
 * after '=' ("--output=x"). "--" ends the options. A missing value prints a
 * usage error and sets `failed`, which also ends the loop.
 */
typedef struct qf_cli_args {
    const qf_cli_command *cmd;
    int argc;
    char **argv;
    int i;                /* index of the current argument */
    bool only_positional; /* after "--" */
    bool failed;
} qf_cli_args;

qf_cli_args qf_cli_args_begin(const qf_cli_command *cmd, int argc, char **argv);
bool qf_cli_args_next(qf_cli_args *a);
bool qf_cli_args_flag(qf_cli_args *a, const char *name, const char *alias);
bool qf_cli_args_value(qf_cli_args *a, const char *name, const char *alias, const char **val);
bool qf_cli_args_positional(qf_cli_args *a, const char **val);
/* "unknown option" / "unexpected argument" usage error; returns QF_EXIT_USAGE. */
int qf_cli_args_unknown(qf_cli_args *a);

/* --- output helpers ------------------------------------------------------- */
/* JSON: build the text in a qf_strbuf with qf_strbuf_json_string (core/strbuf.h),
 * the one escaper, then print it. */
/* "1,234,567" into buf; returns buf. */
char *qf_cli_thousands(long long v, char *buf, size_t size);
/* "12.3 KiB" / "512 B" into buf; returns buf. */
char *qf_cli_bytes(unsigned long long v, char *buf, size_t size);
/* The target profile (NULL: neutron) with the --set RULE=VALUE overrides
 * applied into *p; a usage error (printed) for an unknown target or rule
 * (quantize.c: `qfold quantize` and `qfold qat`). */
struct qf_quant_profile;
int qf_cli_quant_profile(const char *target, const char *const *sets, int nsets, struct qf_quant_profile *p);
/* --exclude NAME|OPTYPE[,...] (repeatable; quantize.c: `qfold quantize` and
 * `qfold qat`): every entry of every occurrence, in order, in entries[]
 * (pointing into copies held by the struct; qf_cli_exclude_free). */
#define QF_CLI_MAX_EXCLUDE 256
typedef struct qf_cli_exclude {
    const char *entries[QF_CLI_MAX_EXCLUDE];
    int n;
    char *copies[QF_CLI_MAX_EXCLUDE];
    int ncopies;
} qf_cli_exclude;
/* Adds the entries of one --exclude value; a usage error (printed) for an
 * empty entry or too many. */
int qf_cli_exclude_add(const qf_cli_command *cmd, qf_cli_exclude *x, const char *value);
void qf_cli_exclude_free(qf_cli_exclude *x);
/* The Neutron-ready passes' lines in report r (NULL: none): per pass of the
 * pipelines neutron / neutron_qdq that ran, its rewrites and skips and the
 * first skip reasons (target_passes.c). */
struct qf_pass_report;
void qf_cli_target_passes_print(FILE *f, const struct qf_pass_report *r);
/* Labels file `path` of n samples as int64 (int64, int32 or uint8, [n] or
 * [n, 1]; t holds the file, *out is qf_malloc'd): eval's and quantize's. */
struct qf_tensor;
qf_status qf_cli_labels(const char *path, int64_t n, struct qf_tensor *t, int64_t **out);
/* Top-1 hits of g's first output (class scores [N, classes]) over the samples
 * of src against labels (int64 [N]), in batches of `batch` (eval.c: as `qfold
 * eval` counts them). */
struct qf_graph;
struct qf_data_source;
qf_status qf_cli_top1(struct qf_graph *g, const struct qf_data_source *src, const int64_t *labels, int64_t batch,
                      int64_t *top1);
/* The model output of quantize / qat / finalize written to tmp: TFLite when
 * `path` (the name the user gave) ends in ".tflite", else ONNX (tflite_out.c). */
bool qf_cli_is_tflite(const char *path);
qf_status qf_cli_save_model(const struct qf_graph *g, const char *path, const char *tmp);
/* Write what `print(f, ctx)` prints to `path` through a temporary file in the
 * same directory + rename, so a failure never leaves a truncated file. */
qf_status qf_cli_write_file(const char *path, void (*print)(FILE *f, const void *ctx),
                            const void *ctx);

/* --- outputs: checked up front, written all or nothing ----------------------
 *
 * The library's qf_outputs (qfold/io.h, "several outputs": how to use it,
 * what add / input refuse), with --external-data and QFOLD_EXTERNAL_DATA_LIMIT
 * applied by init, and exit codes: add and input print the library's message
 * and return QF_EXIT_USAGE (QF_EXIT_FAIL out of memory); commit prints a
 * failed rename and returns QF_EXIT_FAIL. */
typedef qf_outputs qf_cli_outputs;
void qf_cli_outputs_init(qf_cli_outputs *s);
int qf_cli_outputs_add(qf_cli_outputs *s, const char *what, const char *path);
/* Add a model output other than the first (qat --keep-qat): with
 * --external-data its side file "<path>.data" is checked as well. */
int qf_cli_outputs_add_model(qf_cli_outputs *s, const char *what, const char *path);
int qf_cli_outputs_input(const qf_cli_outputs *s, const char *what, const char *path);
qf_status qf_cli_outputs_stage(qf_cli_outputs *s, int i, const char **tmp);
int qf_cli_outputs_commit(qf_cli_outputs *s);
/* Discard what output i staged: commit leaves its file as it was. */
void qf_cli_outputs_drop(qf_cli_outputs *s, int i);
void qf_cli_outputs_free(qf_cli_outputs *s);
/* qf_cli_fail for a failure while writing output i: the message names it,
 * and an I/O error (full disk, quota, EIO) is a failure while processing
 * (exit 1), not bad input. */
int qf_cli_fail_write(const qf_cli_outputs *s, int i, qf_status st);

/* qfold export --data (src/cli/export_data.c): the report's per-op max_lsb
 * (integer reference vs simulation) on the first `count` samples (0: all) of
 * one .npy per graph input; *max_lsb (r->nops values, NaN: not measured)
 * from qf_malloc. */
#define QF_CLI_EXPORT_MAX_DATA 8
struct qf_tflite_result;
qf_status qf_cli_export_lsb(const struct qf_graph *g, const struct qf_tflite_result *r, const char *const *data,
                            int ndata, int64_t count, double **max_lsb);

/* --- external data: --external-data[=NAME] ----------------------------------
 *
 * Every command that writes an ONNX model (fuse, quantize, finalize, train,
 * qat) takes --external-data[=NAME]: initializers of 1 KiB and more go to
 * one side file NAME in the output's directory (default: the output's name +
 * ".data"; a second model, qat's --keep-qat FILE, always "FILE.data"). Without it a model over protobuf's 2 GiB goes out that way
 * anyway (the limit can be lowered for tests with QFOLD_EXTERNAL_DATA_LIMIT,
 * bytes). main.c strips the option (qf_cli_extdata_strip) before the command
 * parses its arguments; the commands only call qf_cli_outputs_save_model for
 * their models (output i) and load what they wrote with qf_cli_load_staged.
 * A side file is always named after the output's final name (never the
 * staged temporary's), staged and renamed with the outputs: all or none. */
struct qf_graph;
/* cmd: the command argv[1] names (NULL: none), for the usage line of an error. */
int qf_cli_extdata_strip(const qf_cli_command *cmd, int *argc, char **argv);
/* Stage output i and write g to it (*tmp: the staged name), with its side
 * file staged next to it when external data is written. */
qf_status qf_cli_outputs_save_model(qf_cli_outputs *s, int i, const struct qf_graph *g, const char **tmp);
/* qf_onnx_load of a model the last qf_cli_outputs_save_model staged at
 * `path` (its side file read from its staged name), else of path. */
qf_status qf_cli_load_staged(const char *path, struct qf_graph **out);

/* --- half precision ------------------------------------------------------------ */
/* A value's dtype as the model has it: "float16" / "bfloat16" for the float32
 * values qfold holds for them (qf_value.store), else qf_dtype_name. */
struct qf_value;
const char *qf_cli_dtype_label(const struct qf_value *v);
/* The default verification tolerance for g: `tol`, raised to what writing
 * folded weights back in the model's float16 (1e-2) / bfloat16 (5e-2)
 * costs when g holds such values. */
double qf_cli_half_tolerance(const struct qf_graph *g, double tol);

#endif
