/* The oneDNN loader of dnnl_lib.h: dlopen, the OpenMP runtime's setup, the
 * helpers every oneDNN kernel file shares. The engine choice is backend.c's. */
/* MAP_ANONYMOUS and MAP_NORESERVE (the headroom probe) are not POSIX. */
#define _DEFAULT_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/parallel.h"
#include "backend/dnnl/dnnl_lib.h"
#include "ops/math/gemm.h"

/* Why the library is not loaded ("" until a load failed). */
static char why_not[256];

/* Where libgomp's worker threads keep their stack frames, modulo 4 KiB, is set
 * by the size of the process's static TLS: glibc puts each thread's static TLS
 * block at the top of its stack mapping, and oneDNN (libgomp with it) comes in
 * by dlopen, after the process's static TLS is laid out. With qfold's own
 * 1 KiB alone (the error message, core/status.c) a worker's frames in
 * oneDNN's JIT kernels met, it seems, an address the kernel uses at the same
 * page offset: EfficientNet-B0's stem conv (3 -> 32, 3x3 stride 2, SiLU)
 * took 3.9 ms at batch 8 on 2 threads, slower than on 1 (2.2 ms), where
 * oneDNN alone (bench/conv_bench.c) and a process that loads libgomp at
 * start-up took 1.0-1.3 ms. In perf, the worker thread spent twice the main
 * thread's time in the same kernel. Moving qfold's arena, scratchpad or packed
 * weights by 64 B - 3 KiB changed nothing; growing the static TLS did: a preloaded
 * library with N bytes of TLS made it fast for N = 64 ... 4048 but for two
 * narrow windows (N = 16 and ~3800; N = 4096 is slow again). So the block
 * is 1 KiB larger than qfold's own needs, in the middle of that range
 * (bench/run: efficientnet_b0 ~8 % faster at batch 8, 1-2 % at batch 1,
 * resnet18 and mobilenet_v2 unchanged within noise). This is a measured workaround for a
 * page-offset conflict (4K aliasing, presumably) whose other side was not identified; a
 * new thread-local variable in qfold moves the frames again, so check
 * bench/run (and bench/layers' stem conv) after adding one. */
#define QF_TLS_PAD 1024
__attribute__((used)) _Thread_local char qf_dnnl_tls_pad[QF_TLS_PAD];

qf_dnnl_lib qf_dnnl_lib_;
static int dnnl_state;           /* 0 not tried, 1 loaded, -1 failed (why_not says why) */
static bool dnnl_nomem;          /* it failed for want of memory */
static char dnnl_version_str[32];

/* Environment for libgomp, which reads it once, when it loads: the library
 * only recommends it (qf_backend_environment); the program sets it, before
 * oneDNN loads (the CLI does in main.c; the library changes no process
 * environment). OMP_STACKSIZE: libgomp's threads otherwise get the
 * process's stack limit (8 MB) each; oneDNN's kernels need far less.
 *
 * Waiting: between two oneDNN calls libgomp's threads spin at most
 * QF_OMP_SPIN iterations of a pause loop (well under a millisecond), then
 * sleep on a futex. A plan calls oneDNN dozens of times per run, so a thread
 * that sleeps at once (OMP_WAIT_POLICY=passive) costs a wake-up per call:
 * measured on 2 cores at batch 1, passive made efficientnet_b0 3.7x,
 * mobilenet_v2 2.2x and its int8 model (qfold's own Q/DQ kernels between
 * oneDNN's convs) 3.3x slower than this bounded spin, which was as fast as
 * spinning for good (OMP_WAIT_POLICY=active). qfold's own pool never spins,
 * so the two meet for at most the spin after each oneDNN call. A user's
 * OMP_WAIT_POLICY or GOMP_SPINCOUNT is kept. */
#define QF_OMP_STACK "4M"
#define QF_OMP_SPIN "30000"
/* A training step is another mix: dozens of qfold's own kernels (BatchNorm
 * forward and backward, fake-quant, activations) on qfold's pool between
 * the convolutions, for which libgomp's spinning threads leave no core. A
 * process that says it trains (qf_backend_prefer_training, before oneDNN
 * loads) gets a tenth of the spin: bench/train's ds_cnn step ~20 % faster
 * at 3000 than at 30000 on 2 cores, QAT's (bench/qat) 25-45 %. */
