/* The backward tape: a training plan over a graph (qf_grad_plan in
 * qfold/exec.h).
 *
 * Time line of one training step over the n nodes in order:
 *
 *     t = 0 .. n-1     forward of node t (training mode)
 *     t = n            d loss / d loss = 1
 *     t = 2n - i       backward of node i (i = n-1 .. 0)
 *     t = 2n + 1       the caller reads the parameters' gradients
 *
 * Every buffer (a forward activation, a gradient, the temporary a second
 * contribution to a gradient is written to before it is added) lives over an
 * interval of that line and gets an offset in one arena by best fit, as the
 * inference plan lays out its activations: an activation lives to its last
 * forward reader or to the last backward that reads it (the op's bwd_in /
 * bwd_out), a gradient from the first backward that writes it to the
 * backward of the value's producer (a parameter's to the end).
 *
 * Which nodes run backward: those with an input that depends on a parameter
 * (requires grad, forward) and an output the loss depends on (reaches,
 * backward). A value's gradient exists where both hold.
 *
 * Layouts (grad_nhwc): with oneDNN's training convolutions, a chain such as
 * Conv -> BatchNormalization -> Relu -> Conv keeps its activations and their
 * gradients channels-last (NHWC), the layout oneDNN's convolutions run in, so
 * that they are not reordered from and back to NCHW on every call (those
 * reorders were ~40 % of oneDNN's time in a step). See grad_nhwc.
 */
#include <string.h>

#include "core/rand.h"
#include "core/parallel.h"
#include "backend/backend.h"
#include "exec_impl.h"

struct qf_grad_plan {
    qf_graph *g;
    int n;
    const qf_node **nodes;        /* plan order */
    int *in_base, *out_base;      /* per node: first slot in the pools */
    int nin_total, nout_total;
    void **state;                 /* per node: prepared state (NULL: none) */
    const qf_backend_kernels **be; /* per node: the backend's training kernels, NULL: the reference ones */
    void **be_state;              /* per node: the backend's state */
    void *be_raw;
    void **saved;                 /* per node: training forward -> backward */
    unsigned char *run_bwd;       /* per node */
    int *fuse;                    /* per node: the Relu run inside this BatchNormalization (grad_fuse), -1: none */
    int *host;                    /* per node: the node it runs inside, -1: its own step */
    void *block_raw;              /* the states, one allocation */
    void *saved_raw;              /* the saved areas, one allocation */
    void *scratch_raw, *scratch;
    size_t scratch_bytes;
    size_t *fwd_scratch, *bwd_scratch;
    int nvalues;
    uint32_t *in_nhwc, *out_nhwc; /* per node: qf_kernel_io's layout bits (grad_nhwc) */
    qf_tensor *vt;                /* per value id: the forward tensor */
    qf_tensor *gt;                /* per value id: its gradient (data NULL: none) */
    unsigned char *zero_grad;     /* per value id: no backward writes it, zeroed each backward */
    qf_tensor *acc;               /* per input slot: temporary of a summed contribution (data NULL: direct) */
    const qf_tensor **fin;        /* forward pools */
    qf_tensor **fout;
    qf_tensor *bview;             /* backward views: inputs, then outputs */
    const qf_tensor **bin;
    qf_tensor **bout;
    const qf_tensor **bdout;
    qf_tensor **bdin;
    void *arena_raw;
    size_t arena_bytes;
    const qf_value *loss;
    int nparams;
    const qf_value **params;
    uint64_t seed, step;
    bool ready;                   /* a training forward ran: backward may follow */
};

/* A buffer to place: live over [start, end] of the time line. */
typedef struct grad_buf {
    int start, end;
    size_t size;
    qf_tensor *t;
    int next; /* next buffer starting at the same time, -1: none */
} grad_buf;

static uint64_t grad_mix(uint64_t x) { return qf_mix64(x + QF_SPLITMIX_GAMMA); }

static void grad_plan_release(qf_grad_plan *p)
{
    for (int i = 0; p->be && i < p->n; i++)
        if (p->be[i]) p->be[i]->release(p->be_state[i]);
    qf_free(p->be);
    qf_free(p->be_state);
    qf_free(p->be_raw);
    qf_free(p->nodes);
    qf_free(p->in_base);
    qf_free(p->out_base);
    qf_free(p->state);
    qf_free(p->saved);
    qf_free(p->run_bwd);
    qf_free(p->fuse);
    qf_free(p->host);
    qf_free(p->block_raw);
    qf_free(p->saved_raw);
    qf_free(p->scratch_raw);
    qf_free(p->fwd_scratch);
    qf_free(p->bwd_scratch);
    qf_free(p->in_nhwc);
    qf_free(p->out_nhwc);
    qf_free(p->vt);
    qf_free(p->gt);
    qf_free(p->zero_grad);
    qf_free(p->acc);
    qf_free(p->fin);
    qf_free(p->fout);
    qf_free(p->bview);
    qf_free(p->bin);
    qf_free(p->bout);
    qf_free(p->bdout);
    qf_free(p->bdin);
    qf_free(p->arena_raw);
    qf_free(p->params);
}

void qf_grad_plan_free(qf_grad_plan *p)
{
    if (!p) return;
    grad_plan_release(p);
    qf_free(p);
}

