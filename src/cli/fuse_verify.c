/* fuse --verify: the inputs both models run on, and the comparison.
 *
 * Inputs come from --verify-data (per input: NAME=X.npy, or X.npy for a
 * model with one input) or are generated. A generated input's unknown dims
 * are sized from the model's constraints: a dim that shares its symbolic
 * name with a dim of a given array takes that array's size; the leading dim
 * (the batch) is 1; the others take one size S, the smallest of 1, 2, 4,
 * ..., 256 at which the model's shape inference and planning pass (a
 * pooling or convolution window needs S >= its size; the graph is planned,
 * not run, at each try). When no S works, or the model holds an op qfold
 * cannot run, the model cannot be verified: QF_ERR_MISMATCH (exit 1) with
 * a message that says what --verify-data would need. */
#include <string.h>

#include "cli.h"
#include "fuse_verify.h"
#include "io/onnx_problems.h"
#include "qfold/exec.h"
#include "qfold/io.h"

#define QF_VERIFY_MAX_SIZE 256

/* Bind ts into a copy of g as the comparison will (int64 inputs become
 * constants, the others fix the shapes) and plan it. */
static qf_status qf_verify_try(const qf_graph *g, qf_tensor *ts)
{
    qf_graph *c = NULL;
    QF_TRY(qf_graph_clone(g, &c));
    qf_status st = QF_OK;
    int n = c->ninputs;
    for (int i = 0; st == QF_OK && i < n; i++)
        if (ts[i].dtype != QF_DTYPE_I64) st = qf_graph_set_input_shape(c, i, ts[i].ndim, ts[i].dims);
    for (int i = n - 1; st == QF_OK && i >= 0; i--) {
        if (ts[i].dtype != QF_DTYPE_I64) continue;
        qf_tensor t;
        st = qf_tensor_copy(&t, &ts[i]);
        if (st == QF_OK) st = qf_graph_bind_input(c, i, &t);
        qf_tensor_free(&t);
    }
    qf_plan *p = NULL;
    if (st == QF_OK) st = qf_plan_init(&p, c);
    qf_plan_free(p);
    qf_graph_free(c);
    return st;
}

/* Sizes given to symbolic dim names so far: dims that share a name get the
 * same size (the given arrays' first, then the first generated one). */
typedef struct qf_verify_tie {
    const char *name;
    int64_t size;
} qf_verify_tie;

static int64_t qf_verify_tie_get(const qf_verify_tie *t, int n, const char *name)
{
    for (int k = 0; k < n; k++)
        if (strcmp(t[k].name, name) == 0) return t[k].size;
    return -1;
}

/* Inputs at size S in ts (the given ones copied, the others generated). */
static qf_status qf_verify_make(const qf_graph *g, const qf_tensor *given, int64_t s, qf_tensor *ts)
{
    qf_verify_tie *tie = qf_calloc((size_t)g->ninputs * QF_MAX_DIMS + 1, sizeof *tie);
    if (!tie) return QF_ERR_NOMEM;
    int nt = 0;
    for (int pass = 0; pass < 2; pass++) {
        /* Pass 0: the names of the given arrays' dims; pass 1: the others. */
        for (int i = 0; i < g->ninputs; i++) {
            const qf_value *v = g->inputs[i];
            if (!given[i].data != (pass == 1)) continue;
            for (int d = 0; d < v->type.ndim; d++) {
                const char *nm = qf_onnx_dim_name(g, v->name, v->type.ndim, d);
                if (!nm || qf_verify_tie_get(tie, nt, nm) >= 0) continue;
                int64_t size = given[i].data ? given[i].dims[d] : v->type.dims[d] >= 0 ? v->type.dims[d]
                               : d == 0                        ? 1
                                                               : s;
                tie[nt++] = (qf_verify_tie){nm, size};
            }
        }
    }
    qf_graph *c = NULL;
    qf_status st = qf_graph_clone(g, &c);
    for (int i = 0; st == QF_OK && i < g->ninputs; i++) {
        const qf_value *v = g->inputs[i];
        int64_t dims[QF_MAX_DIMS];
        for (int d = 0; d < v->type.ndim; d++) {
            dims[d] = given[i].data ? given[i].dims[d] : v->type.dims[d];
            if (dims[d] >= 0) continue;
            const char *nm = qf_onnx_dim_name(g, v->name, v->type.ndim, d);
            int64_t tied = nm ? qf_verify_tie_get(tie, nt, nm) : -1;
            dims[d] = tied >= 0 ? tied : d == 0 ? 1 : s;
        }
        st = qf_graph_set_input_shape(c, i, v->type.ndim, dims);
    }
    qf_free(tie);
    if (st == QF_OK) st = qf_compare_make_inputs(c, 0, 0, ts);
    qf_graph_free(c);
    for (int i = 0; st == QF_OK && i < g->ninputs; i++) {
        if (!given[i].data) continue;
        qf_tensor_free(&ts[i]);
        st = qf_tensor_copy(&ts[i], &given[i]);
    }
    return st;
}

