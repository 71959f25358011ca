/* qf_mse_grad: mse_loss forward and backward from files, for
 * grad_torch_loss.py (mse_loss is internal: no ONNX model can hold it, so
 * qf_node_grad cannot run it).
 *
 *   qf_mse_grad OUTDIR mean|sum PRED.npy TARGET.npy DLOSS.npy
 *
 * Writes OUTDIR/out_0.npy (the loss), din_0.npy, din_1.npy. Exit 0, or 1 with
 * the library's message. */
#include <stdio.h>

#include "qfold/exec.h"
#include "qfold/io.h"
#include "tools/qf_node_run.h"

static int fail(const char *what)
{
    fprintf(stderr, "qf_mse_grad: %s: %s\n", what, qf_error_message());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: qf_mse_grad OUTDIR mean|sum PRED.npy TARGET.npy DLOSS.npy\n");
        return 2;
    }
    qf_tensor p = {0}, t = {0}, dl = {0}, dp = {0}, dt = {0};
    if (qf_npy_load(argv[3], &p) != QF_OK) return fail(argv[3]);
    if (qf_npy_load(argv[4], &t) != QF_OK) return fail(argv[4]);
    if (qf_npy_load(argv[5], &dl) != QF_OK) return fail(argv[5]);
    const qf_tensor *in[] = {&p, &t};
    qf_node_runner r;
    if (qf_node_runner_init(&r, QF_OP_MSE_LOSS, "mse", 2, in, 1, 13) != QF_OK) return fail("init");
    if (qf_node_set_attr_string(r.g, r.n, "reduction", argv[2]) != QF_OK) return fail("attr");
    if (qf_node_runner_run(&r) != QF_OK) return fail("forward");
    if (qf_tensor_init(&dp, QF_DTYPE_F32, p.ndim, p.dims) != QF_OK) return fail("din");
    if (qf_tensor_init(&dt, QF_DTYPE_F32, t.ndim, t.dims) != QF_OK) return fail("din");
    qf_tensor *out[] = {&r.out[0]}, *din[] = {&dp, &dt};
    const qf_tensor *dout[] = {&dl};
    if (qf_node_eval_grad(r.n, 13, in, out, dout, din, true, 0) != QF_OK) return fail("backward");
    char path[4096];
    const qf_tensor *res[] = {&r.out[0], &dp, &dt};
    const char *names[] = {"out_0", "din_0", "din_1"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s.npy", argv[1], names[i]);
        if (qf_npy_save(path, res[i]) != QF_OK) return fail(path);
    }
    qf_node_runner_free(&r);
    qf_tensor_free(&p);
    qf_tensor_free(&t);
    qf_tensor_free(&dl);
    qf_tensor_free(&dp);
    qf_tensor_free(&dt);
    return 0;
}
