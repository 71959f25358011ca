/* The allocation hook. Every allocation in qfold goes through qf_alloc_hook,
 * so a test can swap in an allocator that fails on the N-th call and check
 * that the failure comes back as QF_ERR_NOMEM, not as a crash. */
#include <stdlib.h>
#include <string.h>

#include "qfold/status.h"

static void *qf_default_alloc(void *ud, void *ptr, size_t nsize)
{
    (void)ud;
    if (nsize == 0) {
        free(ptr);
        return NULL;
    }
    return realloc(ptr, nsize);
}

static qf_alloc_fn qf_alloc_hook = qf_default_alloc;
static void *qf_alloc_ud = NULL;

void qf_set_allocator(qf_alloc_fn fn, void *ud)
{
    qf_alloc_hook = fn ? fn : qf_default_alloc;
    qf_alloc_ud = fn ? ud : NULL;
}

void *qf_realloc(void *p, size_t n)
{
    void *r = qf_alloc_hook(qf_alloc_ud, p, n ? n : 1);
    if (!r) qf_error(QF_ERR_NOMEM, "out of memory (asked for %zu bytes)", n);
    return r;
}

void *qf_malloc(size_t n) { return qf_realloc(NULL, n); }

void *qf_calloc(size_t count, size_t size)
{
    if (size && count > (size_t)-1 / size) {
        qf_error(QF_ERR_NOMEM, "out of memory (%zu x %zu bytes overflows)", count, size);
        return NULL;
    }
    void *p = qf_malloc(count * size);
    if (p) memset(p, 0, count * size);
    return p;
}

void qf_free(void *p)
{
    if (p) qf_alloc_hook(qf_alloc_ud, p, 0);
}

char *qf_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *r = qf_malloc(n);
    if (r) memcpy(r, s, n);
    return r;
}
