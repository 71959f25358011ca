/* The check harness of qfold's C tests.
 *
 *   static void test_something(void)
 *   {
 *       REQUIRE(g != NULL, "graph init: %s", qf_error_message()); // stops this test case
 *       CHECK(x == 1);
 *       CHECKF(y == 2, "%s: y = %d", name, y);
 *       CHECK_OK(qf_graph_verify(g));
 *       CHECK_ERR(qf_graph_toposort(g), QF_ERR_INVALID, "cycle");
 *   }
 *   int main(void) { RUN(test_something); return qf_check_report(); }
 *
 * A failed check prints file:line and what failed (the expression, the
 * formatted message, or for statuses the status and qfold's message), counts
 * the failure and the test goes on. REQUIRE is for preconditions: when it
 * fails, the rest of the test case is skipped (inside RUN), or the program
 * prints its summary and exits with 1 (outside RUN). RUN prints one
 * "PASS name" / "FAIL name" line per test case. qf_check_report prints the
 * closing line "N passed, M failed" (test cases; a check that failed outside
 * any RUN counts as one more failed case) and returns the exit code.
 *
 * REQUIRE_OK(expr) is REQUIRE for a status; FAIL(fmt, ...) records a failure
 * the test found by its own logic (a comparison loop, a missing file).
 * Every macro has a QF_ name (QF_CHECK, QF_CHECKF, QF_CHECK_OK,
 * QF_CHECK_STATUS, QF_CHECK_ERR, QF_CHECK_MSG, QF_REQUIRE, QF_REQUIRE_OK,
 * QF_FAIL, QF_RUN) and a short
 * alias without the prefix; define QF_CHECK_NO_SHORT_NAMES to drop the aliases.
 *
 * The counting allocator (qf_check_count_allocs) routes qfold's allocation
 * hook through malloc while counting live blocks, so a test can assert that
 * everything it allocated was freed even where LeakSanitizer cannot run.
 */
#ifndef QF_CHECK_H
#define QF_CHECK_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qfold/status.h"

/* Test cases passed / failed so far, and whether the current one failed.
 * Tests may bump qf_check_failed / qf_check_passed themselves for case-level
 * results they decide outside RUN. */
static int qf_check_failed_now, qf_check_passed, qf_check_failed;
/* Failed checks in all, and how many of them RUN already accounted for. */
static long qf_check_nfailed_checks, qf_check_nfailed_in_runs;
/* Where REQUIRE jumps to: set while RUN runs a test case. */
static jmp_buf qf_check_jmp;
static int qf_check_in_run;

#if defined(__GNUC__)
#define QF_CHECK_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define QF_CHECK_PRINTF(f, a)
#endif

static inline void qf_check_mark_failed(void)
{
    qf_check_failed_now = 1;
    qf_check_nfailed_checks++;
}

/* Print "file:line: <what> failed: <expr>" and count it. */
static inline void qf_check_fail_expr(const char *file, int line, const char *what, const char *expr)
{
    fprintf(stderr, "%s:%d: %s failed: %s\n", file, line, what, expr);
    fflush(stderr);
    qf_check_mark_failed();
}

/* The same, followed by ": <formatted message>" (no expression: just the message). */
static inline QF_CHECK_PRINTF(5, 6) void qf_check_fail(const char *file, int line, const char *what,
                                                        const char *expr, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s:%d: %s failed: %s%s", file, line, what, expr, expr[0] ? ": " : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    qf_check_mark_failed();
}

static inline int qf_check_report(void)
{
    long outside = qf_check_nfailed_checks - qf_check_nfailed_in_runs;
    if (outside > 0) {
        printf("FAIL %ld check(s) outside any test case\n", outside);
        qf_check_failed++;
        qf_check_nfailed_in_runs = qf_check_nfailed_checks;
    }
    printf("%d passed, %d failed\n", qf_check_passed, qf_check_failed);
    fflush(stdout);
    return qf_check_failed ? 1 : 0;
}

/* REQUIRE failed: leave the test case, or the program when outside RUN. */
static inline void qf_check_stop(void)
{
    if (qf_check_in_run) longjmp(qf_check_jmp, 1);
    (void)qf_check_report();
    exit(1);
}

/* Run one test case; a failed REQUIRE inside it comes back here. The setjmp
 * sits in this small frame so no caller's locals live across it. */
static inline void qf_check_run(void (*fn)(void), const char *name)
{
    long before = qf_check_nfailed_checks;
    qf_check_failed_now = 0;
    qf_error_clear();
    qf_check_in_run = 1;
    if (setjmp(qf_check_jmp) == 0) fn();
    qf_check_in_run = 0;
    qf_check_nfailed_in_runs += qf_check_nfailed_checks - before;
    printf("%s %s\n", qf_check_failed_now ? "FAIL" : "PASS", name);
    fflush(stdout);
    if (qf_check_failed_now) qf_check_failed++; else qf_check_passed++;
    qf_check_failed_now = 0;
}

