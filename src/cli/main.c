/* qfold: dispatch to a subcommand through the table of help.c (built from
 * QF_CLI_COMMANDS, cli.h); each subcommand lives in its own file. main.c
 * calls help.c and cli.c, neither calls back: no file cycle. */
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "cli.h"
#include "qfold/exec.h"
#include "qfold/io.h"

#ifndef QF_VERSION
#define QF_VERSION "unknown"
#endif

/* --- signals ------------------------------------------------------------------- */

/* SIGINT / SIGTERM / SIGHUP: remove the temporary files of the writes in
 * progress (async-signal-safe unlinks), then die of the same signal. */
static void qf_cli_on_signal(int sig)
{
    qf_file_remove_temps();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void qf_cli_signals(void)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old, sa;
        /* A signal the caller ignores (nohup, a background job) stays ignored. */
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = qf_cli_on_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
    /* A file size limit (ulimit -f) makes write() fail with EFBIG, reported
     * like a full disk, instead of killing qfold mid-write. */
    signal(SIGXFSZ, SIG_IGN);
}

/* --- QFOLD_MAX_MEMORY ------------------------------------------------------------- */

/* A cap on what qfold allocates itself (through the library's allocation
 * hook): past it an allocation fails and the command exits 1 with "out of
 * memory". Each block carries its size in a header of max_align_t size. */
#define QF_CLI_HDR sizeof(max_align_t)
static atomic_size_t qf_cli_mem_used;
static size_t qf_cli_mem_cap;

static void *qf_cli_capped_alloc(void *ud, void *ptr, size_t n)
{
    (void)ud;
    unsigned char *base = ptr ? (unsigned char *)ptr - QF_CLI_HDR : NULL;
    size_t old = 0;
    if (base) memcpy(&old, base, sizeof old);
    if (n == 0) {
        atomic_fetch_sub(&qf_cli_mem_used, old);
        free(base);
        return NULL;
    }
    if (n > qf_cli_mem_cap) return NULL;
    if (n > old) {
        size_t grow = n - old, used = atomic_fetch_add(&qf_cli_mem_used, grow);
        if (used + grow > qf_cli_mem_cap) {
            atomic_fetch_sub(&qf_cli_mem_used, grow);
            return NULL;
        }
    }
    unsigned char *b = realloc(base, n + QF_CLI_HDR);
    if (!b) {
        if (n > old) atomic_fetch_sub(&qf_cli_mem_used, n - old);
        return NULL;
    }
    if (n < old) atomic_fetch_sub(&qf_cli_mem_used, old - n);
    memcpy(b, &n, sizeof n);
    return b + QF_CLI_HDR;
}

/* "123", "64K", "512M", "2G" (powers of 1024); 0 when malformed. */
static size_t qf_cli_parse_size(const char *v)
{
    char *end = NULL;
    unsigned long long x = strtoull(v, &end, 10);
    if (end == v || v[0] == '-') return 0;
    int shift = 0;
    if (*end == 'k' || *end == 'K')
        shift = 10, end++;
    else if (*end == 'm' || *end == 'M')
        shift = 20, end++;
    else if (*end == 'g' || *end == 'G')
        shift = 30, end++;
    if (*end || x == 0 || x > (SIZE_MAX >> shift) >> 1) return 0;
    return (size_t)x << shift;
}

static int qf_cli_memory_cap(void)
{
    const char *v = getenv("QFOLD_MAX_MEMORY");
    if (!v || !*v) return QF_EXIT_OK;
    qf_cli_mem_cap = qf_cli_parse_size(v);
    if (!qf_cli_mem_cap)
        return qf_cli_error(QF_EXIT_USAGE,
                            "QFOLD_MAX_MEMORY='%s': expected a size such as 65536, 512M or 2G", v);
    qf_set_allocator(qf_cli_capped_alloc, NULL);
    return QF_EXIT_OK;
}

/* --- --engine / --threads ------------------------------------------------------ */

/* Removes "--engine E" / "--engine=E" and "--threads N" / "--threads=N" from
 * argv (anywhere before "--": they belong to every command) and applies
 * them. Returns an exit code (QF_EXIT_OK to go on). */
