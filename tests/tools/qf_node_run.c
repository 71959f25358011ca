/* One-node runner of the C tests (see qf_node_run.h). */
#include "tools/qf_node_run.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "qfold/exec.h"
#include "qfold/schema.h"

/* The one place the tests reach a kernel: the library's one-node entry
 * (prepare, scratch, float forward). */
qf_status qf_node_run_kernel(const qf_node *n, int64_t opset, const qf_tensor *const *in,
                             qf_tensor *const *out)
{
    return qf_node_eval(n, opset, in, out);
}

qf_status qf_node_runner_init(qf_node_runner *r, qf_op op, const char *name, int nin,
                              const qf_tensor *const *in, int nout, int64_t opset)
{
    memset(r, 0, sizeof *r);
    if (nin < 0 || nin > QF_NODE_RUN_MAX_IN || nout < 1 || nout > QF_NODE_RUN_MAX_OUT)
        return qf_error(QF_ERR_UNSUPPORTED, "node runner: %d inputs, %d outputs (at most %d, %d)",
                        nin, nout, QF_NODE_RUN_MAX_IN, QF_NODE_RUN_MAX_OUT);
    QF_TRY(qf_graph_init(&r->g));
    r->owns_graph = 1;
    r->g->opset = opset;
    qf_value *vals[QF_NODE_RUN_MAX_IN] = {0};
    int nfeed = 0;
    for (int i = 0; i < nin; i++) {
        if (!in[i]) continue;
        char vname[16];
        snprintf(vname, sizeof vname, "x%d", i);
        vals[i] = qf_graph_add_input(r->g, vname, in[i]->dtype, in[i]->ndim, in[i]->dims);
        if (!vals[i]) goto fail;
        r->feed[nfeed++] = in[i];
    }
    r->n = qf_graph_add_node(r->g, op, name, nin, vals, nout);
    if (!r->n) goto fail;
    for (int j = 0; j < nout; j++)
        if (qf_graph_add_output(r->g, r->n->outputs[j]) != QF_OK) goto fail;
    return QF_OK;
fail:
    /* The IR returns NULL only when an allocation failed (message recorded). */
    qf_node_runner_free(r);
    return qf_error_prefix(QF_ERR_NOMEM, "node runner: building the graph: ");
}

qf_status qf_node_runner_init_node(qf_node_runner *r, qf_graph *g, qf_node *n,
                                   const qf_tensor *const *feed)
{
    memset(r, 0, sizeof *r);
    if (g->ninputs > QF_NODE_RUN_MAX_IN || n->ninputs > QF_NODE_RUN_MAX_IN ||
        n->noutputs > QF_NODE_RUN_MAX_OUT)
        return qf_error(QF_ERR_UNSUPPORTED,
                        "node runner: node '%s' has %d inputs, %d outputs (at most %d, %d)",
                        n->name, n->ninputs, n->noutputs, QF_NODE_RUN_MAX_IN, QF_NODE_RUN_MAX_OUT);
    r->g = g;
    r->n = n;
    for (int k = 0; k < g->ninputs; k++) r->feed[k] = feed ? feed[k] : NULL;
    return QF_OK;
}

/* The tensor the kernel reads for input slot i of the node. */
static const qf_tensor *runner_input(const qf_node_runner *r, int i)
{
    const qf_value *v = r->n->inputs[i];
    if (!v) return NULL;
    if (v->kind != QF_VALUE_INPUT) return &v->type; /* constant: its payload */
    for (int k = 0; k < r->g->ninputs; k++)
        if (r->g->inputs[k] == v) return r->feed[k];
    return NULL;
}

qf_status qf_node_runner_run(qf_node_runner *r)
{
    qf_node *n = r->n;
    QF_TRY(qf_graph_infer_shapes(r->g));
    QF_TRY(qf_graph_verify(r->g));
    const qf_tensor *in[QF_NODE_RUN_MAX_IN] = {0};
    for (int i = 0; i < n->ninputs; i++) {
        in[i] = runner_input(r, i);
        if (n->inputs[i] && !in[i])
            return qf_error(QF_ERR_INVALID, "node runner: no data fed for input %d of node '%s'", i,
                            n->name);
    }
    qf_tensor *out[QF_NODE_RUN_MAX_OUT] = {0};
    for (int j = 0; j < n->noutputs; j++) {
        const qf_tensor *t = &n->outputs[j]->type;
        QF_TRY(qf_tensor_init(&r->out[j], t->dtype, t->ndim, t->dims));
        r->nout = j + 1;
        /* Poison: an element the kernel does not write shows up in the comparison. */
        size_t nb = qf_tensor_nbytes(&r->out[j]);
        if (nb) memset(r->out[j].data, QF_NODE_RUN_POISON, nb);
        out[j] = &r->out[j];
    }
    return qf_node_run_kernel(n, r->g->opset, in, out);
}

void qf_node_runner_free(qf_node_runner *r)
{
    for (int j = 0; j < r->nout; j++) qf_tensor_free(&r->out[j]);
    r->nout = 0;
    if (r->owns_graph) qf_graph_free(r->g);
    r->g = NULL;
    r->n = NULL;
    r->owns_graph = 0;
}

/* --- qf_node_gradcheck --------------------------------------------------------- */