#define QF_CHECK(cond)                                                                \
    do {                                                                              \
        if (!(cond)) qf_check_fail_expr(__FILE__, __LINE__, "CHECK", #cond);          \
    } while (0)

/* QF_CHECKF(cond, fmt, ...): a check with a printf-style message (values,
 * names) printed when it fails. */
#define QF_CHECKF(cond, ...)                                                          \
    do {                                                                              \
        if (!(cond)) qf_check_fail(__FILE__, __LINE__, "CHECK", #cond, __VA_ARGS__);  \
    } while (0)

/* QF_REQUIRE(cond, fmt, ...): a precondition; when it fails the test case
 * stops (see the top of this file). */
#define QF_REQUIRE(cond, ...)                                                         \
    do {                                                                              \
        if (!(cond)) {                                                                \
            qf_check_fail(__FILE__, __LINE__, "REQUIRE", #cond, __VA_ARGS__);         \
            qf_check_stop();                                                          \
        }                                                                             \
    } while (0)

#define QF_CHECK_STATUS(expr, want)                                                   \
    do {                                                                              \
        qf_status chk_st_ = (expr);                                                   \
        if (chk_st_ != (want)) {                                                      \
            fprintf(stderr, "%s:%d: %s returned %s, expected %s (message: %s)\n",     \
                    __FILE__, __LINE__, #expr, qf_status_name(chk_st_),               \
                    qf_status_name(want), qf_error_message());                        \
            qf_check_mark_failed();                                                   \
        }                                                                             \
    } while (0)

#define QF_CHECK_OK(expr) QF_CHECK_STATUS(expr, QF_OK)

/* QF_REQUIRE_OK(expr): `expr` returns QF_OK, else the test case stops. */
#define QF_REQUIRE_OK(expr)                                                           \
    do {                                                                              \
        qf_status chk_st_ = (expr);                                                   \
        if (chk_st_ != QF_OK) {                                                       \
            qf_check_fail(__FILE__, __LINE__, "REQUIRE", #expr, "%s: %s",             \
                          qf_status_name(chk_st_), qf_error_message());               \
            qf_check_stop();                                                          \
        }                                                                             \
    } while (0)

/* QF_FAIL(fmt, ...): a failure found by the test's own logic (a comparison
 * loop, a file it cannot read), with a message. */
#define QF_FAIL(...) qf_check_fail(__FILE__, __LINE__, "check", "", __VA_ARGS__)

/* The current error message contains `needle`. */
#define QF_CHECK_MSG(needle)                                                          \
    do {                                                                              \
        if (!strstr(qf_error_message(), (needle))) {                                  \
            fprintf(stderr, "%s:%d: message \"%s\" does not contain \"%s\"\n",        \
                    __FILE__, __LINE__, qf_error_message(), (needle));                \
            qf_check_mark_failed();                                                   \
        }                                                                             \
    } while (0)

/* `expr` fails with status `code` and a message containing `substring`; on a
 * mismatch both the expected and the actual status and message are printed. */
#define QF_CHECK_ERR(expr, code, substring)                                           \
    do {                                                                              \
        qf_status chk_st_ = (expr);                                                   \
        const char *chk_m_ = qf_error_message();                                      \
        if (chk_st_ != (code) || !strstr(chk_m_, (substring))) {                      \
            fprintf(stderr, "%s:%d: %s: expected %s with a message containing "       \
                    "\"%s\"; got %s: \"%s\"\n", __FILE__, __LINE__, #expr,            \
                    qf_status_name(code), (substring), qf_status_name(chk_st_),       \
                    chk_m_);                                                          \
            qf_check_mark_failed();                                                   \
        }                                                                             \
    } while (0)

/* Run one test case: void fn(void). */
#define QF_RUN(fn) qf_check_run(fn, #fn)

#ifndef QF_CHECK_NO_SHORT_NAMES
#define CHECK QF_CHECK
#define CHECKF QF_CHECKF
#define REQUIRE QF_REQUIRE
#define REQUIRE_OK QF_REQUIRE_OK
#define FAIL QF_FAIL
#define CHECK_STATUS QF_CHECK_STATUS
#define CHECK_OK QF_CHECK_OK
#define CHECK_MSG QF_CHECK_MSG
#define CHECK_ERR QF_CHECK_ERR
#define RUN QF_RUN
#endif

/* --- counting allocator ------------------------------------------------- */
typedef struct qf_check_alloc {
    long live;        /* blocks allocated and not yet freed */
    long calls;       /* allocation calls so far (malloc and realloc) */
    long fail_at;     /* fail the call with this number (1-based); 0 = never */
    int persistent;   /* also fail every later call */
    long failures;    /* calls failed so far */
} qf_check_alloc;

static void *qf_check_alloc_fn(void *ud, void *ptr, size_t nsize)
{
    qf_check_alloc *a = ud;
    if (nsize == 0) {
        if (ptr) {
            a->live--;
            free(ptr);
        }
        return NULL;
    }
    a->calls++;
    if (a->fail_at > 0 && (a->calls == a->fail_at || (a->persistent && a->calls > a->fail_at))) {
        a->failures++;
        return NULL;
    }
    void *r = realloc(ptr, nsize);
    if (r && !ptr) a->live++;
    return r;
}

static inline void qf_check_count_allocs(qf_check_alloc *a)
{
    memset(a, 0, sizeof *a);
    qf_set_allocator(qf_check_alloc_fn, a);
}

#endif
