/* A tiny fork-join helper for the reference kernels: split [0, n) into one
 * contiguous slice per thread.
 *
 *   static void body(void *ctx, int64_t lo, int64_t hi) { ... items lo..hi-1 ... }
 *   qf_parallel_for(channels, min_per_thread, body, &ctx);
 *
 * The thread count is qf_parallel_threads(): the machine's cores unless set
 * (`--threads`); the oneDNN backend runs on as many. The workers are created
 * once, on first use, and sleep on a condition variable between jobs (they
 * never spin). If they cannot be created, the work runs on the calling
 * thread. Jobs from several threads at once are serialized. `body` must not
 * call qf_parallel_for itself.
 *
 * A runner (qf_parallel_set_runner: the oneDNN backend's OpenMP team, once
 * it is loaded) takes the jobs of the thread that set it instead of the pool,
 * with the same slices: the team's threads are the ones still spinning after
 * a oneDNN call, which a pool worker woken then would share a core with.
 */
#ifndef QF_PARALLEL_H
#define QF_PARALLEL_H

#include <stdbool.h>
#include <stdint.h>

/* Threads the kernels use (>= 1): set, or the online cores (at most 16). */
int qf_parallel_threads(void);
/* 0 = the cores. Takes effect before the first parallel job (the pool is made
 * once). -1 when n is out of range (0..16). */
int qf_parallel_set_threads(int n);

/* The calling thread's stack, QF_STACK_RESERVE bytes of it, mapped now:
 * kernels run on the caller too and keep buffers on the stack (the GEMM's
 * packed panels: ~200 KB). The main thread's stack grows on first touch, and
 * under an address-space limit (RLIMIT_AS) that growth fails once the
 * plan's allocations have taken the room: a SIGSEGV inside a kernel instead
 * of a clean out-of-memory. Plans call this before they allocate. */
#define QF_STACK_RESERVE ((size_t)1 << 20)
void qf_stack_reserve(void);

typedef void (*qf_parallel_fn)(void *ctx, int64_t lo, int64_t hi);

/* Runs body over [0, n) in slices of at least `grain` items; returns when all
 * slices are done. */
void qf_parallel_for(int64_t n, int64_t grain, qf_parallel_fn body, void *ctx);

/* Slice s of nslices over [0, n): [n * s / nslices, n * (s + 1) / nslices). */
static inline void qf_parallel_slice(int64_t n, int nslices, int s, int64_t *lo, int64_t *hi)
{
    *lo = n * s / nslices;
    *hi = n * (s + 1) / nslices;
}

/* Runs slices 0..nslices-1 of [0, n) (qf_parallel_slice) on threads of its
 * own and the caller, each once, and returns when all are done; false, having
 * run nothing, when it cannot now (the caller then uses the pool). */
typedef bool (*qf_parallel_runner)(int64_t n, int nslices, qf_parallel_fn body, void *ctx);
/* The calling thread's jobs go to `run` from now on (NULL: the pool again). */
void qf_parallel_set_runner(qf_parallel_runner run);

#endif
