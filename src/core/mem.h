/* Private: handing memory pages back to the system, or asking for them at once. */
#ifndef QF_CORE_MEM_H
#define QF_CORE_MEM_H

#include <stddef.h>

/* The whole pages inside [p, p + n) of private, writable memory the caller
 * owns (from qf_malloc) are handed back to the system: the process's
 * resident memory shrinks, and the bytes read as zeros if touched again.
 * Only for bytes nothing will read again. Pages partly outside the range
 * are left alone; a no-op where the system has no such call. */
void qf_mem_discard(void *p, size_t n);

/* Ask the system to back the whole pages inside [p, p + n) with memory now,
 * in one call, rather than one page fault at a time as they are first
 * written: on a VM each fault of a fresh page costs microseconds, and a 100 MB
 * buffer is 25,000 of them. The range is first marked for transparent huge
 * pages (2 MiB; Linux's THP in its default "madvise" mode needs the mark):
 * 50 of them instead of 25,000 pages make populating, every later pass over
 * the bytes (fewer TLB misses) and unmapping several times cheaper (resnet50's
 * 100 MB model buffer: populate 51 -> 14 ms, munmap 106 -> 1 ms, user time of
 * `qfold fuse` 4x lower). Hints only: kernels before 5.14 refuse the populate
 * and the pages fault in as usual; without THP the pages stay 4 KB. */
void qf_mem_populate(void *p, size_t n);

/* Only the transparent-huge-page mark of qf_mem_populate: the pages still
 * fault in as they are first written, 2 MiB at a time where the system can
 * (the executor's arena and scratch: most of a one-shot `qfold run` was
 * their 4 KB first-touch faults). A hint; nothing changes without THP. */
void qf_mem_hugepages(void *p, size_t n);

#endif
