/* A minimal check harness for qfold's C unit tests.
 *
 *   static void test_something(void) { CHECK(x == 1); CHECK_OK(qf_graph_verify(g)); }
 *   int main(void) { RUN(test_something); return qf_check_report(); }
 *
 * A failed CHECK prints file:line and the expression (and, for statuses, the
 * status and qfold's message) and the test goes on; RUN prints one line per
 * test; qf_check_report prints "N passed, M failed" and returns the exit code.
 *
 * The counting allocator (qf_check_count_allocs) routes qfold's allocation
 * hook through malloc while counting live blocks, so a test can assert that
 * everything it allocated was freed even where LeakSanitizer cannot run.
 */
#ifndef QF_CHECK_H
#define QF_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qfold/status.h"

static int qf_check_failed_now, qf_check_passed, qf_check_failed;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);  \
            qf_check_failed_now = 1;                                                  \
        }                                                                             \
    } while (0)

#define CHECK_STATUS(expr, want)                                                      \
    do {                                                                              \
        qf_status chk_st_ = (expr);                                                   \
        if (chk_st_ != (want)) {                                                      \
            fprintf(stderr, "%s:%d: %s returned %s, expected %s (message: %s)\n",     \
                    __FILE__, __LINE__, #expr, qf_status_name(chk_st_),               \
                    qf_status_name(want), qf_error_message());                        \
            qf_check_failed_now = 1;                                                  \
        }                                                                             \
    } while (0)

#define CHECK_OK(expr) CHECK_STATUS(expr, QF_OK)

/* The current error message contains `needle`. */
#define CHECK_MSG(needle)                                                             \
    do {                                                                              \
        if (!strstr(qf_error_message(), (needle))) {                                  \
            fprintf(stderr, "%s:%d: message \"%s\" does not contain \"%s\"\n",       \
                    __FILE__, __LINE__, qf_error_message(), (needle));                \
            qf_check_failed_now = 1;                                                  \
        }                                                                             \
    } while (0)

#define RUN(fn)                                                                       \
    do {                                                                              \
        qf_check_failed_now = 0;                                                      \
        qf_error_clear();                                                             \
        fn();                                                                         \
        printf("%s %s\n", qf_check_failed_now ? "FAIL" : "PASS", #fn);                \
        fflush(stdout);                                                               \
        if (qf_check_failed_now) qf_check_failed++; else qf_check_passed++;           \
    } while (0)

static inline int qf_check_report(void)
{
    (void)qf_check_failed_now;
    printf("%d passed, %d failed\n", qf_check_passed, qf_check_failed);
    return qf_check_failed ? 1 : 0;
}

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
