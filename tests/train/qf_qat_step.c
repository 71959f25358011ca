/* qf_qat_step: training steps of a whole model through the training plan
 * (qf_grad_plan), for the tests that compare QAT's simulated BatchNorm fusion
 * with PyTorch's fused QAT modules (tests/train/qat_fusion_torch.py).
 *
 *   qf_qat_step MODEL.onnx OUTDIR [--pass NAME ...] [--frozen] [--eval]
 *               -i X0.npy -t T0.npy [-i X1.npy -t T1.npy ...]
 *
 * After import the passes named by --pass run in order; the pseudo pass
 * `@fq_weights` is the QAT quantizer (qf_quant_annotate_qat +
 * qf_quant_qat_insert, profile neutron) restricted to the weights: a weight
 * fake_quant per quantized weight and nothing on the activations, as
 * torch's ConvBn2d / LinearBn1d hold a weight fake-quant only; `@fq_all` is
 * the whole QAT quantizer (activations too: a shared-qparams group's members
 * on one set of buffers, as FX calls one FakeQuantize module for them all).
 * Graph input
 * 0 then becomes a parameter (so that its gradient is computed like the
 * weights'), and the loss sum((y - t)^2) over output 0 is appended
 * (mse_loss, reduction sum). One step per -i / -t pair: the input's data is
 * written into the parameter, a forward in training mode (or inference with
 * --eval, then no backward) and a backward; no parameter is updated.
 * --frozen sets qfold_frozen = 1 on every BatchNormalization and qat_bn_*
 * node (QAT's --freeze-bn). Written to OUTDIR per step k: out_<k>.npy,
 * grad_<k>_<name>.npy per parameter (graph input 0 under its own name), and
 * buf_<k>_<name>.npy per buffer after the step (running statistics, the
 * fake-quant's scale / zero point / range). Exit 0, or 1 with the
 * library's message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qfold/exec.h"
#include "qfold/io.h"
#include "qfold/pass.h"
#include "qfold/quant.h"

#define MAXT 16

static int fail(const char *what)
{
    fprintf(stderr, "qf_qat_step: %s: %s\n", what, qf_error_message());
    return 1;
}

/* The QAT quantizer's fake_quants (profile neutron): the weights' alone, or
 * all of them (activations too, shared groups on one set of buffers). */
static qf_status fq_insert(qf_graph *g, bool weights_only)
{
    const qf_quant_profile *p = qf_quant_profile_find("neutron");
    qf_quant_annotation *a = NULL;
    QF_TRY(qf_quant_annotate_qat(g, p, &a));
    for (int id = 0; weights_only && id < a->nvalues; id++)
        if (a->spec[id].kind != QF_QSPEC_WEIGHT) a->spec[id].kind = QF_QSPEC_FLOAT;
    qf_status st = qf_quant_qat_insert(g, a, p, NULL);
    qf_quant_annotation_free(a);
    return st;
}

static qf_status own_payload(qf_value *v)
{
    if (v->type.owns || v->type.writable) return QF_OK;
    qf_tensor copy;
    QF_TRY(qf_tensor_copy(&copy, &v->type));
    qf_value_set_data(v, &copy);
    return QF_OK;
}

