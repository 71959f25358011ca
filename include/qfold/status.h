/* qfold — status codes, error messages, the allocation hook.
 *
 *   qf_status st = qf_onnx_load("m.onnx", &g);
 *   if (st != QF_OK) fprintf(stderr, "qfold: %s\n", qf_error_message());
 *
 * Library functions return a qf_status. A failing function records one message
 * (naming the node and the problem) in a thread-local buffer before it returns;
 * qf_error_message() reads it. Library code never prints and never exits.
 */
#ifndef QFOLD_STATUS_H
#define QFOLD_STATUS_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qf_status {
    QF_OK = 0,
    QF_ERR_IO,          /* a file could not be read or written */
    QF_ERR_PARSE,       /* malformed input file (protobuf, .npy) */
    QF_ERR_UNSUPPORTED, /* an op, dtype or attribute value qfold does not handle */
    QF_ERR_INVALID,     /* the model is inconsistent: cycle, missing value, bad attribute */
    QF_ERR_SHAPE,       /* shapes do not fit */
    QF_ERR_NUMERIC,     /* NaN / Inf weights, sigma^2 + eps <= 0, ... */
    QF_ERR_NOMEM,       /* the allocation hook returned NULL */
    QF_ERR_MISMATCH,    /* a verification (e.g. fused vs original outputs) failed */
    QF_ERR_INTERNAL,    /* a broken invariant: a bug in qfold */
    QF_ERR_INTERRUPTED, /* stopped on request (Ctrl-C): what was done so far is kept */
    QF_ERR_DIVERGED     /* training diverged: a loss, gradient or parameter is not finite */
} qf_status;

/* Record a formatted message for `code` and return `code`. */
qf_status qf_error(qf_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Prepend context ("while loading m.onnx: ") to the current message. */
qf_status qf_error_prefix(qf_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
const char *qf_error_message(void);
void qf_error_clear(void);
const char *qf_status_name(qf_status st);
/* The library's version, "MAJOR.MINOR.PATCH" (the project's; `qfold
 * --version` prints the same): a binding checks it against its own. */
const char *qf_version(void);

/* --- interruption (src/core/interrupt.c) ----------------------------------
 *
 * A request to stop the long work in progress, from any thread or a signal
 * handler: the library's long loops (every plan run, every training forward
 * and step, every AdaRound iteration) check it and return
 * QF_ERR_INTERRUPTED "interrupted" at their next check; what was done so
 * far is kept as each entry point documents (qf_train: the steps made).
 * Process-wide; nothing sets it but the calls below (the CLI's own SIGINT
 * handling does not use it). qf_interrupt_request and qf_interrupt_on_signal
 * are async-signal-safe. */
void qf_interrupt_request(void);
bool qf_interrupt_pending(void);
void qf_interrupt_clear(void);
/* QF_ERR_INTERRUPTED (message "interrupted") when a request is pending,
 * else QF_OK; the request stays pending until qf_interrupt_clear. */
qf_status qf_interrupt_check(void);
/* For a host whose own SIGINT handler cannot run while the library works
 * (Python's runs only between bytecodes): qf_interrupt_catch_sigint makes
 * SIGINT request an interruption, keeping the disposition it replaces;
 * qf_interrupt_release_sigint puts that back (a no-op when not caught).
 * Not nested; for the process's main thread. QF_ERR_IO when sigaction
 * fails. */
qf_status qf_interrupt_catch_sigint(void);
void qf_interrupt_release_sigint(void);

/* Propagate a failing status. */
#define QF_TRY(expr)                         \
    do {                                     \
        qf_status qf_try_st_ = (expr);       \
        if (qf_try_st_ != QF_OK) return qf_try_st_; \
    } while (0)

/* The allocation hook (Lua's lua_Alloc shape): nsize == 0 frees `ptr` and
 * returns NULL; otherwise behaves as realloc. Every allocation in qfold goes
 * through it, so tests can inject failures. */
typedef void *(*qf_alloc_fn)(void *ud, void *ptr, size_t nsize);
void qf_set_allocator(qf_alloc_fn fn, void *ud);

void *qf_malloc(size_t n);             /* NULL on failure (message recorded) */
void *qf_calloc(size_t count, size_t size);
void *qf_realloc(void *p, size_t n);
void qf_free(void *p);
char *qf_strdup(const char *s);

#ifdef __cplusplus
}
#endif
#endif