#define QF_OMP_SPIN_TRAIN "3000"
/* A machine busy with other work is the opposite case: a thread that spins
 * uses up its share of a core, the scheduler then runs the other jobs first,
 * and oneDNN's next parallel region waits a whole time slice at its barrier
 * for it. With the load average above QF_OMP_BUSY_LOAD per core when oneDNN
 * loads, the spin is QF_OMP_SPIN_BUSY (a few microseconds: about sleeping at
 * once, and waking is cheap when no core is idle). Measured at load average
 * 11-16 on 2 cores, batch 1, medians against 30000: efficientnet_b0 296 ->
 * 11.8 ms, resnet18 107 -> 47 ms, mobilenet_v2's int8 model 11.3 -> 4.0 ms;
 * efficientnet_b0 batch 8 427 -> 180 ms (3000: 24.7, 56, 6.8, 183 ms). */
#define QF_OMP_SPIN_BUSY "300"
#define QF_OMP_BUSY_LOAD 2.0
static bool omp_training;
static bool omp_busy(void)
{
    double load[1];
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return getloadavg(load, 1) == 1 && cores > 0 && load[0] > QF_OMP_BUSY_LOAD * (double)cores;
}
static int omp_environment(const char **names, char (*values)[24])
{
    int k = 0;
    names[k] = "OMP_NUM_THREADS";
    snprintf(values[k++], 24, "%d", qf_parallel_threads());
    if (!getenv("OMP_WAIT_POLICY")) {
        names[k] = "GOMP_SPINCOUNT";
        snprintf(values[k++], 24, "%s", omp_busy() ? QF_OMP_SPIN_BUSY : omp_training ? QF_OMP_SPIN_TRAIN : QF_OMP_SPIN);
    }
    names[k] = "OMP_STACKSIZE";
    snprintf(values[k++], 24, "%s", QF_OMP_STACK);
    return k;
}

/* Whether libgomp's idle threads go to sleep (almost) at once between two
 * parallel regions, as the environment that libgomp reads says: the busy
 * machine's spin (QF_OMP_SPIN_BUSY or less) or OMP_WAIT_POLICY=passive.
 * Then every threaded primitive pays a futex wake-up of its workers (two
 * context switches each) and, on a busy machine, a join that may wait a
 * time slice for a worker not yet running: qf_dk_finish runs more nodes on
 * the calling thread alone (qf_dnnl_lib.short_wait). */
static bool omp_short_wait(void)
{
    const char *w = getenv("OMP_WAIT_POLICY");
    if (w) return strcmp(w, "passive") == 0 || strcmp(w, "PASSIVE") == 0;
    const char *s = getenv("GOMP_SPINCOUNT");
    char *end = NULL;
    long long v = s ? strtoll(s, &end, 10) : 0;
    return s && end != s && *end == '\0' && v <= atoll(QF_OMP_SPIN_BUSY);
}

/* OMP_STACKSIZE in bytes (libgomp's syntax: a number, unit B, K (default),
 * M or G); 8 MB when unreadable. */
static size_t omp_stack_bytes(void)
{
    const char *v = getenv("OMP_STACKSIZE");
    char *end = NULL;
    unsigned long long x = v ? strtoull(v, &end, 10) : 0;
    if (!v || end == v) return (size_t)8 << 20;
    while (*end == ' ') end++;
    int shift = 10;
    switch (*end) {
    case 'b': case 'B': shift = 0; break;
    case 'm': case 'M': shift = 20; break;
    case 'g': case 'G': shift = 30; break;
    default: break;
    }
    if (x > ((unsigned long long)1 << 40) >> shift) return (size_t)8 << 20;
    return (size_t)(x << shift);
}

static void omp_nothing(void *arg) { (void)arg; }

/* Address space oneDNN needs to start beyond its threads' stacks: the JIT
 * code and buffers of sgemm_warm_up, ~30 MB measured with one malloc arena
 * (the CLI's setting), with room to spare. oneDNN does not survive running
 * out during that step (a failed JIT buffer is called anyway: SIGSEGV). */
#define QF_DNNL_MARGIN ((size_t)64 << 20)

/* libgomp's entry points for qfold's own jobs on the team (omp_run). */
static struct {
    void (*parallel)(void (*)(void *), void *, unsigned, unsigned); /* GOMP_parallel */
    int (*thread_num)(void), (*num_threads)(void), (*in_parallel)(void);
    int team; /* the team's size, started by omp_warm_up */
} omp;