static qf_status grad_check_options(const qf_graph *g, const qf_grad_options *o)
{
    const qf_value *l = o->loss;
    if (!l || !l->producer || l->id >= (uint32_t)g->nvalues || g->values[l->id] != l)
        return qf_error(QF_ERR_INVALID, "the loss must be a value computed by a node of the graph");
    if (l->type.dtype != QF_DTYPE_F32 || qf_tensor_numel(&l->type) != 1)
        return qf_error(QF_ERR_INVALID, "the loss '%s' must be one float32 element (did you forget to reduce it?)",
                        l->name);
    for (int i = 0; i < o->nparams; i++) {
        const qf_value *v = o->params[i];
        if (!v || v->producer || !v->type.data || v->type.dtype != QF_DTYPE_F32)
            return qf_error(QF_ERR_INVALID, "parameter %d ('%s') is not a float32 constant of the graph", i,
                            v ? v->name : "(null)");
    }
    return QF_OK;
}

/* Which nodes run backward and which values get a gradient; a node on the
 * way without a backward kernel is the error. */
static qf_status grad_mark(qf_grad_plan *p, unsigned char *rg, unsigned char *reach)
{
    for (int k = 0; k < p->nparams; k++) rg[p->params[k]->id] = 1;
    for (int i = 0; i < p->n; i++) {
        const qf_node *n = p->nodes[i];
        bool any = false;
        for (int s = 0; s < n->ninputs; s++) any = any || (n->inputs[s] && rg[n->inputs[s]->id]);
        /* only float values carry a gradient: a Shape of an activation
         * (PyTorch's Resize sizes on a dynamic batch) starts no path */
        if (any)
            for (int o = 0; o < n->noutputs; o++)
                if (n->outputs[o]->type.dtype == QF_DTYPE_F32) rg[n->outputs[o]->id] = 1;
    }
    reach[p->loss->id] = 1;
    for (int i = p->n - 1; i >= 0; i--) {
        const qf_node *n = p->nodes[i];
        bool out = false, in = false;
        for (int o = 0; o < n->noutputs; o++) out = out || reach[n->outputs[o]->id];
        for (int s = 0; s < n->ninputs; s++) in = in || (n->inputs[s] && rg[n->inputs[s]->id]);
        if (!out || !in) continue;
        if (!qf_op_kernels_get(n->op)->backward_f32) {
            const char *what = "a parameter";
            for (int s = 0; s < n->ninputs; s++)
                if (n->inputs[s] && rg[n->inputs[s]->id]) {
                    what = n->inputs[s]->name;
                    break;
                }
            return qf_error(QF_ERR_UNSUPPORTED,
                            "node '%s' (%s): no backward kernel: cannot train through it (it lies between '%s' "
                            "and the loss)",
                            n->name, qf_op_label(n), what);
        }
        p->run_bwd[i] = 1;
        for (int s = 0; s < n->ninputs; s++)
            if (n->inputs[s] && rg[n->inputs[s]->id]) reach[n->inputs[s]->id] = 1;
    }
    return QF_OK;
}

static qf_status grad_alloc_tables(qf_grad_plan *p)
{
    const qf_graph *g = p->g;
    p->n = g->nnodes;
    p->nvalues = g->nvalues;
    const size_t n = (size_t)(p->n ? p->n : 1), nv = (size_t)(p->nvalues ? p->nvalues : 1);
    p->nodes = qf_calloc(n, sizeof *p->nodes);
    p->in_base = qf_calloc(n, sizeof *p->in_base);
    p->out_base = qf_calloc(n, sizeof *p->out_base);
    p->state = qf_calloc(n, sizeof *p->state);
    p->be = qf_calloc(n, sizeof *p->be);
    p->be_state = qf_calloc(n, sizeof *p->be_state);
    p->saved = qf_calloc(n, sizeof *p->saved);
    p->run_bwd = qf_calloc(n, 1);
    p->fuse = qf_malloc(n * sizeof *p->fuse);
    p->host = qf_malloc(n * sizeof *p->host);
    p->fwd_scratch = qf_calloc(n, sizeof *p->fwd_scratch);
    p->bwd_scratch = qf_calloc(n, sizeof *p->bwd_scratch);
    p->in_nhwc = qf_calloc(n, sizeof *p->in_nhwc);
    p->out_nhwc = qf_calloc(n, sizeof *p->out_nhwc);
    p->vt = qf_calloc(nv, sizeof *p->vt);
    p->gt = qf_calloc(nv, sizeof *p->gt);
    p->zero_grad = qf_calloc(nv, 1);
    if (!p->nodes || !p->in_base || !p->out_base || !p->state || !p->be || !p->be_state || !p->saved || !p->run_bwd ||
        !p->fuse || !p->host || !p->fwd_scratch || !p->bwd_scratch || !p->in_nhwc || !p->out_nhwc || !p->vt || !p->gt ||
        !p->zero_grad)
        return QF_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) p->fuse[i] = p->host[i] = -1;
    int i = 0;
    qf_graph_for_each_node(g, nd)
    {
        p->nodes[i] = nd;
        p->in_base[i] = p->nin_total;
        p->out_base[i] = p->nout_total;
        p->nin_total += nd->ninputs;
        p->nout_total += nd->noutputs;
        i++;
    }
    const size_t ni = (size_t)(p->nin_total ? p->nin_total : 1), no = (size_t)(p->nout_total ? p->nout_total : 1);
    p->acc = qf_calloc(ni, sizeof *p->acc);
    p->fin = qf_calloc(ni, sizeof *p->fin);
    p->fout = qf_calloc(no, sizeof *p->fout);
    p->bview = qf_calloc(ni + no, sizeof *p->bview);
    p->bin = qf_calloc(ni, sizeof *p->bin);
    p->bout = qf_calloc(no, sizeof *p->bout);
    p->bdout = qf_calloc(no, sizeof *p->bdout);
    p->bdin = qf_calloc(ni, sizeof *p->bdin);
    if (!p->acc || !p->fin || !p->fout || !p->bview || !p->bin || !p->bout || !p->bdout || !p->bdin)
        return QF_ERR_NOMEM;
    for (int k = 0; k < p->nvalues; k++) {
        const qf_value *v = g->values[k];
        if (!v) continue;
        p->vt[k] = v->type;
        p->vt[k].owns = false;
        if (v->producer || v->kind == QF_VALUE_INPUT) p->vt[k].data = NULL;
    }
    return QF_OK;
}

