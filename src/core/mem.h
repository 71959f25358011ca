/* Private: handing memory pages back to the system. */
#ifndef QF_CORE_MEM_H
#define QF_CORE_MEM_H

#include <stddef.h>

/* The whole pages inside [p, p + n) of private, writable memory the caller
 * owns (from qf_malloc) are handed back to the system: the process's
 * resident memory shrinks, and the bytes read as zeros if touched again.
 * Only for bytes nothing will read again. Pages partly outside the range
 * are left alone; a no-op where the system has no such call. */
void qf_mem_discard(void *p, size_t n);

#endif
