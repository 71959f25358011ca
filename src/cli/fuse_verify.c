/* fuse --verify: the --verify-data arrays (NAME=X.npy, or X.npy for a model
 * with one input) and the models loaded; the input synthesis and the
 * comparison are the library's (qf_verify_graphs, src/io/model_verify.c). */
#include <string.h>

#include "cli.h"
#include "fuse_verify.h"
#include "qfold/exec.h"
#include "qfold/io.h"

/* Load the --verify-data arrays into given[] (graph input order). */
static qf_status qf_verify_load_given(const qf_graph *g, const qf_verify_data *vd, int nvd,
                                      qf_tensor *given)
{
    for (int k = 0; k < nvd; k++) {
        int i = -1;
        if (!vd[k].name[0]) {
            if (g->ninputs != 1)
                return qf_error(QF_ERR_INVALID,
                                "--verify-data '%s': the model has %d inputs; give each as "
                                "--verify-data NAME=X.npy",
                                vd[k].path, g->ninputs);
            i = 0;
        } else {
            for (int j = 0; j < g->ninputs; j++)
                if (strcmp(g->inputs[j]->name, vd[k].name) == 0) i = j;
            if (i < 0)
                return qf_error(QF_ERR_INVALID, "--verify-data %s=%s: the model has no input '%s'",
                                vd[k].name, vd[k].path, vd[k].name);
        }
        if (given[i].data)
            return qf_error(QF_ERR_INVALID, "--verify-data: input '%s' is given twice",
                            g->inputs[i]->name);
        QF_TRY(qf_npy_load(vd[k].path, &given[i]));
        const qf_value *v = g->inputs[i];
        bool fits = given[i].dtype == v->type.dtype && given[i].ndim == v->type.ndim;
        for (int d = 0; fits && d < v->type.ndim; d++)
            fits = v->type.dims[d] < 0 || v->type.dims[d] == given[i].dims[d];
        if (!fits) {
            char a[128], b[128];
            return qf_error(QF_ERR_INVALID, "--verify-data '%s': input '%s' wants %s %s, got %s %s",
                            vd[k].path, v->name, qf_dtype_name(v->type.dtype),
                            qf_shape_str(v->type.ndim, v->type.dims, a, sizeof a),
                            qf_dtype_name(given[i].dtype),
                            qf_shape_str(given[i].ndim, given[i].dims, b, sizeof b));
        }
    }
    return QF_OK;
}

/* QF_ERR_MISMATCH naming the first node of g qfold cannot run, if any. */
static qf_status qf_verify_runnable(const qf_graph *g)
{
    qf_graph_for_each_node(g, n)
    {
        if (n->op != QF_OP_OPAQUE) continue;
        const char *domain = qf_node_attr_string(n, "domain", "");
        return qf_error(QF_ERR_MISMATCH,
                        "cannot verify: node '%s' is op '%s' (domain '%s'), which qfold cannot run; "
                        "fuse without --verify writes the model unverified",
                        n->name, qf_node_attr_string(n, "op_type", "?"), *domain ? domain : "ai.onnx");
    }
    return QF_OK;
}

qf_status qf_fuse_verify_run(const char *in, const char *written, const qf_verify_data *vd, int nvd,
                             double tol, qf_compare_result *res)
{
    qf_graph *g0 = NULL, *g1 = NULL;
    memset(res, 0, sizeof *res);
    res->worst = -1;
    qf_status st = qf_onnx_load(in, &g0);
    if (st == QF_OK) st = qf_cli_load_staged(written, &g1);
    if (st == QF_OK) st = qf_verify_runnable(g0);
    int n = g0 ? g0->ninputs : 0;
    qf_tensor *given = qf_calloc((size_t)n + 1, sizeof *given);
    if (st == QF_OK && !given) st = QF_ERR_NOMEM;
    if (st == QF_OK) st = qf_verify_load_given(g0, vd, nvd, given);
    if (st == QF_OK) {
        qf_verify_options opt = {.tolerance = tol, .ref_name = "original", .cand_name = "fused", .change = "fusing",
                                 .hint = n == 1 ? "--verify-data X.npy" : "--verify-data NAME=X.npy for each input"};
        st = qf_verify_graphs(g0, g1, given, &opt, res);
    }
    for (int i = 0; given && i < n; i++) qf_tensor_free(&given[i]);
    qf_free(given);
    qf_graph_free(g0);
    qf_graph_free(g1);
    return st;
}