typedef struct omp_job {
    int64_t n;
    int nslices;
    qf_parallel_fn body;
    void *ctx;
} omp_job;

/* Thread t of the team runs slices t, t + nt, ... */
static void omp_job_region(void *arg)
{
    const omp_job *j = arg;
    const int nt = omp.num_threads();
    for (int s = omp.thread_num(); s < j->nslices; s += nt) {
        int64_t lo, hi;
        qf_parallel_slice(j->n, j->nslices, s, &lo, &hi);
        j->body(j->ctx, lo, hi);
    }
}

/* qf_parallel_for's runner once oneDNN is loaded: qfold's own kernels run on
 * oneDNN's OpenMP team, from the thread that started it, with no more threads
 * than it has (libgomp would create any more, and exit(1) if it cannot).
 * Between two oneDNN calls the team's workers are still spinning
 * (GOMP_SPINCOUNT): they pick the job up at once, where qfold's pool would
 * wake threads of its own to share the cores with them. */
static bool omp_run(int64_t n, int nslices, qf_parallel_fn body, void *ctx)
{
    if (omp.in_parallel()) return false;
    omp_job j = {n, nslices, body, ctx};
    omp.parallel(omp_job_region, &j, (unsigned)(nslices < omp.team ? nslices : omp.team), 0);
    return true;
}

/* libgomp calls exit(1) when it cannot create a thread for a parallel
 * region, and it creates the threads of the calling thread's team at its
 * first parallel region, keeping them for later ones. So, before oneDNN runs
 * anything: check that the address space has room for the team's stacks
 * (plus QF_DNNL_MARGIN for oneDNN's first allocations) with one mmap that is
 * released at once, then start the team with an empty parallel region.
 * After that, oneDNN's regions (from this thread, which is where the CLI
 * runs every plan) reuse the threads and create none. No room: false, and
 * the reference kernels run instead (their pool copes with threads it
 * cannot create). */