static bool qf_verify_has_unknown(const qf_graph *g, const qf_tensor *given)
{
    for (int i = 0; i < g->ninputs; i++)
        for (int d = 0; !given[i].data && d < g->inputs[i]->type.ndim; d++)
            if (g->inputs[i]->type.dims[d] < 0) return true;
    return false;
}

/* The inputs for g: given (from --verify-data, .data NULL where not given)
 * and generated at the first size that plans. */
static qf_status qf_verify_inputs(const qf_graph *g, const qf_tensor *given, qf_tensor *ts)
{
    int n = g->ninputs;
    bool search = qf_verify_has_unknown(g, given);
    char last[512] = "";
    for (int64_t s = 1; s <= QF_VERIFY_MAX_SIZE; s *= 2) {
        qf_status st = qf_verify_make(g, given, s, ts);
        if (st == QF_OK) st = qf_verify_try(g, ts);
        if (st == QF_OK) return QF_OK;
        for (int i = 0; i < n; i++) qf_tensor_free(&ts[i]);
        if (st == QF_ERR_NOMEM || st == QF_ERR_INTERRUPTED) return st;
        if (!last[0] || s == 1) snprintf(last, sizeof last, "%s", qf_error_message());
        if (!search) break;
    }
    /* Which inputs the user could give. */
    char names[256] = "";
    size_t len = 0;
    for (int i = 0; i < n && len < sizeof names - 1; i++) {
        if (given[i].data) continue;
        int w = snprintf(names + len, sizeof names - len, "%s%s", len ? ", " : "", g->inputs[i]->name);
        if (w > 0) len += (size_t)w;
    }
    if (len >= sizeof names) len = sizeof names - 1;
    return qf_error(QF_ERR_MISMATCH,
                    "cannot verify: the original model does not run on generated inputs%s (%s); give "
                    "them with --verify-data%s",
                    search ? " at any size tried (unknown dims 1 to 256)" : "", last,
                    n == 1 ? " X.npy" : " NAME=X.npy for each input");
}

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
    qf_tensor *ts = qf_calloc((size_t)n + 1, sizeof *ts);
    const qf_tensor **tp = qf_calloc((size_t)n + 1, sizeof *tp);
    if (st == QF_OK && (!given || !ts || !tp)) st = QF_ERR_NOMEM;
    if (st == QF_OK) st = qf_verify_load_given(g0, vd, nvd, given);
    if (st == QF_OK) st = qf_verify_inputs(g0, given, ts);
    if (st == QF_OK) {
        for (int i = 0; i < n; i++) tp[i] = &ts[i];
        qf_compare_options opt = {.tolerance = tol, .ref_name = "original", .cand_name = "fused",
                                  .change = "fusing"};
        st = qf_compare_graphs(g0, g1, tp, n, &opt, res);
    }
    for (int i = 0; i < n; i++) {
        if (given) qf_tensor_free(&given[i]);
        if (ts) qf_tensor_free(&ts[i]);
    }
    qf_free(given);
    qf_free(ts);
    qf_free(tp);
    qf_graph_free(g0);
    qf_graph_free(g1);
    return st;
}