static int save(const char *dir, const char *what, int k, const char *name, const qf_tensor *t)
{
    char path[4096];
    if (name)
        snprintf(path, sizeof path, "%s/%s_%d_%s.npy", dir, what, k, name);
    else
        snprintf(path, sizeof path, "%s/%s_%d.npy", dir, what, k);
    return qf_npy_save(path, t) == QF_OK ? 0 : fail(path);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: qf_qat_step MODEL.onnx OUTDIR [--pass NAME ...] [--frozen] [--eval] "
                        "-i X.npy -t T.npy ...\n");
        return 2;
    }
    const char *model = argv[1], *outdir = argv[2];
    const char *passes[MAXT] = {0};
    qf_tensor xs[MAXT] = {0}, ts[MAXT] = {0};
    int npass = 0, nx = 0, nt = 0;
    bool frozen = false, eval = false;
    for (int a = 3; a < argc; a++) {
        if (!strcmp(argv[a], "--frozen")) frozen = true;
        else if (!strcmp(argv[a], "--eval")) eval = true;
        else if (!strcmp(argv[a], "--pass") && a + 1 < argc && npass < MAXT) passes[npass++] = argv[++a];
        else if (!strcmp(argv[a], "-i") && a + 1 < argc && nx < MAXT) {
            if (qf_npy_load(argv[++a], &xs[nx++]) != QF_OK) return fail(argv[a]);
        } else if (!strcmp(argv[a], "-t") && a + 1 < argc && nt < MAXT) {
            if (qf_npy_load(argv[++a], &ts[nt++]) != QF_OK) return fail(argv[a]);
        } else {
            fprintf(stderr, "qf_qat_step: bad argument '%s'\n", argv[a]);
            return 2;
        }
    }
    if (nx < 1 || nx != nt) {
        fprintf(stderr, "qf_qat_step: %d inputs and %d targets (one pair per step)\n", nx, nt);
        return 2;
    }
    qf_graph *g = NULL;
    if (qf_onnx_load(model, &g) != QF_OK) return fail(model);
    if (g->ninputs != 1 || g->noutputs < 1) {
        fprintf(stderr, "qf_qat_step: %s: %d inputs, %d outputs (want 1 input)\n", model, g->ninputs, g->noutputs);
        return 1;
    }
    if (qf_graph_set_input_shape(g, 0, xs[0].ndim, xs[0].dims) != QF_OK || qf_graph_infer_shapes(g) != QF_OK)
        return fail("input shape");
    for (int i = 0; i < npass; i++) {
        if (!strcmp(passes[i], "@fq_weights") || !strcmp(passes[i], "@fq_all")) {
            if (fq_insert(g, !strcmp(passes[i], "@fq_weights")) != QF_OK) return fail(passes[i]);
            continue;
        }
        const char *one[2] = {passes[i], NULL};
        qf_pass_report *rep = NULL;
        qf_status pst = qf_passes_run(g, one, &(qf_pass_options){.verify = true}, &rep);
        qf_pass_report_free(rep);
        if (pst != QF_OK) return fail(passes[i]);
    }
    qf_graph_for_each_node(g, n)
    {
        const bool bn = n->op == QF_OP_BATCH_NORM || !strncmp(qf_op_name(n->op), "qat_bn_", 7);
        if (frozen && bn && qf_node_set_attr_int(g, n, "qfold_frozen", 1) != QF_OK) return fail("frozen");
    }
    /* Graph input 0 becomes a parameter holding step 0's data. */
    qf_value *x = g->inputs[0];
    qf_tensor x0;
    if (qf_tensor_copy(&x0, &xs[0]) != QF_OK || qf_graph_bind_input(g, 0, &x0) != QF_OK) return fail("input");
    x->kind = QF_VALUE_PARAMETER;
    qf_value *t = qf_graph_add_input(g, "qf_target", QF_DTYPE_F32, ts[0].ndim, ts[0].dims);
    qf_value *lin[2] = {g->outputs[0], t};
    qf_node *loss = t ? qf_graph_add_node(g, QF_OP_MSE_LOSS, "qf_loss", 2, lin, 1) : NULL;
    if (!loss || qf_node_set_attr_string(g, loss, "reduction", "sum") != QF_OK) return fail("loss");
    if (qf_graph_infer_shapes(g) != QF_OK) return fail("shapes");
    const qf_value *params[256];
    qf_value *bufs[256];
    int np = 0, nb = 0;
    for (int i = 0; i < g->nvalues; i++) {
        qf_value *v = g->values[i];
        if (!v || !v->type.data || !v->nuses) continue;
        if (v->kind != QF_VALUE_PARAMETER && v->kind != QF_VALUE_BUFFER) continue;
        if (own_payload(v) != QF_OK) return fail(v->name);
        if (v->kind == QF_VALUE_PARAMETER && np < 256) params[np++] = v;
        else if (v->kind == QF_VALUE_BUFFER && nb < 256) bufs[nb++] = v;
    }
    qf_grad_plan *gp = NULL;
    qf_grad_options o = {.loss = loss->outputs[0], .nparams = np, .params = params};
    if (qf_grad_plan_init(&gp, g, &o) != QF_OK) return fail("plan");
    int rc = 0;
    for (int k = 0; k < nx && !rc; k++) {
        if (qf_tensor_nbytes(&xs[k]) != qf_tensor_nbytes(&x->type)) {
            fprintf(stderr, "qf_qat_step: step %d: input shape differs from step 0's\n", k);
            rc = 2;
            break;
        }
        memcpy(x->type.data, xs[k].data, qf_tensor_nbytes(&xs[k]));
        const qf_tensor *in[1] = {&ts[k]};
        if (qf_grad_plan_forward(gp, in, 1, !eval) != QF_OK) {
            rc = fail("forward");
            break;
        }
        rc = save(outdir, "out", k, NULL, qf_grad_plan_output(gp, 0));
        if (!eval && !rc && qf_grad_plan_backward(gp) != QF_OK) rc = fail("backward");
        for (int i = 0; i < np && !eval && !rc; i++)
            rc = save(outdir, "grad", k, params[i]->name, qf_grad_plan_grad(gp, i));
        for (int i = 0; i < nb && !rc; i++) rc = save(outdir, "buf", k, bufs[i]->name, &bufs[i]->type);
    }
    qf_grad_plan_free(gp);
    qf_graph_free(g);
    for (int i = 0; i < MAXT; i++) {
        qf_tensor_free(&xs[i]);
        qf_tensor_free(&ts[i]);
    }
    return rc;
}
