/* qfold's side of bench/qat: a QAT training step, timed.
 *
 *   qat_bench MODEL.onnx X.npy Y.npy THREADS WARMUP [PROFILE [ENGINE]]
 *
 * Loads a float model with BatchNorm, prepares it for QAT through the library
 * (the pass `canonicalize`, qf_quant_annotate_qat + qf_quant_qat_insert for
 * PROFILE (default neutron): fake_quant nodes on activations and weights,
 * then the pass `qat_bn_add`: the simulated Conv/Linear + BN fusion), then
 * trains it one epoch over X / Y in file order with qf_train (batch 64, SGD
 * lr 0.01, momentum 0.9, cross-entropy), observers on and BN in training mode
 * throughout. Prints one JSON line: the mean step time after WARMUP steps
 * (forward, backward, optimizer and reading the batch, from the on_step
 * hook's clock), the step count and the fake_quants made. PROFILE `none`
 * skips the QAT preparation (canonicalize only): the plain training step of
 * the same model, harness and build, for what QAT adds to a step.
 *
 * Not a test and not part of the library: a timing harness that links the
 * library like any user would (built by CMake with -DQF_BUILD_BENCH=ON, or by
 * bench/qat with cc + pkg-config).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qfold/exec.h"
#include "qfold/graph.h"
#include "qfold/io.h"
#include "qfold/pass.h"
#include "qfold/quant.h"
#include "qfold/train.h"

typedef struct clock_log {
    double *t;
    int64_t n, cap;
} clock_log;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static qf_status on_step(void *ud, qf_train_step_info *info)
{
    (void)info;
    clock_log *c = ud;
    if (c->n < c->cap) c->t[c->n++] = now_s();
    return QF_OK;
}

static int fail(const char *what)
{
    fprintf(stderr, "qat_bench: %s: %s\n", what, qf_error_message());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 6 || argc > 8) {
        fprintf(stderr, "usage: qat_bench MODEL.onnx X.npy Y.npy THREADS WARMUP [PROFILE [ENGINE]]\n");
        return 2;
    }
    const int warmup = atoi(argv[5]);
    const char *pname = argc > 6 ? argv[6] : "neutron";
    const bool plain = !strcmp(pname, "none");
    const qf_quant_profile *prof = plain ? NULL : qf_quant_profile_find(pname);
    if ((!prof && !plain) || warmup < 1) {
        fprintf(stderr, "qat_bench: unknown profile '%s' or warm-up < 1\n", pname);
        return 2;
    }
    qf_engine_prefer_training(); /* before qf_set_engine loads oneDNN */
    qf_status st = qf_set_threads(atoi(argv[4]));
    /* libgomp's environment as the CLI sets it, before oneDNN loads (the
     * library sets none: qfold/exec.h, qf_engine_environment). */
    qf_engine_env env[QF_ENGINE_ENV_MAX];
    for (int k = 0, m = qf_engine_environment(env); k < m; k++) setenv(env[k].name, env[k].value, 0);
    if (st == QF_OK && argc > 7)
        st = qf_set_engine(!strcmp(argv[7], "ref") ? QF_ENGINE_REF
                           : !strcmp(argv[7], "dnnl") ? QF_ENGINE_DNNL
                                                     : QF_ENGINE_AUTO);
    if (st != QF_OK) return fail("options");

    int rc = 1, made = 0;
    qf_graph *g = NULL;
    qf_npy_file *xf = NULL;
    qf_npy_source *src = NULL;
    qf_tensor y = {0};
    qf_quant_annotation *a = NULL;
    clock_log clk = {0};
    if (qf_onnx_load(argv[1], &g) != QF_OK) {
        rc = fail(argv[1]);
        goto done;
    }
    const char *canon[] = {"canonicalize", NULL}, *add[] = {"qat_bn_add", NULL};
    qf_pass_report *rep = NULL;
    st = qf_passes_run(g, canon, NULL, &rep);
    qf_pass_report_free(rep);
    rep = NULL;
    if (st == QF_OK) st = qf_graph_infer_shapes(g);
    if (st == QF_OK && !plain) st = qf_quant_annotate_qat(g, prof, &a);
    if (st == QF_OK && !plain) st = qf_quant_qat_insert(g, a, prof, &made);
    if (st == QF_OK && !plain) st = qf_passes_run(g, add, NULL, &rep);
    qf_pass_report_free(rep);
    if (st != QF_OK) {
        rc = fail("qat prepare");
        goto done;
    }
    st = qf_npy_open(argv[2], &xf);
    if (st == QF_OK) st = qf_npy_source_init(&src, &xf, 1);
    if (st == QF_OK) st = qf_npy_load(argv[3], &y);
    if (st != QF_OK) {
        rc = fail("data");
        goto done;
    }
    qf_train_config c = qf_train_defaults();
    c.epochs = 1;
    c.batch = 64;
    c.optim.kind = QF_OPTIM_SGD;
    c.optim.lr = 0.01;
    c.optim.momentum = 0.9;
    c.shuffle = false;
    clk.cap = y.dims[0] / c.batch + 2;
    clk.t = calloc((size_t)clk.cap, sizeof(double));
    if (!clk.t) goto done;
    c.on_step = on_step;
    c.ud = &clk;
    qf_train_result res;
    if (qf_train(g, qf_npy_source_get(src), &y, NULL, NULL, &c, &res) != QF_OK) {
        rc = fail("train");
        goto done;
    }
    if (clk.n <= warmup) {
        fprintf(stderr, "qat_bench: %lld steps, not more than the warm-up %d\n", (long long)clk.n, warmup);
        goto done;
    }
    printf("{\"step\": %.6f, \"steps\": %lld, \"fake_quants\": %d, \"loss\": %.6f}\n",
           (clk.t[clk.n - 1] - clk.t[warmup - 1]) / (double)(clk.n - warmup), (long long)clk.n, made,
           res.final_loss);
    rc = 0;
done:
    free(clk.t);
    qf_quant_annotation_free(a);
    qf_npy_source_free(src);
    qf_npy_close(xf);
    qf_tensor_free(&y);
    qf_graph_free(g);
    return rc;
}
