/* Test tool for qat_convert_torch.py: a float model (Conv / Linear + BN, as
 * PyTorch exports it) prepared for QAT as `qfold qat` does (canonicalize,
 * qf_quant_annotate_qat + qf_quant_qat_insert with the neutron profile,
 * qat_bn_add), its fake_quant buffers then overwritten with a PyTorch QAT
 * model's state, and written three ways:
 *
 *   qat_state_tool FLOAT.onnx STATE_DIR OBSERVE X.npy OUT_QAT.onnx OUT_FINAL.onnx Y_INTERNAL.npy [WQMIN]
 *
 *   STATE_DIR/<buffer>.npy  float32 data for the graph's constant <buffer>
 *                           (e.g. x_fq_scale, 0.weight_fq_min: qat.c's names)
 *   OBSERVE                 the weight fake_quants' `observe` (0 / 1)
 *   WQMIN                   the weight fake_quants' quant_min (default the
 *                           profile's -127; -128: PyTorch's default qint8)
 *   OUT_QAT.onnx            the qat_export pass's output (PyTorch's form)
 *   OUT_FINAL.onnx          the qat_finalize pipeline's output (int8 QDQ)
 *   Y_INTERNAL.npy          qfold's inference of the internal QAT graph on X
 *
 * Exit 1 with a message on any error (a state file naming no constant, a
 * size that differs, a pass that fails). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qfold/exec.h"
#include "qfold/io.h"
#include "qfold/pass.h"
#include "qfold/quant.h"

static int fail(const char *what)
{
    fprintf(stderr, "qat_state_tool: %s: %s\n", what, qf_error_message());
    return 1;
}

/* Load, prepare, overwrite the buffers from dir, set observe. */
static qf_status prepare(const char *model, const char *dir, int observe, int wqmin, qf_graph **out, int *loaded)
{
    qf_graph *g = NULL;
    QF_TRY(qf_onnx_load(model, &g));
    qf_pass_report *r = NULL;
    const char *canon[] = {"canonicalize", NULL};
    qf_status st = qf_passes_run(g, canon, &(qf_pass_options){.verify = true}, &r);
    qf_pass_report_free(r);
    const qf_quant_profile *p = qf_quant_profile_find("neutron");
    qf_quant_annotation *a = NULL;
    if (st == QF_OK) st = qf_quant_annotate_qat(g, p, &a);
    if (st == QF_OK) st = qf_quant_qat_insert(g, a, p, NULL);
    qf_quant_annotation_free(a);
    const char *add[] = {"qat_bn_add", NULL};
    if (st == QF_OK) st = qf_passes_run(g, add, &(qf_pass_options){.verify = true}, &r);
    qf_pass_report_free(r);
    DIR *d = st == QF_OK ? opendir(dir) : NULL;
    if (st == QF_OK && !d) st = qf_error(QF_ERR_IO, "cannot open %s", dir);
    *loaded = 0;
    for (struct dirent *e = d ? readdir(d) : NULL; e && st == QF_OK; e = readdir(d)) {
        size_t n = strlen(e->d_name);
        if (n < 5 || strcmp(e->d_name + n - 4, ".npy") != 0) continue;
        char name[512], path[1024];
        snprintf(name, sizeof name, "%.*s", (int)(n - 4), e->d_name);
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        qf_value *v = qf_graph_find_value(g, name);
        if (!v || !qf_value_is_const(v) || v->type.dtype != QF_DTYPE_F32) {
            st = qf_error(QF_ERR_INVALID, "%s names no float32 constant of the prepared graph", e->d_name);
            break;
        }
        qf_tensor t;
        st = qf_npy_load(path, &t);
        if (st == QF_OK && (t.dtype != QF_DTYPE_F32 || qf_tensor_numel(&t) != qf_tensor_numel(&v->type)))
            st = qf_error(QF_ERR_SHAPE, "%s: %lld values, '%s' holds %lld", e->d_name, (long long)qf_tensor_numel(&t),
                          name, (long long)qf_tensor_numel(&v->type));
        if (st == QF_OK) {
            memcpy(v->type.data, t.data, qf_tensor_nbytes(&t));
            (*loaded)++;
        }
        qf_tensor_free(&t);
    }
    if (d) closedir(d);
    qf_graph_for_each_node(g, n) {
        if (st != QF_OK) break;
        if (n->op != QF_OP_FAKE_QUANT) continue;
        const qf_node *src = n->inputs[0]->producer;
        if (qf_value_is_const(n->inputs[0]) || (src && src->op == QF_OP_QAT_BN_WEIGHT)) {
            st = qf_node_set_attr_int(g, n, "observe", observe);
            if (st == QF_OK) st = qf_node_set_attr_int(g, n, "quant_min", wqmin);
        }
    }
    if (st != QF_OK) {
        qf_graph_free(g);
        return st;
    }
    *out = g;
    return QF_OK;
}

int main(int argc, char **argv)
{
    if (argc != 8 && argc != 9) {
        fprintf(stderr, "usage: qat_state_tool FLOAT.onnx STATE_DIR OBSERVE X.npy OUT_QAT.onnx OUT_FINAL.onnx "
                        "Y_INTERNAL.npy\n");
        return 2;
    }
    if (qf_quant_register_passes() != QF_OK) return fail("register");
    const int observe = argv[3][0] == '1', wqmin = argc > 8 ? atoi(argv[8]) : -127;
    qf_graph *g = NULL;
    int loaded = 0;
    if (prepare(argv[1], argv[2], observe, wqmin, &g, &loaded) != QF_OK) return fail("prepare");
    /* The internal graph's inference. */
    qf_tensor x;
    if (qf_npy_load(argv[4], &x) != QF_OK) return fail(argv[4]);
    qf_plan *p = NULL;
    const qf_tensor *in[] = {&x};
    if (qf_plan_init(&p, g) != QF_OK || qf_plan_run(p, in, 1) != QF_OK) return fail("inference");
    if (qf_npy_save(argv[7], qf_plan_output(p, 0)) != QF_OK) return fail(argv[7]);
    qf_plan_free(p);
    qf_pass_report *r = NULL;
    const char *exp[] = {"qat_export", "dce", NULL};
    if (qf_passes_run(g, exp, &(qf_pass_options){.verify = true}, &r) != QF_OK) return fail("qat_export");
    qf_pass_report_free(r);
    if (qf_onnx_save(g, argv[5]) != QF_OK) return fail(argv[5]);
    qf_graph_free(g);
    /* Again from the same state, to the int8 QDQ model. */
    if (prepare(argv[1], argv[2], observe, wqmin, &g, &loaded) != QF_OK) return fail("prepare");
    if (qf_pipeline_run(g, "qat_finalize", &(qf_pass_options){.verify = true}, &r) != QF_OK)
        return fail("qat_finalize");
    qf_pass_report_print(r, stdout);
    qf_pass_report_free(r);
    if (qf_onnx_save(g, argv[6]) != QF_OK) return fail(argv[6]);
    qf_graph_free(g);
    qf_tensor_free(&x);
    printf("%d state tensors loaded\n", loaded);
    return 0;
}