/* --- layouts ------------------------------------------------------------------
 *
 * Which activations the tape keeps channels-last. Values (4-D float32
 * activations; a graph output stays NCHW) are joined into groups that must share one
 * layout: a node whose kernels compute the same in either layout joins its
 * data input and output (BatchNormalization outside ONNX's training mode and
 * qat_bn_output: their kernels take io->in_nhwc; an elementwise op of the NHWC column,
 * qf_op_kernels.layouts, whose other operands are one element or the same
 * shape; a per-tensor fake_quant). A training convolution on oneDNN takes X
 * and Y in either layout, each on its own. A group is NHWC when every node
 * that reads or writes one of its values is one of those, on those slots, and
 * a convolution reads or writes it (else nothing is gained); any other reader
 * (a pool, the loss, a Conv's weight slot, a reference kernel) keeps its group
 * NCHW. So the reorders happen only where a chain meets an NCHW-only node,
 * inside oneDNN's convolution kernel as before. */

static int grad_find(int *up, int v)
{
    while (up[v] != v) v = up[v] = up[up[v]];
    return v;
}

static bool grad_nhwc_value(const qf_grad_plan *p, const qf_value *v)
{
    (void)p;
    return v && v->producer && v->type.dtype == QF_DTYPE_F32 && v->type.ndim == 4 && !v->type.data;
}

/* The node joins its operands' layouts: its kernels compute the same on NCHW
 * or NHWC data (see above). */
static bool grad_nhwc_joins(const qf_grad_plan *p, const qf_node *n)
{
    if (n->noutputs != 1 || !grad_nhwc_value(p, n->outputs[0])) return false;
    const qf_tensor *y = &n->outputs[0]->type;
    if (n->op == QF_OP_BATCH_NORM) {
        const bool onnx_training = p->g->opset >= 14 && qf_node_attr_int(n, "training_mode", 0) != 0;
        return !onnx_training && grad_nhwc_value(p, n->inputs[0]);
    }
    if (n->op == QF_OP_QAT_BN_OUTPUT) return grad_nhwc_value(p, n->inputs[0]); /* honours io->in_nhwc */
    if (n->op == QF_OP_FAKE_QUANT) {
        if (!n->inputs[1] || qf_tensor_numel(&n->inputs[1]->type) != 1) return false;
        return grad_nhwc_value(p, n->inputs[0]);
    }
    if (n->op == QF_OP_DROPOUT || !(qf_op_kernels_get(n->op)->layouts & QF_LAYOUT_NHWC)) return false;
    for (int s = 0; s < n->ninputs; s++) {
        const qf_value *v = n->inputs[s];
        if (!v || qf_tensor_numel(&v->type) == 1) continue;
        if (!grad_nhwc_value(p, v) || memcmp(v->type.dims, y->dims, sizeof y->dims[0] * 4) != 0) return false;
    }
    return true;
}

/* What layout a slot of a node may have in the backward plan's NHWC
 * groups. */
typedef enum grad_slot_kind {
    GRAD_SLOT_KIND_NCHW = 0, /* NCHW only: its group stays NCHW */
    GRAD_SLOT_KIND_JOIN,     /* joins the group of the node's other joined slots */
    GRAD_SLOT_KIND_CONV,     /* a convolution's own X / Y: makes its group worth NHWC */
    GRAD_SLOT_KIND_EITHER,   /* read in either layout, but alone no reason for NHWC */
} grad_slot_kind;

/* Whether a slot of node i may be NHWC and which group it joins: JOIN for a
 * slot that joins, CONV for a convolution's own X / Y, EITHER for a slot
 * read in either layout that alone would not make a group worth it
 * (GlobalAveragePool's X: its kernels take io->in_nhwc; its [N, C, 1, 1]
 * output is the same bytes in both), NCHW for NCHW only. */
static grad_slot_kind grad_nhwc_slot(const qf_grad_plan *p, int i, bool joins, bool out, int s)
{
    const qf_node *n = p->nodes[i];
    if (joins) {
        if (out) return GRAD_SLOT_KIND_JOIN;
        if (n->op == QF_OP_BATCH_NORM || n->op == QF_OP_FAKE_QUANT || n->op == QF_OP_QAT_BN_OUTPUT)
            return s == 0 ? GRAD_SLOT_KIND_JOIN : GRAD_SLOT_KIND_NCHW;
        return GRAD_SLOT_KIND_JOIN;
    }
    if (p->be[i] && (n->op == QF_OP_CONV || n->op == QF_OP_CONV_TRANSPOSE) && s == 0)
        return GRAD_SLOT_KIND_CONV;
    if (n->op == QF_OP_GLOBAL_AVG_POOL && !out && s == 0) return GRAD_SLOT_KIND_EITHER;
    return GRAD_SLOT_KIND_NCHW;
}