static bool omp_warm_up(int threads)
{
    void *gomp = dlopen("libgomp.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!gomp) return true; /* oneDNN built on another runtime: nothing to guard */
    void (*gomp_parallel)(void (*)(void *), void *, unsigned, unsigned) = NULL;
    *(void **)&gomp_parallel = dlsym(gomp, "GOMP_parallel");
    omp.parallel = gomp_parallel;
    *(void **)&omp.thread_num = dlsym(gomp, "omp_get_thread_num");
    *(void **)&omp.num_threads = dlsym(gomp, "omp_get_num_threads");
    *(void **)&omp.in_parallel = dlsym(gomp, "omp_in_parallel");
    omp.team = threads;
    /* libdnnl keeps libgomp loaded: the pointer outlives the dlclose. */
    *(void **)&qf_dnnl_lib_.omp_set_threads = dlsym(gomp, "omp_set_num_threads");
    *(void **)&qf_dnnl_lib_.omp_max_threads = dlsym(gomp, "omp_get_max_threads");
    if (!qf_dnnl_lib_.omp_max_threads) qf_dnnl_lib_.omp_set_threads = NULL;
    bool ok = true;
    if (gomp_parallel && threads > 1) {
        size_t need = (size_t)(threads - 1) * (omp_stack_bytes() + ((size_t)1 << 20)) + QF_DNNL_MARGIN;
        void *probe = mmap(NULL, need, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (probe == MAP_FAILED) {
            snprintf(why_not, sizeof why_not,
                     "out of memory: no room for oneDNN's %d threads (%zu MB of address space)", threads,
                     need >> 20);
            ok = false;
        } else {
            munmap(probe, need);
            gomp_parallel(omp_nothing, NULL, (unsigned)threads, 0);
        }
    }
    dlclose(gomp);
    return ok;
}

/* dnnl_sgemm generates its JIT kernels once, on first use, inside a
 * parallel region, and an allocation failure there is a C++ exception that
 * ends the process (std::terminate). So the kernels are generated now, on
 * both transposes of A and B, while the process is small; later sgemm calls
 * only allocate their packing buffers, whose failure comes back as
 * dnnl_out_of_memory. */
static bool sgemm_warm_up(qf_dnnl_lib *d)
{
    enum { W = 96 };
    static float a[W * W], b[W * W], c[W * W];
    for (int t = 0; t < 4; t++)
        if (d->sgemm(t & 1 ? 'T' : 'N', t & 2 ? 'T' : 'N', W, W, W, 1.0f, a, W, b, W, 0.0f, c, W) != dnnl_success) {
            snprintf(why_not, sizeof why_not, "out of memory: oneDNN's sgemm could not start");
            return false;
        }
    return true;
}

static bool dnnl_load(void)
{
    void *h = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why_not, sizeof why_not, "oneDNN (libdnnl.so.2) could not be loaded: %s", e ? e : "?");
        /* The loader's words when mmap fails under a memory limit. */
        dnnl_nomem = e && (strstr(e, "map segment") || strstr(e, "Cannot allocate memory"));
        return false;
    }
    qf_dnnl_lib *d = &qf_dnnl_lib_;
#define QF_DNNL_SYM_(ret, name, params)                                                                   \
    *(void **)&d->name = dlsym(h, "dnnl_" #name);                                                       \
    if (!d->name) {                                                                                     \
        snprintf(why_not, sizeof why_not, "oneDNN (libdnnl.so.2) has no dnnl_" #name);                  \
        dlclose(h);                                                                                     \
        return false;                                                                                   \
    }
    QF_DNNL_FUNCS(QF_DNNL_SYM_)
#undef QF_DNNL_SYM_
    const dnnl_version_t *v = d->version();
    if (!v || v->major != 2 || v->minor < 6) {
        snprintf(why_not, sizeof why_not, "oneDNN %d.%d found, qfold needs 2.6 or a later 2.x", v ? v->major : 0,
                 v ? v->minor : 0);
        dlclose(h);
        return false;
    }
    if (d->engine_create(&d->engine, dnnl_cpu, 0) != dnnl_success) {
        snprintf(why_not, sizeof why_not, "oneDNN could not create its CPU engine");
        dlclose(h);
        return false;
    }
    if (d->stream_create(&d->stream, d->engine, dnnl_stream_default_flags) != dnnl_success) {
        d->engine_destroy(d->engine);
        snprintf(why_not, sizeof why_not, "oneDNN could not create a stream");
        dlclose(h);
        return false;
    }
    d->threads = qf_parallel_threads();
    d->short_wait = omp_short_wait();
    if (!omp_warm_up(d->threads)) {
        /* The library stays loaded (its threads never start). */
        d->stream_destroy(d->stream);
        d->engine_destroy(d->engine);
        dnnl_nomem = true;
        return false;
    }
    /* oneDNN's team size from the API (qf_set_threads), not from an
     * environment the library does not set; a user's OMP_NUM_THREADS wins. */
    if (!getenv("OMP_NUM_THREADS") && d->omp_set_threads) d->omp_set_threads(d->threads);
    if (!sgemm_warm_up(d)) {
        d->stream_destroy(d->stream);
        d->engine_destroy(d->engine);
        dnnl_nomem = true;
        return false;
    }
    snprintf(dnnl_version_str, sizeof dnnl_version_str, "oneDNN %d.%d.%d", v->major, v->minor, v->patch);
    if (omp.parallel && omp.thread_num && omp.num_threads && omp.in_parallel && omp.team > 1)
        qf_parallel_set_runner(omp_run);
    /* The handle stays open for the process's life. */
    return true;
}

/* Set by the backend layer (backend.c) whenever it resolves the engine,
 * read by every kernel: an atomic, as kernels run on other threads. */
static _Atomic bool dnnl_active;

const qf_dnnl_lib *qf_dnnl(void) { return atomic_load_explicit(&dnnl_active, memory_order_acquire) ? &qf_dnnl_lib_ : NULL; }

void qf_dnnl_activate(bool on)
{
    atomic_store_explicit(&dnnl_active, on && dnnl_state == 1, memory_order_release);
}

bool qf_dnnl_load(void)
{
    if (dnnl_state == 0) dnnl_state = dnnl_load() ? 1 : -1;
    return dnnl_state == 1;
}

const char *qf_dnnl_why_not(void) { return why_not; }

bool qf_dnnl_out_of_memory(void) { return dnnl_nomem; }

const char *qf_dnnl_version(void) { return dnnl_state == 1 ? dnnl_version_str : ""; }

void qf_dnnl_prefer_training(void) { omp_training = true; }

qf_status qf_dnnl_sgemm(const qf_node *n, const qf_sgemm_args *g)
{
    dnnl_status_t s = QF_DNNL(sgemm)(g->ta ? 'T' : 'N', g->tb ? 'T' : 'N', g->m, g->n, g->k, g->alpha, g->a,
                                     g->lda, g->b, g->ldb, g->beta, g->c, g->ldc);
    return qf_dnnl_check(n, s, "sgemm");
}

qf_status qf_dnnl_check(const qf_node *n, dnnl_status_t s, const char *what)
{
    if (s == dnnl_success) return QF_OK;
    const char *nm = n ? n->name : NULL;
    const char *op = n ? qf_op_label(n) : NULL;
    if (s == dnnl_out_of_memory)
        return nm ? qf_error(QF_ERR_NOMEM, "node '%s' (%s): out of memory in oneDNN (%s)", nm, op, what)
                  : qf_error(QF_ERR_NOMEM, "out of memory in oneDNN (%s)", what);
    qf_status code = s == dnnl_unimplemented ? QF_ERR_UNSUPPORTED : QF_ERR_INTERNAL;
    return nm ? qf_error(code, "node '%s' (%s): oneDNN %s failed (status %d)", nm, op, what, (int)s)
              : qf_error(code, "oneDNN %s failed (status %d)", what, (int)s);
}

/* Address space a primitive's creation may need (its JIT kernels and their
 * buffers are a few MB at most; with room to spare). */
#define QF_DNNL_PRIM_ROOM ((size_t)32 << 20)

qf_status qf_dnnl_primitive_create(const qf_node *n, dnnl_primitive_t *prim, const_dnnl_primitive_desc_t pd,
                                   const char *what)
{
    void *probe = mmap(NULL, QF_DNNL_PRIM_ROOM, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (probe == MAP_FAILED) return qf_dnnl_check(n, dnnl_out_of_memory, what);
    munmap(probe, QF_DNNL_PRIM_ROOM);
    return qf_dnnl_check(n, QF_DNNL(primitive_create)(prim, pd), what);
}

qf_status qf_dnnl_try(const qf_node *n, dnnl_status_t s, const char *what)
{
    if (s == dnnl_unimplemented) return QF_ERR_UNSUPPORTED;
    return qf_dnnl_check(n, s, what);
}

bool qf_dnnl_int8_fast(void)
{
    const char *e = getenv("QFOLD_INT8");
    return e && strcmp(e, "fast") == 0;
}

qf_status qf_dnnl_md(const qf_node *n, dnnl_memory_desc_t *md, const qf_tensor *t, int fmt)
{
    dnnl_data_type_t dt;
    switch (t->dtype) {
    case QF_DTYPE_F32: dt = dnnl_f32; break;
    case QF_DTYPE_I8: dt = dnnl_s8; break;
    case QF_DTYPE_U8: dt = dnnl_u8; break;
    case QF_DTYPE_I32: dt = dnnl_s32; break;
    default: return QF_ERR_UNSUPPORTED;
    }
    if (t->ndim < 1 || t->ndim > 5) return QF_ERR_UNSUPPORTED;
    dnnl_dims_t dims;
    for (int i = 0; i < t->ndim; i++) dims[i] = t->dims[i];
    static const dnnl_format_tag_t plain[] = {dnnl_a, dnnl_a, dnnl_ab, dnnl_abc, dnnl_abcd, dnnl_abcde};
    static const dnnl_format_tag_t last[] = {dnnl_a, dnnl_a, dnnl_ab, dnnl_acb, dnnl_acdb, dnnl_acdeb};
    dnnl_format_tag_t tag = fmt && t->ndim >= 3 ? last[t->ndim] : plain[t->ndim];
    if (fmt == 2) {
        if (t->ndim != 4 || dt != dnnl_f32) return QF_ERR_UNSUPPORTED;
        tag = dnnl_nChw16c;
    }
    return qf_dnnl_check(n, QF_DNNL(memory_desc_init_by_tag)(md, t->ndim, dims, dt, tag), "memory descriptor");
}

/* Called with the backend's lock held (omp_training). */
int qf_dnnl_environment(const char **names, char (*values)[24]) { return omp_environment(names, values); }
