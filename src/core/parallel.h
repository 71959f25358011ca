/* A tiny fork-join helper for kernels that OpenBLAS does not thread (the
 * depthwise convolution): split [0, n) into one contiguous slice per thread.
 *
 *   static void body(void *ctx, int64_t lo, int64_t hi) { ... items lo..hi-1 ... }
 *   qf_parallel_for(channels, min_per_thread, body, &ctx);
 *
 * The thread count follows OpenBLAS's (openblas_get_num_threads, so
 * OPENBLAS_NUM_THREADS=1 makes both single-threaded). The workers are created
 * once, on first use, and sleep on a condition variable between jobs (they
 * never spin, so they do not steal the core from OpenBLAS's own threads).
 * If they cannot be created, the work runs on the calling thread. Jobs from
 * several threads at once are serialized. `body` must not call
 * qf_parallel_for itself.
 */
#ifndef QF_PARALLEL_H
#define QF_PARALLEL_H

#include <stdint.h>

typedef void (*qf_parallel_fn)(void *ctx, int64_t lo, int64_t hi);

/* Runs body over [0, n) in slices of at least `grain` items; returns when all
 * slices are done. */
void qf_parallel_for(int64_t n, int64_t grain, qf_parallel_fn body, void *ctx);

#endif