/* Prepare the backend kernel of node i again with the layout bits. */
static qf_status grad_reprepare(qf_grad_plan *p, int i, uint32_t in_nhwc, uint32_t out_nhwc)
{
    const qf_node *nd = p->nodes[i];
    const qf_backend_kernels *b = p->be[i];
    b->release(p->be_state[i]);
    memset(p->be_state[i], 0, b->state_size);
    qf_kernel_io io = {.node = nd, .opset = p->g->opset, .nin = nd->ninputs, .nout = nd->noutputs,
                       .in = &p->fin[p->in_base[i]], .out = &p->fout[p->out_base[i]], .training = true,
                       .in_nhwc = in_nhwc, .out_nhwc = out_nhwc};
    qf_status st = b->prepare(&io, p->be_state[i]);
    if (st != QF_OK) {
        p->be[i] = NULL; /* released by its failed prepare */
        return st;
    }
    p->fwd_scratch[i] = p->bwd_scratch[i] = b->scratch ? b->scratch(nd, p->be_state[i]) : 0;
    return QF_OK;
}

static qf_status grad_nhwc(qf_grad_plan *p)
{
    const int nv = p->nvalues;
    bool any_conv = false;
    for (int i = 0; i < p->n; i++)
        any_conv = any_conv || (p->be[i] && (p->nodes[i]->op == QF_OP_CONV || p->nodes[i]->op == QF_OP_CONV_TRANSPOSE));
    if (!any_conv || nv == 0) return QF_OK;
    int *up = qf_malloc(sizeof *up * (size_t)nv);
    unsigned char *bad = qf_calloc((size_t)nv, 1), *conv = qf_calloc((size_t)nv, 1);
    unsigned char *joins = qf_calloc((size_t)(p->n ? p->n : 1), 1);
    qf_status st = QF_OK;
    if (!up || !bad || !conv || !joins) {
        st = QF_ERR_NOMEM;
        goto done;
    }
    for (int k = 0; k < nv; k++) up[k] = k;
    for (int k = 0; k < p->g->noutputs; k++) bad[p->g->outputs[k]->id] = 1; /* the caller reads them */
    /* Group the values, and mark the groups that something reads or writes in NCHW only. */
    for (int i = 0; i < p->n; i++) {
        const qf_node *n = p->nodes[i];
        joins[i] = grad_nhwc_joins(p, n);
        int root = -1;
        for (int io = 0; io < 2; io++) {
            const int cnt = io ? n->noutputs : n->ninputs;
            for (int s = 0; s < cnt; s++) {
                const qf_value *v = io ? n->outputs[s] : n->inputs[s];
                if (!grad_nhwc_value(p, v)) continue;
                int r = grad_find(up, (int)v->id);
                switch (grad_nhwc_slot(p, i, joins[i], io, s)) {
                case GRAD_SLOT_KIND_NCHW: bad[r] = 1; break;
                case GRAD_SLOT_KIND_CONV: conv[r] = 1; break;
                case GRAD_SLOT_KIND_EITHER: break;
                case GRAD_SLOT_KIND_JOIN:
                    if (root < 0) {
                        root = r;
                    } else if (r != root) {
                        up[r] = root;
                        bad[root] |= bad[r];
                        conv[root] |= conv[r];
                    }
                    break;
                }
            }
        }
    }
    for (int k = 0; k < nv; k++) {
        const int r = grad_find(up, k);
        bad[r] |= bad[k];
        conv[r] |= conv[k];
    }
    for (int i = 0; i < p->n; i++) {
        const qf_node *n = p->nodes[i];
        for (int s = 0; s < n->ninputs && s < 32; s++) {
            const qf_value *v = n->inputs[s];
            if (grad_nhwc_value(p, v) &&
                grad_nhwc_slot(p, i, joins[i], false, s) != GRAD_SLOT_KIND_NCHW) {
                const int r = grad_find(up, (int)v->id);
                if (!bad[r] && conv[r]) p->in_nhwc[i] |= 1u << s;
            }
        }
        for (int o = 0; o < n->noutputs && o < 32; o++) {
            const qf_value *v = n->outputs[o];
            if (grad_nhwc_value(p, v) &&
                grad_nhwc_slot(p, i, joins[i], true, o) != GRAD_SLOT_KIND_NCHW) {
                const int r = grad_find(up, (int)v->id);
                if (!bad[r] && conv[r]) p->out_nhwc[i] |= 1u << o;
            }
        }
    }
    /* The convolutions take their layouts at prepare. One that declines
     * them (it took NCHW) puts the whole plan back to NCHW. */
    bool failed = false;
    for (int i = 0; i < p->n && st == QF_OK; i++)
        if (p->be[i] && (p->in_nhwc[i] || p->out_nhwc[i])) {
            st = grad_reprepare(p, i, p->in_nhwc[i], p->out_nhwc[i]);
            if (st == QF_ERR_UNSUPPORTED) {
                qf_error_clear();
                failed = true;
                st = QF_OK;
                break;
            }
        }
    if (failed) {
        for (int i = 0; i < p->n && st == QF_OK; i++) {
            if (p->be[i] && (p->in_nhwc[i] || p->out_nhwc[i])) st = grad_reprepare(p, i, 0, 0);
            p->in_nhwc[i] = p->out_nhwc[i] = 0;
        }
    }
done:
    qf_free(up);
    qf_free(bad);
    qf_free(conv);
    qf_free(joins);
    return st;
}

/* --- fusion --------------------------------------------------------------------
 *
 * A Relu that is the only reader of a BatchNormalization's Y (Y no graph
 * output; BN outside ONNX's training mode, its one output) runs inside the
 * BatchNormalization's kernels (qf_kernel_io.nfused = 1, bn_relu in
 * src/ops/ref/norm.c): the forward writes the Relu's output, the backward takes
 * its gradient and masks it itself. Y and its gradient get no buffer; the
 * Relu's output lives from the BatchNormalization's forward, its gradient to
 * the BatchNormalization's backward. Same results bit for bit (the kernels'
 * tests compare with the nodes unfused: qf_grad_options.unfused). After
 * grad_prepare: the BatchNormalization was prepared with its own Y, of the
 * Relu's output's type. */
