/* Handing memory pages back to the system (mem.h). */
/* madvise() is not in POSIX (posix_madvise's DONTNEED does nothing in
 * glibc): _DEFAULT_SOURCE exposes it. */
#define _DEFAULT_SOURCE
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mem.h"

/* madvise(advice) over the whole pages inside [p, p + n), if there are any;
 * a hint whose failure changes nothing. */
static void mem_advise(void *p, size_t n, int advice)
{
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t page = pg > 0 ? (uintptr_t)pg : 4096;
    uintptr_t from = ((uintptr_t)p + page - 1) / page * page;
    uintptr_t to = ((uintptr_t)p + n) / page * page;
    if (to > from) (void)madvise((void *)from, to - from, advice);
}

void qf_mem_discard(void *p, size_t n)
{
#if defined(MADV_DONTNEED)
    /* On private anonymous memory DONTNEED frees the pages at once (zero-
     * filled on the next touch); elsewhere it fails and nothing changes. */
    mem_advise(p, n, MADV_DONTNEED);
#else
    (void)p;
    (void)n;
#endif
}

void qf_mem_populate(void *p, size_t n)
{
#if defined(MADV_HUGEPAGE)
    /* Before the populate, so that it allocates huge pages (mem.h). */
    mem_advise(p, n, MADV_HUGEPAGE);
#endif
#if defined(MADV_POPULATE_WRITE)
    mem_advise(p, n, MADV_POPULATE_WRITE);
#else
    (void)p;
    (void)n;
#endif
}

void qf_mem_hugepages(void *p, size_t n)
{
#if defined(MADV_HUGEPAGE)
    mem_advise(p, n, MADV_HUGEPAGE);
#else
    (void)p;
    (void)n;
#endif
}
