/* The fork-join helper of parallel.h: a pool of sleeping worker threads. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <unistd.h>

#include "parallel.h"

/* More threads than this would not pay off for the kernels that use it. */
#define QF_PAR_MAX 16

typedef struct qf_pool {
    pthread_mutex_t lock;      /* guards everything below */
    pthread_cond_t wake, done;
    pthread_mutex_t job_lock;  /* one job at a time */
    int nworkers;              /* threads besides the caller */
    unsigned long generation;  /* bumped per job: a worker runs each job once */
    int pending;               /* worker slices not yet finished */
    int nslices;
    int64_t n;
    qf_parallel_fn body;
    void *ctx;
} qf_pool;

static qf_pool pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER,
                       PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0, 0, 0, 0};
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

/* qf_parallel_set_runner's runner and the thread whose jobs it takes. */
static _Atomic(qf_parallel_runner) runner;
static pthread_t runner_thread;

void qf_parallel_set_runner(qf_parallel_runner run)
{
    runner_thread = pthread_self();
    atomic_store(&runner, run);
}

static void *worker(void *arg)
{
    /* Worker w runs slice w + 1 (the caller runs slice 0). */
    int w = (int)(intptr_t)arg;
    unsigned long seen = 0;
    pthread_mutex_lock(&pool.lock);
    for (;;) {
        while (pool.generation == seen) pthread_cond_wait(&pool.wake, &pool.lock);
        seen = pool.generation;
        if (w + 1 >= pool.nslices) continue; /* not needed for this job */
        int64_t lo, hi;
        qf_parallel_slice(pool.n, pool.nslices, w + 1, &lo, &hi);
        qf_parallel_fn body = pool.body;
        void *ctx = pool.ctx;
        pthread_mutex_unlock(&pool.lock);
        body(ctx, lo, hi);
        pthread_mutex_lock(&pool.lock);
        if (--pool.pending == 0) pthread_cond_signal(&pool.done);
    }
    return NULL;
}

/* Threads set by qf_parallel_set_threads (0: not set: the cores). */
static atomic_int threads_wanted;

/* The cores online, asked once: glibc's sysconf opens and reads a sysfs
 * file each time, and the plan asks for every kernel it runs (a third of
 * the time of a 10^4-node chain's calibration went to it). */
static atomic_int cores_online;

int qf_parallel_threads(void)
{
    int n = atomic_load(&threads_wanted);
    if (n <= 0) {
        n = atomic_load(&cores_online);
        if (n <= 0) {
            long c = sysconf(_SC_NPROCESSORS_ONLN);
            n = c < 1 ? 1 : c > QF_PAR_MAX ? QF_PAR_MAX : (int)c;
            atomic_store(&cores_online, n);
        }
    }
    return n;
}

int qf_parallel_set_threads(int n)
{
    if (n < 0 || n > QF_PAR_MAX) return -1;
    atomic_store(&threads_wanted, n);
    return 0;
}

static void pool_start(void)
{
    int want = qf_parallel_threads();
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0) return;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    for (int i = 0; i < want - 1; i++) {
        pthread_t t;
        if (pthread_create(&t, &attr, worker, (void *)(intptr_t)i) != 0) break;
        pool.nworkers++;
    }
    pthread_attr_destroy(&attr);
}

/* Slices for a job of `want` grains on `threads` threads: at most one per grain. */
static int par_slices(int threads, int64_t want) { return want < threads ? (want < 1 ? 1 : (int)want) : threads; }

void qf_parallel_for(int64_t n, int64_t grain, qf_parallel_fn body, void *ctx)
{
    if (n <= 0) return;
    const int64_t want = n / (grain < 1 ? 1 : grain);
    qf_parallel_runner run = atomic_load(&runner);
    if (run && pthread_equal(pthread_self(), runner_thread)) {
        const int on_team = par_slices(qf_parallel_threads(), want);
        if (on_team == 1) {
            body(ctx, 0, n);
            return;
        }
        if (run(n, on_team, body, ctx)) return;
    }
    pthread_once(&pool_once, pool_start);
    const int nslices = par_slices(pool.nworkers + 1, want);
    if (nslices == 1) {
        body(ctx, 0, n);
        return;
    }
    pthread_mutex_lock(&pool.job_lock);
    pthread_mutex_lock(&pool.lock);
    pool.n = n;
    pool.nslices = nslices;
    pool.body = body;
    pool.ctx = ctx;
    pool.pending = nslices - 1;
    pool.generation++;
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);

    int64_t lo, hi;
    qf_parallel_slice(n, nslices, 0, &lo, &hi);
    body(ctx, lo, hi);

    pthread_mutex_lock(&pool.lock);
    while (pool.pending > 0) pthread_cond_wait(&pool.done, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&pool.job_lock);
}

/* Touches QF_STACK_RESERVE bytes below the caller's frame (not inlined, so
 * the array is a frame of its own; volatile, so the stores stay). Linux
 * keeps a stack mapping once grown. */
__attribute__((noinline)) void qf_stack_reserve(void)
{
    volatile char probe[QF_STACK_RESERVE];
    for (size_t i = 0; i < sizeof probe; i += 4096) probe[i] = 0;
    probe[sizeof probe - 1] = 0;
}