static qf_status grad_fuse(qf_grad_plan *p)
{
    for (int j = 0; j < p->n; j++) {
        const qf_node *r = p->nodes[j];
        if (r->op != QF_OP_RELU || r->ninputs != 1 || r->noutputs != 1) continue;
        const qf_value *y = r->inputs[0];
        const qf_node *b = y ? y->producer : NULL;
        if (!b || b->op != QF_OP_BATCH_NORM || b->noutputs != 1 || y->is_output || y->nuses != 1 ||
            y->type.dtype != QF_DTYPE_F32 || (p->g->opset >= 14 && qf_node_attr_int(b, "training_mode", 0) != 0))
            continue;
        int i = j - 1;
        while (i >= 0 && p->nodes[i] != b) i--;
        if (i < 0 || p->be[i] || p->run_bwd[i] != p->run_bwd[j]) continue;
        p->fuse[i] = j;
        p->host[j] = i;
        p->run_bwd[j] = 0;
        p->fout[p->out_base[i]] = &p->vt[r->outputs[0]->id];
    }
    return QF_OK;
}

/* Prepare every node (types only); size and allocate the states, the saved
 * areas and the scratch (the largest of any node's forward or backward). */
static qf_status grad_prepare(qf_grad_plan *p)
{
    size_t states = 0, saved_total = 0, be_states = 0;
    const bool backend = qf_backend_engine() == QF_BACKEND_DNNL;
    for (int i = 0; i < p->n; i++) {
        const qf_op_kernels *k = qf_op_kernels_get(p->nodes[i]->op);
        states += qf_exec_align(k->state_size);
        const qf_backend_kernels *b = backend ? qf_backend_train_kernels_get(p->nodes[i]->op) : NULL;
        if (b) be_states += qf_exec_align(b->state_size);
    }
    char *blk = NULL, *bblk = NULL;
    if (states && !(blk = qf_exec_alloc_aligned(states, &p->block_raw))) return QF_ERR_NOMEM;
    if (be_states && !(bblk = qf_exec_alloc_aligned(be_states, &p->be_raw))) return QF_ERR_NOMEM;
    for (int i = 0; i < p->n && bblk; i++) {
        const qf_backend_kernels *b = qf_backend_train_kernels_get(p->nodes[i]->op);
        if (!b) continue;
        p->be_state[i] = bblk;
        bblk += qf_exec_align(b->state_size);
    }
    size_t *saved_sz = qf_calloc((size_t)(p->n ? p->n : 1), sizeof *saved_sz);
    if (!saved_sz) return QF_ERR_NOMEM;
    qf_status st = QF_OK;
    for (int i = 0; i < p->n && st == QF_OK; i++) {
        const qf_node *nd = p->nodes[i];
        const qf_op_kernels *k = qf_op_kernels_get(nd->op);
        for (int s = 0; s < nd->ninputs; s++)
            p->fin[p->in_base[i] + s] = nd->inputs[s] ? &p->vt[nd->inputs[s]->id] : NULL;
        for (int o = 0; o < nd->noutputs; o++) p->fout[p->out_base[i] + o] = &p->vt[nd->outputs[o]->id];
        if (k->state_size) {
            p->state[i] = blk;
            blk += qf_exec_align(k->state_size);
        }
        qf_kernel_io io = {.node = nd, .opset = p->g->opset, .nin = nd->ninputs, .nout = nd->noutputs,
                           .in = &p->fin[p->in_base[i]], .out = &p->fout[p->out_base[i]]};
        st = qf_exec_prepare(&io, p->state[i]);
        if (st == QF_OK) st = qf_exec_scratch(nd, p->state[i], &p->fwd_scratch[i]);
        if (st != QF_OK) break;
        if (k->bwd_scratch && p->run_bwd[i]) p->bwd_scratch[i] = k->bwd_scratch(nd, p->state[i]);
        if (p->be_state[i]) {
            /* The backend's training kernels, when they take the node. */
            const qf_backend_kernels *b = qf_backend_train_kernels_get(nd->op);
            io.training = true;
            qf_status bst = b->prepare(&io, p->be_state[i]);
            if (bst == QF_OK) {
                p->be[i] = b;
                p->fwd_scratch[i] = p->bwd_scratch[i] = b->scratch ? b->scratch(nd, p->be_state[i]) : 0;
            } else if (bst != QF_ERR_UNSUPPORTED) {
                qf_exec_name_node(nd, bst);
                st = bst;
                break;
            }
        }
        size_t need = p->fwd_scratch[i] > p->bwd_scratch[i] ? p->fwd_scratch[i] : p->bwd_scratch[i];
        if (need > p->scratch_bytes) p->scratch_bytes = need;
        saved_sz[i] = k->saved_size ? qf_exec_align(k->saved_size(nd, p->state[i])) : 0;
        saved_total += saved_sz[i];
    }
    if (st == QF_OK) st = grad_nhwc(p);
    for (int i = 0; i < p->n && st == QF_OK; i++) {
        size_t need = p->fwd_scratch[i] > p->bwd_scratch[i] ? p->fwd_scratch[i] : p->bwd_scratch[i];
        if (need > p->scratch_bytes) p->scratch_bytes = need;
    }
    if (st == QF_OK && (saved_total > (uint64_t)QF_MAX_TENSOR_BYTES || p->scratch_bytes > (uint64_t)QF_MAX_TENSOR_BYTES))
        st = qf_error(QF_ERR_SHAPE, "the training plan's saved tensors or scratch need more than %lld bytes",
                      (long long)QF_MAX_TENSOR_BYTES);
    char *sv = NULL;
    if (st == QF_OK && saved_total && !(sv = qf_exec_alloc_aligned(saved_total, &p->saved_raw))) st = QF_ERR_NOMEM;
    for (int i = 0; i < p->n && st == QF_OK; i++)
        if (saved_sz[i]) {
            p->saved[i] = sv;
            sv += saved_sz[i];
        }
    if (st == QF_OK && p->scratch_bytes && !(p->scratch = qf_exec_alloc_aligned(p->scratch_bytes, &p->scratch_raw)))
        st = QF_ERR_NOMEM;
    qf_free(saved_sz);
    return st;
}