static int qf_cli_globals(int *argc, char **argv)
{
    const char *engine = NULL, *threads = NULL;
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            while (i < *argc) argv[out++] = argv[i++];
            break;
        }
        const char **slot = NULL;
        const char *name = NULL;
        size_t len = 0;
        if (strncmp(a, "--engine", 8) == 0 && (a[8] == 0 || a[8] == '=')) slot = &engine, name = "--engine", len = 8;
        if (strncmp(a, "--threads", 9) == 0 && (a[9] == 0 || a[9] == '='))
            slot = &threads, name = "--threads", len = 9;
        if (!slot) {
            argv[out++] = argv[i];
            continue;
        }
        if (a[len] == '=')
            *slot = a + len + 1;
        else if (i + 1 < *argc && strncmp(argv[i + 1], "--", 2) != 0)
            *slot = argv[++i];
        else
            return qf_cli_usage_error(NULL, "option %s needs a value", name);
    }
    *argc = out;
    argv[out] = NULL;
    if (threads) {
        char *end = NULL;
        long n = strtol(threads, &end, 10);
        if (!*threads || *end || n < 0 || n > 16)
            return qf_cli_value_error(NULL, "--threads '%s': expected a number from 0 (the cores) to 16", threads);
        qf_status st = qf_set_threads((int)n);
        if (st != QF_OK) return qf_cli_fail(st);
    }
    /* libgomp's environment as qfold measured it best, before oneDNN loads
     * (--engine below, or the first plan): the library recommends it and
     * sets nothing; a value the user set is kept. */
    qf_engine_env env[QF_ENGINE_ENV_MAX];
    for (int k = 0, m = qf_engine_environment(env); k < m; k++) setenv(env[k].name, env[k].value, 0);
    if (engine) {
        qf_engine e;
        if (strcmp(engine, "auto") == 0)
            e = QF_ENGINE_AUTO;
        else if (strcmp(engine, "ref") == 0)
            e = QF_ENGINE_REF;
        else if (strcmp(engine, "dnnl") == 0)
            e = QF_ENGINE_DNNL;
        else
            return qf_cli_value_error(NULL, "--engine '%s': expected auto, ref or dnnl", engine);
        qf_status st = qf_set_engine(e);
        if (st != QF_OK) return qf_cli_fail(st);
    }
    return QF_EXIT_OK;
}

/* `qfold --version`: the version, then the kernels this run would use. */
static void qf_cli_version(void)
{
    printf("qfold %s\n", QF_VERSION);
    qf_engine e = qf_get_engine();
    int t = qf_get_threads();
    printf("kernels: %s (%s), %d thread%s\n", qf_engine_name(e), qf_engine_about(), t, t == 1 ? "" : "s");
}

/* `qfold CMD ... --help` anywhere before "--" asks for the command's help. */
static bool qf_cli_wants_help(int argc, char **argv)
{
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) return false;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return true;
    }
    return false;
}

/* glibc gives each thread that calls malloc its own arena, reserving 64 MB
 * (128 MB for a moment) of address space for it: under `ulimit -v` that
 * alone can exhaust the limit when oneDNN's threads start. qfold's threads
 * allocate little, so one arena serves them all (MALLOC_ARENA_MAX, when
 * set, is glibc's and wins). */
static void qf_cli_malloc_arenas(void)
{
#if defined(__GLIBC__) && defined(M_ARENA_MAX)
    if (!getenv("MALLOC_ARENA_MAX")) mallopt(M_ARENA_MAX, 1);
#endif
}

/* Whether the command runs training steps: train, qat, and quantize with
 * AdaRound (--set weight-rounding=adaround, or --max-drop, whose trials may
 * add it): per layer a thousand small forward and backward passes with
 * qfold's own elementwise kernels between oneDNN's, the mix the training
 * spin count is for. With the inference spin, two threads on a loaded 2-core
 * machine took 42-51 s for the bundled CNN's AdaRound where one thread took
 * 5.5 s and the training spin 6-7 s (bench/recover.md). */
static bool qf_cli_trains(int argc, char **argv)
{
    if (strcmp(argv[1], "train") == 0 || strcmp(argv[1], "qat") == 0) return true;
    if (strcmp(argv[1], "quantize") != 0) return false;
    static const char ada[] = "weight-rounding=adaround";
    for (int i = 2; i < argc; i++) {
        size_t n = strlen(argv[i]), k = sizeof ada - 1;
        if ((n >= k && strcmp(argv[i] + n - k, ada) == 0) || strcmp(argv[i], "--max-drop") == 0 ||
            strncmp(argv[i], "--max-drop=", 11) == 0)
            return true;
    }
    return false;
}

int main(int argc, char **argv)
{
    qf_cli_malloc_arenas();
    if (argc < 2) {
        qf_cli_print_overview(stderr);
        return QF_EXIT_USAGE;
    }
    int rc = qf_cli_memory_cap();
    if (rc != QF_EXIT_OK) return rc;
    qf_cli_signals();
    /* Before --engine can load oneDNN: its threads' spin count for training. */
    if (qf_cli_trains(argc, argv)) qf_engine_prefer_training();
    rc = qf_cli_globals(&argc, argv);
    if (rc == QF_EXIT_OK) rc = qf_cli_extdata_strip(argc > 1 ? qf_cli_find(argv[1]) : NULL, &argc, argv);
    if (rc != QF_EXIT_OK) return rc;
    if (argc < 2) {
        qf_cli_print_overview(stderr);
        return QF_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--version") == 0) {
        qf_cli_version();
        rc = QF_EXIT_OK;
    } else if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
        qf_cli_print_overview(stdout);
        rc = QF_EXIT_OK;
    } else if (name[0] == '-') {
        return qf_cli_usage_error(NULL, "unknown option '%s'", name);
    } else {
        const qf_cli_command *cmd = qf_cli_find(name);
        if (!cmd) return qf_cli_usage_error(NULL, "unknown command '%s'", name);
        if (qf_cli_wants_help(argc, argv)) {
            qf_cli_print_help(cmd, stdout);
            rc = QF_EXIT_OK;
        } else {
            rc = cmd->fn(argc - 1, argv + 1);
        }
    }
    /* A full disk or a closed pipe on stdout must not pass for success. */
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "qfold: cannot write to standard output\n");
        if (rc == QF_EXIT_OK) rc = QF_EXIT_FAIL;
    }
    return rc;
}
