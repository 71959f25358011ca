/* qf_node_grad: one node's forward and backward from files, for the tests
 * that compare the backward kernels with PyTorch's autograd
 * (tests/tools/grad_util.py drives it).
 *
 *   qf_node_grad MODEL.onnx OUTDIR [--training] [--seed S] [--pass NAME ...]
 *                -i X0.npy [-i X1.npy ...] [--dout D0.npy | --dout - ...]
 *   qf_node_grad op:NAME OUTDIR [--int A=V] [--float A=V] ... (the same options)
 *
 * MODEL holds one node after import and the passes named by --pass (e.g.
 * canonicalize: Gemm with a constant B becomes qfold's linear, Clip(0, 6)
 * relu6); its inputs: graph inputs, fed in order by -i, and initializers.
 * op:NAME builds a node of qfold's op NAME (an internal op has no ONNX form)
 * over one graph input per -i, with the attributes given by --int / --float,
 * at opset 13. The node runs forward (in training mode with
 * --training) and backward with one --dout per node output ("-": no
 * gradient on that output). Written to OUTDIR: out_<j>.npy per output,
 * din_<i>.npy per float input slot i (graph input or initializer), and
 * after_<i>.npy per input slot (its data after the run: BatchNormalization
 * updates its running statistics in place in training mode). Exit 0, or 1
 * with the library's message. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qfold/exec.h"
#include "qfold/io.h"
#include "qfold/pass.h"

#define MAXT 16

static int fail(const char *what)
{
    fprintf(stderr, "qf_node_grad: %s: %s\n", what, qf_error_message());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: qf_node_grad MODEL.onnx OUTDIR [--training] [--seed S] [--pass NAME] -i X.npy ... --dout D.npy|- ...\n");
        return 2;
    }
    const char *model = argv[1], *outdir = argv[2];
    bool training = false;
    uint64_t seed = 0;
    qf_tensor feeds[MAXT] = {0}, douts[MAXT] = {0};
    const char *iattr[MAXT], *fattr[MAXT];
    int niattr = 0, nfattr = 0;
    bool dout_set[MAXT] = {0};
    int nfeed = 0, ndout = 0, npass = 0;
    const char *passes[MAXT + 1] = {0};
    for (int a = 3; a < argc; a++) {
        if (!strcmp(argv[a], "--training")) training = true;
        else if (!strcmp(argv[a], "--seed") && a + 1 < argc) seed = strtoull(argv[++a], NULL, 10);
        else if (!strcmp(argv[a], "--int") && a + 1 < argc && niattr < MAXT) iattr[niattr++] = argv[++a];
        else if (!strcmp(argv[a], "--float") && a + 1 < argc && nfattr < MAXT) fattr[nfattr++] = argv[++a];
        else if (!strcmp(argv[a], "--pass") && a + 1 < argc && npass < MAXT) passes[npass++] = argv[++a];
        else if (!strcmp(argv[a], "-i") && a + 1 < argc && nfeed < MAXT) {
            if (qf_npy_load(argv[++a], &feeds[nfeed++]) != QF_OK) return fail(argv[a]);
        } else if (!strcmp(argv[a], "--dout") && a + 1 < argc && ndout < MAXT) {
            const char *p = argv[++a];
            if (strcmp(p, "-") != 0) {
                if (qf_npy_load(p, &douts[ndout]) != QF_OK) return fail(p);
                dout_set[ndout] = true;
            }
            ndout++;
        } else {
            fprintf(stderr, "qf_node_grad: bad argument '%s'\n", argv[a]);
            return 2;
        }
    }
    qf_graph *g = NULL;
    if (!strncmp(model, "op:", 3)) {
        qf_op op = qf_op_from_name(model + 3);
        qf_value *vals[MAXT];
        if (op == QF_OP_COUNT || qf_graph_init(&g) != QF_OK) return fail(model);
        g->opset = 13;
        for (int i = 0; i < nfeed; i++) {
            char name[16];
            snprintf(name, sizeof name, "x%d", i);
            if (!(vals[i] = qf_graph_add_input(g, name, feeds[i].dtype, feeds[i].ndim, feeds[i].dims)))
                return fail("input");
        }
        qf_node *nd = qf_graph_add_node(g, op, "n0", nfeed, vals, ndout > 0 ? ndout : 1);
        if (!nd) return fail("node");
        for (int k = 0; k < niattr + nfattr; k++) {
            const char *kv = k < niattr ? iattr[k] : fattr[k - niattr];
            const char *eq = strchr(kv, '=');
            char key[64];
            if (!eq || eq - kv >= (long)sizeof key) return fail(kv);
            memcpy(key, kv, (size_t)(eq - kv));
            key[eq - kv] = 0;
            qf_status st = k < niattr ? qf_node_set_attr_int(g, nd, key, strtoll(eq + 1, NULL, 10))
                                      : qf_node_set_attr_float(g, nd, key, strtof(eq + 1, NULL));
            if (st != QF_OK) return fail(kv);
        }
        for (int j = 0; j < nd->noutputs; j++)
            if (qf_graph_add_output(g, nd->outputs[j]) != QF_OK) return fail("output");
    } else if (qf_onnx_load(model, &g) != QF_OK)
        return fail(model);
    if (npass) {
        qf_pass_report *rep = NULL;
        qf_status pst = qf_passes_run(g, passes, &(qf_pass_options){.verify = true}, &rep);
        qf_pass_report_free(rep);
        if (pst != QF_OK) return fail("passes");
    }
    if (g->nnodes != 1 || g->ninputs != nfeed) {
        fprintf(stderr, "qf_node_grad: %s: %d nodes and %d inputs after import (want 1 node, %d inputs)\n", model,
                g->nnodes, g->ninputs, nfeed);
        return 1;
    }
    for (int i = 0; i < nfeed; i++)
        if (qf_graph_set_input_shape(g, i, feeds[i].ndim, feeds[i].dims) != QF_OK) return fail("input shape");
    if (qf_graph_infer_shapes(g) != QF_OK) return fail("shapes");
    const qf_node *n = g->first;
    if (n->noutputs > MAXT || n->ninputs > MAXT || ndout != n->noutputs) {
        fprintf(stderr, "qf_node_grad: node '%s' has %d outputs, %d --dout given\n", n->name, n->noutputs, ndout);
        return 2;
    }
    const qf_tensor *in[MAXT] = {0};
    qf_tensor outs[MAXT] = {0}, dins[MAXT] = {0};
    qf_tensor *out[MAXT] = {0}, *din[MAXT] = {0};
    const qf_tensor *dout[MAXT] = {0};
    for (int i = 0; i < n->ninputs; i++) {
        const qf_value *v = n->inputs[i];
        if (!v) continue;
        in[i] = &v->type;
        for (int k = 0; k < g->ninputs; k++)
            if (g->inputs[k] == v) in[i] = &feeds[k];
        if (qf_dtype_is_float(v->type.dtype)) {
            if (qf_tensor_init(&dins[i], QF_DTYPE_F32, v->type.ndim, v->type.dims) != QF_OK) return fail("din");
            memset(dins[i].data, 0x7f, qf_tensor_nbytes(&dins[i])); /* poison: unwritten shows */
            din[i] = &dins[i];
        }
    }
    for (int j = 0; j < n->noutputs; j++) {
        const qf_tensor *t = &n->outputs[j]->type;
        if (qf_tensor_init(&outs[j], t->dtype, t->ndim, t->dims) != QF_OK) return fail("out");
        out[j] = &outs[j];
        dout[j] = dout_set[j] ? &douts[j] : NULL;
    }
    if (qf_node_eval_grad(n, g->opset, in, out, dout, din, training, seed) != QF_OK) return fail(n->name);
    char path[4096];
    for (int j = 0; j < n->noutputs; j++) {
        snprintf(path, sizeof path, "%s/out_%d.npy", outdir, j);
        if (qf_npy_save(path, &outs[j]) != QF_OK) return fail(path);
    }
    for (int i = 0; i < n->ninputs; i++) {
        if (din[i]) {
            snprintf(path, sizeof path, "%s/din_%d.npy", outdir, i);
            if (qf_npy_save(path, din[i]) != QF_OK) return fail(path);
        }
        if (in[i] && in[i]->data) {
            snprintf(path, sizeof path, "%s/after_%d.npy", outdir, i);
            if (qf_npy_save(path, in[i]) != QF_OK) return fail(path);
        }
    }
    for (int i = 0; i < MAXT; i++) {
        qf_tensor_free(&feeds[i]);
        qf_tensor_free(&douts[i]);
        qf_tensor_free(&outs[i]);
        qf_tensor_free(&dins[i]);
    }
    qf_graph_free(g);
    return 0;
}