/* Lifetimes on the time line, then best-fit offsets in one arena. */
static qf_status grad_layout(qf_grad_plan *p, const unsigned char *rg, const unsigned char *reach)
{
    const qf_graph *g = p->g;
    const int n = p->n, tend = 2 * n + 1, nv = p->nvalues;
    const int nbufs_max = 2 * nv + p->nin_total;
    int *pos = qf_calloc((size_t)g->next_node_id + 1, sizeof *pos);
    int *end = qf_malloc(sizeof *end * (size_t)(nv ? nv : 1));
    int *gstart = qf_malloc(sizeof *gstart * (size_t)(nv ? nv : 1));
    int *head = qf_malloc(sizeof *head * (size_t)(tend + 1));
    grad_buf *bufs = qf_malloc(sizeof *bufs * (size_t)(nbufs_max ? nbufs_max : 1));
    qf_block *live = qf_malloc(sizeof *live * (size_t)(nbufs_max ? nbufs_max : 1));
    size_t *off = qf_malloc(sizeof *off * (size_t)(nbufs_max ? nbufs_max : 1));
    qf_status st = QF_OK;
    if (!pos || !end || !gstart || !head || !bufs || !live || !off) {
        st = QF_ERR_NOMEM;
        goto done;
    }
    for (int i = 0; i < n; i++) pos[p->nodes[i]->id] = i;
    for (int k = 0; k < nv; k++) {
        end[k] = -1;
        gstart[k] = -1;
    }
    /* Activations: to the last forward reader, the last backward that reads them, graph outputs to the end. */
    for (int i = 0; i < n; i++) {
        const qf_node *nd = p->nodes[i];
        const qf_op_kernels *k = qf_op_kernels_get(nd->op);
        for (int o = 0; o < nd->noutputs; o++)
            if (end[nd->outputs[o]->id] < i) end[nd->outputs[o]->id] = i;
        for (int s = 0; s < nd->ninputs; s++)
            if (nd->inputs[s] && nd->inputs[s]->producer && end[nd->inputs[s]->id] < i) end[nd->inputs[s]->id] = i;
        if (!p->run_bwd[i]) continue;
        /* Readers run backward in reverse order: the earliest in forward order is the last. */
        for (int s = 0; s < nd->ninputs && s < 32; s++)
            if (nd->inputs[s] && nd->inputs[s]->producer && ((k->bwd_in >> s) & 1u) && end[nd->inputs[s]->id] < 2 * n - i)
                end[nd->inputs[s]->id] = 2 * n - i;
        for (int o = 0; o < nd->noutputs && o < 32; o++)
            if ((k->bwd_out >> o) & 1u && end[nd->outputs[o]->id] < 2 * n - i) end[nd->outputs[o]->id] = 2 * n - i;
    }
    for (int k = 0; k < g->noutputs; k++)
        if (g->outputs[k]->producer) end[g->outputs[k]->id] = tend;
    /* Gradients: the first backward to write one writes it, later ones go through a temporary. */
    gstart[p->loss->id] = n;
    for (int i = n - 1; i >= 0; i--) {
        if (!p->run_bwd[i]) continue;
        const qf_node *nd = p->nodes[i];
        for (int s = 0; s < nd->ninputs; s++) {
            const qf_value *v = nd->inputs[s];
            if (!v || !rg[v->id] || !reach[v->id]) continue;
            if (gstart[v->id] < 0) gstart[v->id] = 2 * n - i;
            else {
                qf_tensor *a = &p->acc[p->in_base[i] + s];
                *a = (qf_tensor){.dtype = QF_DTYPE_F32, .ndim = v->type.ndim};
                memcpy(a->dims, v->type.dims, sizeof a->dims);
                a->data = a; /* marked: placed below */
            }
        }
    }
    for (int k = 0; k < p->nparams; k++) {
        const qf_value *v = p->params[k];
        if (gstart[v->id] < 0) {
            gstart[v->id] = n; /* reaches no loss: a gradient of zeros */
            p->zero_grad[v->id] = 1;
        }
    }
    /* The buffer list, bucketed by start time. */
    int nb = 0;
    for (int t = 0; t <= tend; t++) head[t] = -1;
#define GRAD_ADD(START, END, T)                                                  \
    do {                                                                         \
        bufs[nb] = (grad_buf){(START), (END), qf_exec_align(qf_tensor_nbytes(T)), (T), head[(START)]}; \
        head[(START)] = nb++;                                                    \
    } while (0)
    for (int i = 0; i < n; i++) {
        if (p->host[i] >= 0) continue; /* written by its host's forward: placed there */
        const qf_node *nd = p->nodes[i];
        for (int o = 0; o < nd->noutputs; o++) {
            const qf_value *v = o == 0 && p->fuse[i] >= 0 ? p->nodes[p->fuse[i]]->outputs[0] : nd->outputs[o];
            GRAD_ADD(i, end[v->id], &p->vt[v->id]);
        }
    }
    for (int k = 0; k < nv; k++) {
        const qf_value *v = g->values[k];
        if (!v || gstart[k] < 0) continue;
        qf_tensor *t = &p->gt[k];
        *t = (qf_tensor){.dtype = QF_DTYPE_F32, .ndim = v->type.ndim};
        memcpy(t->dims, v->type.dims, sizeof t->dims);
        int prod = v->producer ? pos[v->producer->id] : -1;
        if (prod >= 0 && p->host[prod] >= 0) prod = p->host[prod]; /* read by the host's backward */
        GRAD_ADD(gstart[k], prod >= 0 ? 2 * n - prod : tend, t);
    }
    for (int i = 0; i < n; i++)
        for (int s = 0; s < p->nodes[i]->ninputs; s++) {
            qf_tensor *a = &p->acc[p->in_base[i] + s];
            if (a->data) GRAD_ADD(2 * n - i, 2 * n - i, a);
        }
#undef GRAD_ADD
    int nlive = 0;
    size_t top = 0;
    for (int t = 0; t <= tend; t++) {
        int k = 0;
        for (int b = 0; b < nlive; b++)
            if (live[b].last >= t) live[k++] = live[b];
        nlive = k;
        for (int b = head[t]; b >= 0; b = bufs[b].next) {
            if (!bufs[b].size) {
                off[b] = 0;
                continue;
            }
            off[b] = qf_exec_place(live, &nlive, bufs[b].size, bufs[b].end);
            if (off[b] + bufs[b].size > top) top = off[b] + bufs[b].size;
            if (top > (uint64_t)QF_MAX_TENSOR_BYTES) {
                st = qf_error(QF_ERR_SHAPE,
                              "training needs %zu bytes of activations and gradients at once, more than qfold "
                              "handles (%lld bytes)",
                              top, (long long)QF_MAX_TENSOR_BYTES);
                goto done;
            }
        }
    }
    p->arena_bytes = top;
    char *arena = NULL;
    if (top && !(arena = qf_exec_alloc_aligned(top, &p->arena_raw))) {
        st = QF_ERR_NOMEM;
        goto done;
    }
    for (int b = 0; b < nb; b++) bufs[b].t->data = bufs[b].size ? arena + off[b] : NULL;
done:
    qf_free(pos);
    qf_free(end);
    qf_free(gstart);
    qf_free(head);
    qf_free(bufs);
    qf_free(live);
    qf_free(off);
    return st;
}

