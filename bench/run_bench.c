/* qfold's side of bench/run: load a model once, plan once, then time
 * qf_plan_run as often as the driver asks.
 *
 *   run_bench MODEL.onnx IN.npy [THREADS [ENGINE [int8 | int8-onnx]]]
 *
 * THREADS (0 = the cores) and ENGINE (auto, ref, dnnl) as qfold's --threads
 * and --engine. With int8 (bench/int8), a QDQ model runs on qfold's integer
 * executor as `qfold run` runs it: its DQ -> Conv/Gemm -> [act] -> Q groups
 * lowered to integer convs (qf_quant_lower_int8; TFLite's fixed-point
 * requantization, or ONNX's with int8-onnx).
 *
 * Not a test and not part of the library: a timing harness that links the
 * library like any user would (built by CMake with -DQF_BUILD_BENCH=ON, or by
 * bench/run with cc + pkg-config). It speaks a line protocol on stdin/stdout
 * so that the driver can interleave it with the other engines without paying
 * process start-up and model load on every timing:
 *
 *   start-up   prints {"load_ms":..,"plan_ms":..,"arena_bytes":..,"naive_bytes":..,
 *              "omp_spin":..,"loadavg":..} (the OpenMP spin qfold chose, "-"
 *              without oneDNN, and the load average when the process started)
 *   "run K"    runs K times; prints the K wall times in ms on one line
 *   "stat K"   runs K times; prints one line per run: wall ms, the process's
 *              CPU ms (all threads), minor page faults, voluntary and
 *              involuntary context switches (getrusage: all threads) -- to
 *              tell a slow run that qfold made (CPU time, faults) from one
 *              the host made (preempted: wall time without CPU time)
 *   "save P"   writes output 0 of the last run to P (.npy), prints "ok"
 *   "plan"     prints the plan (as `qfold inspect --plan`: kernels, layouts,
 *              fusions, reorders) to stderr, then "ok"
 *   "quit"     (or end of input) frees everything and exits
 */
#define _DEFAULT_SOURCE /* getloadavg */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "qfold/exec.h"
#include "qfold/graph.h"
#include "qfold/io.h"
#include "qfold/quant.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int fail(const char *what, qf_status st)
{
    fprintf(stderr, "run_bench: %s: %s\n", what, st != QF_OK ? qf_error_message() : "bad request");
    return 1;
}

static int serve(qf_plan *plan, const qf_tensor *x)
{
    char line[4096];
    const qf_tensor *feed[] = {x};
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (!strncmp(line, "run ", 4)) {
            long k = strtol(line + 4, NULL, 10);
            for (long i = 0; i < k; i++) {
                double t0 = now_ms();
                qf_status st = qf_plan_run(plan, feed, 1);
                double t1 = now_ms();
                if (st != QF_OK) return fail("run", st);
                printf(i ? " %.4f" : "%.4f", t1 - t0);
            }
            printf("\n");
        } else if (!strncmp(line, "stat ", 5)) {
            long k = strtol(line + 5, NULL, 10);
            for (long i = 0; i < k; i++) {
                struct rusage r0, r1;
                getrusage(RUSAGE_SELF, &r0);
                double c0 = cpu_ms(), t0 = now_ms();
                qf_status st = qf_plan_run(plan, feed, 1);
                double t1 = now_ms(), c1 = cpu_ms();
                getrusage(RUSAGE_SELF, &r1);
                if (st != QF_OK) return fail("run", st);
                printf("%.3f %.3f %ld %ld %ld\n", t1 - t0, c1 - c0, r1.ru_minflt - r0.ru_minflt,
                       r1.ru_nvcsw - r0.ru_nvcsw, r1.ru_nivcsw - r0.ru_nivcsw);
            }
        } else if (!strncmp(line, "save ", 5)) {
            qf_status st = qf_npy_save(line + 5, qf_plan_output(plan, 0));
            if (st != QF_OK) return fail("save", st);
            printf("ok\n");
        } else if (!strcmp(line, "plan")) {
            qf_plan_print(plan, stderr);
            printf("ok\n");
        } else if (!strcmp(line, "quit")) {
            break;
        } else {
            return fail(line, QF_OK);
        }
        fflush(stdout);
    }
    return 0;
}

int main(int argc, char **argv)
{
    bool int8 = argc == 6 && (!strcmp(argv[5], "int8") || !strcmp(argv[5], "int8-onnx"));
    if (argc < 3 || argc > 6 || (argc == 6 && !int8)) {
        fprintf(stderr, "usage: run_bench MODEL.onnx IN.npy [THREADS [ENGINE [int8 | int8-onnx]]]\n");
        return 2;
    }
    qf_status set = argc > 3 ? qf_set_threads(atoi(argv[3])) : QF_OK;
    /* libgomp's environment as the CLI sets it, before oneDNN loads (the
     * library sets none: qfold/exec.h, qf_engine_environment). */
    qf_engine_env env[QF_ENGINE_ENV_MAX];
    for (int k = 0, m = qf_engine_environment(env); k < m; k++) setenv(env[k].name, env[k].value, 0);
    if (set == QF_OK && argc > 4)
        set = qf_set_engine(strcmp(argv[4], "ref") == 0 ? QF_ENGINE_REF
                            : strcmp(argv[4], "dnnl") == 0 ? QF_ENGINE_DNNL
                                                          : QF_ENGINE_AUTO);
    if (set != QF_OK) return fail("options", set);
    qf_graph *g = NULL;
    qf_plan *plan = NULL;
    qf_tensor x = {0};
    int rc = 1;
    double t0 = now_ms();
    qf_status st = qf_onnx_load(argv[1], &g);
    if (st != QF_OK) {
        rc = fail(argv[1], st);
        goto done;
    }
    double t1 = now_ms();
    double load1 = -1;
    if (getloadavg(&load1, 1) != 1) load1 = -1;
    st = qf_npy_load(argv[2], &x);
    if (st == QF_OK && g->ninputs != 1) st = qf_error(QF_ERR_INVALID, "the model must have one input");
    /* A dynamic batch takes the input array's size. */
    if (st == QF_OK) st = qf_graph_set_input_shape(g, 0, x.ndim, x.dims);
    if (st == QF_OK && int8)
        st = qf_quant_lower_int8(g, NULL, strcmp(argv[5], "int8") ? QF_REQUANT_ONNX : QF_REQUANT_FIXED_POINT, NULL);
    if (st == QF_OK) st = qf_plan_init(&plan, g);
    if (st != QF_OK) {
        rc = fail("plan", st);
        goto done;
    }
    double t2 = now_ms();
    /* The OpenMP spin qfold chose when it loaded oneDNN (GOMP_SPINCOUNT, set
     * in this process; a short one when the machine was busy then, see
     * src/backend/dnnl/dnnl_lib.c), and the load average at that time: the spin stays for
     * the process's life, so a process started while the machine was busy
     * keeps the short spin (the batch-1 "slow mode" of bench/run.md?). */
    const char *spin = getenv("GOMP_SPINCOUNT");
    printf("{\"load_ms\": %.3f, \"plan_ms\": %.3f, \"arena_bytes\": %zu, \"naive_bytes\": %zu, "
           "\"omp_spin\": \"%s\", \"loadavg\": %.2f}\n",
           t1 - t0, t2 - t1, qf_plan_arena_bytes(plan), qf_plan_naive_bytes(plan), spin ? spin : "-", load1);
    fflush(stdout);
    rc = serve(plan, &x);
done:
    qf_plan_free(plan);
    qf_graph_free(g);
    qf_tensor_free(&x);
    return rc;
}