typedef struct node_gc {
    const qf_node *n;
    int64_t opset;
    const qf_tensor *in[QF_NODE_RUN_MAX_IN];
    qf_tensor *out[QF_NODE_RUN_MAX_OUT];
    const qf_tensor *dy[QF_NODE_RUN_MAX_OUT];
    qf_tensor *x;  /* the slot being perturbed (its data is what qf_gradcheck perturbs) */
    bool training;
    uint64_t seed;
    bool failed;
} node_gc;

/* sum_j sum_k dy_j[k] * y_j[k] at the current inputs, in double. */
static double node_gc_loss(const float *x, void *user)
{
    node_gc *c = user;
    (void)x; /* c->x->data is x: perturbed in place */
    qf_tensor *none[QF_NODE_RUN_MAX_IN] = {0};
    const qf_tensor *nodout[QF_NODE_RUN_MAX_OUT] = {0};
    if (qf_node_eval_grad(c->n, c->opset, c->in, c->out, nodout, none, c->training, c->seed) != QF_OK) {
        c->failed = true;
        return NAN;
    }
    double s = 0.0;
    for (int j = 0; j < c->n->noutputs; j++) {
        if (!c->dy[j]) continue;
        const float *y = c->out[j]->data, *d = c->dy[j]->data;
        for (int64_t k = 0, m = qf_tensor_numel(c->out[j]); k < m; k++) s += (double)d[k] * y[k];
    }
    return s;
}

static float node_gc_rand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 11) / (double)(1ull << 52) - 1.0);
}

bool qf_node_gradcheck(qf_node_runner *r, uint32_t slots, bool training, uint64_t seed,
                       const qf_gradcheck_opts *opts, FILE *log)
{
    const qf_node *n = r->n;
    node_gc c = {.n = n, .opset = r->g->opset, .training = training, .seed = seed};
    qf_tensor xs[QF_NODE_RUN_MAX_IN] = {0}, ys[QF_NODE_RUN_MAX_OUT] = {0}, dys[QF_NODE_RUN_MAX_OUT] = {0};
    qf_tensor dxs[QF_NODE_RUN_MAX_IN] = {0};
    qf_tensor *dx[QF_NODE_RUN_MAX_IN] = {0};
    bool ok = true, any = false;
    uint64_t rs = seed * 2654435761u + 1;
    for (int i = 0; i < n->ninputs && ok; i++) {
        const qf_tensor *t = runner_input(r, i);
        if (!t) continue;
        ok = qf_tensor_init(&xs[i], t->dtype, t->ndim, t->dims) == QF_OK;
        if (ok) memcpy(xs[i].data, t->data, qf_tensor_nbytes(t));
        c.in[i] = &xs[i];
        if (ok && t->dtype == QF_DTYPE_F32 && (!slots || ((slots >> i) & 1u))) {
            ok = qf_tensor_init(&dxs[i], QF_DTYPE_F32, t->ndim, t->dims) == QF_OK;
            dx[i] = &dxs[i];
        }
    }
    for (int j = 0; j < n->noutputs && ok; j++) {
        const qf_tensor *t = &n->outputs[j]->type;
        ok = qf_tensor_init(&ys[j], t->dtype, t->ndim, t->dims) == QF_OK;
        c.out[j] = &ys[j];
        if (ok && t->dtype == QF_DTYPE_F32) {
            ok = qf_tensor_init(&dys[j], QF_DTYPE_F32, t->ndim, t->dims) == QF_OK;
            float *d = ok ? dys[j].data : NULL;
            for (int64_t k = 0, m = ok ? qf_tensor_numel(t) : 0; k < m; k++) d[k] = node_gc_rand(&rs);
            c.dy[j] = ok ? &dys[j] : NULL;
        }
    }
    if (!ok && log) fprintf(log, "gradcheck %s: out of memory\n", n->name);
    if (ok) {
        qf_status st = qf_node_eval_grad(n, c.opset, c.in, c.out, c.dy, dx, training, seed);
        if (st != QF_OK) {
            if (log) fprintf(log, "gradcheck %s: backward failed: %s\n", n->name, qf_error_message());
            ok = false;
        }
    }
    for (int i = 0; i < n->ninputs && ok; i++) {
        if (!dx[i]) continue;
        c.x = &xs[i];
        qf_gradcheck_result res;
        bool good = qf_gradcheck(node_gc_loss, &c, xs[i].data, qf_tensor_numel(&xs[i]), dxs[i].data, opts, &res);
        if (c.failed) {
            if (log) fprintf(log, "gradcheck %s: forward failed: %s\n", n->name, qf_error_message());
            good = false;
        }
        if (log) {
            char what[160];
            snprintf(what, sizeof what, "%s (%s) d/d input %d", n->name, qf_op_label(n), i);
            qf_gradcheck_print(log, what, &res);
        }
        any = any || res.checked > 0;
        ok = ok && good;
    }
    for (int i = 0; i < QF_NODE_RUN_MAX_IN; i++) {
        qf_tensor_free(&xs[i]);
        qf_tensor_free(&dxs[i]);
    }
    for (int j = 0; j < QF_NODE_RUN_MAX_OUT; j++) {
        qf_tensor_free(&ys[j]);
        qf_tensor_free(&dys[j]);
    }
    return ok && any;
}