qf_status qf_grad_plan_init(qf_grad_plan **out, qf_graph *g, const qf_grad_options *opt)
{
    *out = NULL;
    qf_stack_reserve();
    QF_TRY(qf_exec_check_shapes(g));
    QF_TRY(qf_graph_toposort(g));
    QF_TRY(qf_graph_infer_shapes(g));
    QF_TRY(qf_exec_check_values(g));
    QF_TRY(grad_check_options(g, opt));
    qf_grad_plan *p = qf_calloc(1, sizeof *p);
    if (!p) return QF_ERR_NOMEM;
    p->g = g;
    p->loss = opt->loss;
    p->nparams = opt->nparams;
    p->params = qf_calloc((size_t)(opt->nparams ? opt->nparams : 1), sizeof *p->params);
    unsigned char *rg = qf_calloc((size_t)(g->nvalues ? g->nvalues : 1), 1);
    unsigned char *reach = qf_calloc((size_t)(g->nvalues ? g->nvalues : 1), 1);
    qf_status st = p->params && rg && reach ? grad_alloc_tables(p) : QF_ERR_NOMEM;
    if (st == QF_OK) {
        memcpy(p->params, opt->params, sizeof *p->params * (size_t)opt->nparams);
        st = grad_mark(p, rg, reach);
    }
    if (st == QF_OK && !rg[p->loss->id])
        st = qf_error(QF_ERR_INVALID, "the loss '%s' depends on none of the %d parameters to train", p->loss->name,
                      p->nparams);
    if (st == QF_OK) st = grad_prepare(p);
    if (st == QF_OK && !opt->unfused) st = grad_fuse(p);
    if (st == QF_OK) st = grad_layout(p, rg, reach);
    qf_free(rg);
    qf_free(reach);
    if (st != QF_OK) {
        qf_grad_plan_free(p);
        return st;
    }
    *out = p;
    return QF_OK;
}

qf_status qf_grad_plan_forward(qf_grad_plan *p, const qf_tensor *const *inputs, int ninputs, bool training)
{
    const qf_graph *g = p->g;
    p->ready = false;
    QF_TRY(qf_interrupt_check());
    if (ninputs != g->ninputs)
        return qf_error(QF_ERR_INVALID, "graph has %d input%s, got %d", g->ninputs, g->ninputs == 1 ? "" : "s",
                        ninputs);
    for (int i = 0; i < ninputs; i++) {
        QF_TRY(qf_exec_check_input(g->inputs[i], inputs[i]));
        p->vt[g->inputs[i]->id].data = inputs[i]->data;
    }
    /* Constants are read where they are now: the trainer may have given one a new payload. */
    for (int k = 0; k < p->nvalues; k++) {
        const qf_value *v = g->values[k];
        if (v && !v->producer && v->kind != QF_VALUE_INPUT) p->vt[k].data = v->type.data;
    }
    const uint64_t stream = grad_mix(p->seed ^ grad_mix(p->step));
    for (int i = 0; i < p->n; i++) {
        if (p->host[i] >= 0) continue;
        const qf_node *nd = p->nodes[i];
        qf_kernel_io io = {.node = nd, .opset = g->opset, .nin = nd->ninputs, .nout = nd->noutputs,
                           .nfused = p->fuse[i] >= 0, .fused = p->fuse[i] >= 0 ? &p->nodes[p->fuse[i]] : NULL,
                           .in = &p->fin[p->in_base[i]], .out = &p->fout[p->out_base[i]], .state = p->state[i],
                           .scratch = p->scratch, .scratch_size = p->fwd_scratch[i], .training = training,
                           .seed = grad_mix(stream + nd->id), .saved = p->saved[i], .in_nhwc = p->in_nhwc[i],
                           .out_nhwc = p->out_nhwc[i]};
        if (p->be[i]) {
            io.state = p->be_state[i];
            qf_status st = p->be[i]->forward_f32(&io);
            if (st != QF_OK) qf_exec_name_node(nd, st);
            QF_TRY(st);
        } else
            QF_TRY(qf_exec_node(&io));
    }
    if (training) {
        p->ready = true;
        p->step++;
    }
    return QF_OK;
}

/* The backward's view of slot s of value v: its data only when bit s of mask. */
static const qf_tensor *grad_view(qf_grad_plan *p, const qf_value *v, qf_tensor *view, uint32_t mask, int s)
{
    if (!v) return NULL;
    *view = p->vt[v->id];
    if (s >= 32 || !((mask >> s) & 1u)) view->data = NULL;
    return view;
}

qf_status qf_grad_plan_backward(qf_grad_plan *p)
{
    if (!p->ready) return qf_error(QF_ERR_INVALID, "backward needs a forward in training mode before it");
    p->ready = false;
    for (int k = 0; k < p->nvalues; k++)
        if (p->zero_grad[k]) memset(p->gt[k].data, 0, qf_tensor_nbytes(&p->gt[k]));
    *(float *)p->gt[p->loss->id].data = 1.0f;
    for (int i = p->n - 1; i >= 0; i--) {
        if (!p->run_bwd[i]) continue;
        const qf_node *nd = p->nodes[i];
        const qf_op_kernels *k = qf_op_kernels_get(nd->op);
        const int ib = p->in_base[i], ob = p->out_base[i];
        for (int s = 0; s < nd->ninputs; s++) {
            const qf_value *v = nd->inputs[s];
            p->bin[ib + s] = grad_view(p, v, &p->bview[ib + s], k->bwd_in, s);
            qf_tensor *a = &p->acc[ib + s];
            p->bdin[ib + s] = !v || !p->gt[v->id].data || p->zero_grad[v->id] ? NULL : a->data ? a : &p->gt[v->id];
        }
        for (int o = 0; o < nd->noutputs; o++) {
            const qf_value *v = o == 0 && p->fuse[i] >= 0 ? p->nodes[p->fuse[i]]->outputs[0] : nd->outputs[o];
            p->bout[ob + o] = (qf_tensor *)grad_view(p, v, &p->bview[p->nin_total + ob + o], k->bwd_out, o);
            p->bdout[ob + o] = p->gt[v->id].data ? &p->gt[v->id] : NULL;
        }
        qf_kernel_io io = {.node = nd, .opset = p->g->opset, .nin = nd->ninputs, .nout = nd->noutputs,
                           .nfused = p->fuse[i] >= 0, .fused = p->fuse[i] >= 0 ? &p->nodes[p->fuse[i]] : NULL,
                           .in = &p->bin[ib], .out = &p->bout[ob], .state = p->state[i], .scratch = p->scratch,
                           .scratch_size = p->bwd_scratch[i], .training = true, .saved = p->saved[i],
                           .dout = &p->bdout[ob], .din = &p->bdin[ib], .in_nhwc = p->in_nhwc[i],
                           .out_nhwc = p->out_nhwc[i]};
        qf_status st;
        if (p->be[i]) {
            io.state = p->be_state[i];
            st = p->be[i]->backward_f32(&io);
        } else
            st = k->backward_f32(&io);
        if (st != QF_OK) {
            qf_exec_name_node(nd, st);
            return st;
        }
        for (int s = 0; s < nd->ninputs; s++) {
            const qf_tensor *a = &p->acc[ib + s];
            if (!a->data || !p->bdin[ib + s]) continue;
            float *dst = p->gt[nd->inputs[s]->id].data;
            const float *src = a->data;
            for (int64_t e = 0, m = qf_tensor_numel(a); e < m; e++) dst[e] += src[e];
        }
    }
    return QF_OK;
}

const qf_tensor *qf_grad_plan_grad(const qf_grad_plan *p, int i)
{
    return i >= 0 && i < p->nparams ? &p->gt[p->params[i]->id] : NULL;
}

const qf_tensor *qf_grad_plan_output(const qf_grad_plan *p, int i)
{
    return i >= 0 && i < p->g->noutputs ? &p->vt[p->g->outputs[i]->id] : NULL;
}

float qf_grad_plan_loss(const qf_grad_plan *p)
{
    const float *l = p->vt[p->loss->id].data;
    return l ? *l : 0.0f;
}

void qf_grad_plan_seed(qf_grad_plan *p, uint64_t seed)
{
    p->seed = seed;
    p->step = 0;
}

size_t qf_grad_plan_arena_bytes(const qf_grad_plan *p) { return p->arena_bytes; }

int qf_grad_plan_fused(const qf_grad_plan *p)
{
    int k = 0;
    for (int i = 0; i < p->n; i++) k += p->host[i] >= 0;
    return k;
}
