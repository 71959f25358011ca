/* qf_target_check: which node of a model runs on the Neutron NPU, and why
 * not (qfold/target.h).
 *
 * The engine sees a QDQ graph as ExecuTorch's NXP partitioner sees its edge
 * graph (neutron_partitioner.py, QDQClusterRecognizer): every compute node
 * with its cluster, the DequantizeLinear nodes before it, the activation
 * fused after a Conv / Gemm / MatMul (ExecuTorch's auxiliary relu / hardtanh
 * / sigmoid / tanh) and the QuantizeLinear nodes after it.
 *
 *   1. classify: a node is a compute node, a Q / DQ of some compute node's
 *      cluster, a fused activation (placed with its producer), or a
 *      model-boundary Q / DQ of float I/O (ExecuTorch's RemoveIOQuantOpsPass
 *      leaves those out of the delegate: CPU, not counted), or a
 *      computation on constants alone (a parameter in ExecuTorch: placed
 *      with its reader, not counted);
 *   2. one qf_nview per compute node (operands seen through their DQ / Q);
 *   3. the verdict: the op's row for the target's flow (no row: "no Neutron
 *      converter"), after the checks every converter shares
 *      (NodeConverter: the node sits in a QDQ cluster, main I/O int8 /
 *      uint8);
 *   4. partitions as torch's CapabilityBasedPartitioner forms them, then the rows'
 *      partition rules (supports_partitioning_result): a node refused there
 *      leaves the NPU and the partitions are formed again, until none is;
 *   5. transitions and MACs.
 *
 * A float model is first quantized as `qfold quantize --target neutron`
 * would (qf_quantize_model with the target's profile on one synthetic
 * sample), written as ONNX bytes in memory and read back (so the check
 * sees the file `qfold quantize` writes: Gemm, not qfold's internal
 * linear), and every
 * node of the original model is reported under its own name (see
 * ck_map_resolve).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "neutron.h"
#include "qfold/io.h"
#include "qfold/pass.h"
#include "qfold/quant.h"
#include "qfold/schema.h"
#include "qfold/target.h"

typedef enum ck_kind {
    CK_COMPUTE = 0, /* has a row (or should have one) */
    CK_QDQ,         /* Q / DQ of a compute node's cluster */
    CK_FUSED,       /* activation fused into its producer's cluster */
    CK_BOUNDARY,    /* Q of a float graph input, DQ to a float graph output */
    CK_CONST /* computes from constants only (Constant, Shape of a weight): placed with its reader */
} ck_kind;

typedef struct qf_ck {
    const qf_graph *g;
    const qf_target_spec *t;
    int n;
    const qf_node **node; /* by index, graph order */
    int *index;           /* node id -> index */
    ck_kind *kind;
    int *owner;     /* QDQ / FUSED: the compute node; COMPUTE: itself; BOUNDARY: -1 */
    int *fused;     /* COMPUTE: its fused activation, -1 none */
    qf_nview *view; /* COMPUTE */
    bool *ok;       /* COMPUTE: the row said yes */
    bool *dnd;      /* COMPUTE: refused by a partition rule */
    qf_nwhy *why;
    int *part; /* COMPUTE: partition (-1 CPU) */
    int npart;
    int **succ; /* COMPUTE: successor compute nodes (distinct) */
    int *nsucc;
    int64_t *macs, *macs_padded;
    int *wstack, *wmark, wepoch; /* scratch of ck_successors */
    qf_arena arena;
} qf_ck;

static bool ck_is_qdq(const qf_node *n)
{
    return n->op == QF_OP_QUANTIZE || n->op == QF_OP_DEQUANTIZE;
}

static int ck_idx(const qf_ck *c, const qf_node *n) { return n ? c->index[n->id] : -1; }

/* --- 1. classification ------------------------------------------------- */

/* The ops whose converter absorbs a following activation (ExecuTorch:
 * conv2d, addmm, mm, linear) and the activations it absorbs (its
 * QDQClusterRecognizer's auxiliary relu, hardtanh, sigmoid, tanh). */
static bool ck_absorbs(qf_op op)
{
    return op == QF_OP_CONV || op == QF_OP_GEMM || op == QF_OP_MATMUL || op == QF_OP_LINEAR;
}
static bool ck_fusable(qf_op op)
{
    return op == QF_OP_RELU || op == QF_OP_RELU6 || op == QF_OP_CLIP || op == QF_OP_SIGMOID ||
           op == QF_OP_TANH;
}

/* The first compute node (its cluster's owner) reading what node i writes,
 * looking through Q / DQ nodes; -1 if none. */
static int ck_consumer(const qf_ck *c, int i, int depth)
{
    const qf_node *n = c->node[i];
    for (int o = 0; o < n->noutputs; o++) {
        const qf_value *v = n->outputs[o];
        if (!v) continue;
        for (int u = 0; u < v->nuses; u++) {
            int k = ck_idx(c, v->uses[u].node);
            if (k < 0) continue;
            if (c->kind[k] == CK_COMPUTE || c->kind[k] == CK_FUSED) return c->owner[k];
            /* through Q / DQ nodes, and through a constant computation (a
             * Transpose of a dequantized weight) to the node reading it */
            if (depth < 4 && (ck_is_qdq(c->node[k]) || c->kind[k] == CK_CONST)) {
                int r = ck_consumer(c, k, depth + 1);
                if (r >= 0) return r;
            }
        }
    }
    return -1;
}

/* The compute node that writes what node i reads (input 0), looking
 * through Q / DQ nodes; -1 if none. */
static int ck_producer(const qf_ck *c, int i, int depth)
{
    const qf_node *n = c->node[i];
    const qf_value *v = n->ninputs ? n->inputs[0] : NULL;
    if (!v || !v->producer) return -1;
    int k = ck_idx(c, v->producer);
    if (c->kind[k] == CK_COMPUTE || c->kind[k] == CK_FUSED) return c->owner[k];
    if (depth < 4 && ck_is_qdq(c->node[k])) return ck_producer(c, k, depth + 1);
    return -1;
}

/* Whether a DQ's output reaches a graph output through Q / DQ nodes only. */
static bool ck_to_output(const qf_node *n, int depth)
{
    const qf_value *v = n->outputs[0];
    if (!v) return false;
    if (v->is_output) return true;
    for (int u = 0; u < v->nuses; u++)
        if (depth < 4 && ck_is_qdq(v->uses[u].node) && ck_to_output(v->uses[u].node, depth + 1))
            return true;
    return false;
}

static void ck_classify(qf_ck *c)
{
    for (int i = 0; i < c->n; i++) {
        const qf_node *n = c->node[i];
        c->kind[i] = ck_is_qdq(n) ? CK_QDQ : CK_COMPUTE;
        c->owner[i] = i;
        c->fused[i] = -1;
        /* In ExecuTorch such values are parameters, not nodes (graph order:
         * producers are classified first). */
        bool konst = c->kind[i] == CK_COMPUTE;
        for (int k = 0; konst && k < n->ninputs; k++) {
            const qf_value *v = n->inputs[k];
            const qf_node *p = v ? v->producer : NULL;
            /* a constant, a constant computation, or a dequantized constant */
            if (v && !qf_value_is_const(v) && !(p && c->kind[ck_idx(c, p)] == CK_CONST) &&
                !(p && p->op == QF_OP_DEQUANTIZE && p->inputs[0] && qf_value_is_const(p->inputs[0])))
                konst = false;
        }
        if (konst) c->kind[i] = CK_CONST;
    }
    /* A MatMul's bias: MatMul -> Add of a constant (or a dequantized one),
     * the MatMul's output read by the Add alone, is one linear (qfold writes
     * a Linear on a 3-D input so, as PyTorch's exporter does; ExecuTorch
     * sees aten.linear with its bias). */
    for (int i = 0; i < c->n; i++) {
        const qf_node *a = c->node[i];
        if (a->op != QF_OP_ADD || a->ninputs != 2 || c->kind[i] != CK_COMPUTE) continue;
        for (int s = 0; s < 2; s++) {
            const qf_value *x = a->inputs[s], *b = a->inputs[1 - s];
            const qf_node *bp = b ? b->producer : NULL;
            if (!x || !b || !x->producer || x->producer->op != QF_OP_MATMUL) continue;
            int p = ck_idx(c, x->producer);
            bool konst = qf_value_is_const(b) || (bp && bp->op == QF_OP_DEQUANTIZE &&
                                                  bp->inputs[0] && qf_value_is_const(bp->inputs[0]));
            if (!konst || b->type.ndim != 1 || c->kind[p] != CK_COMPUTE || x->nuses != 1 ||
                x->is_output || c->fused[p] >= 0)
                continue;
            c->kind[i] = CK_FUSED;
            c->owner[i] = p;
            c->fused[p] = i;
            break;
        }
    }
    /* Fused activations: Conv / Gemm / MatMul (with its bias Add) -> act
     * with nothing between (no QuantizeLinear: the act's Q quantizes the
     * cluster's output), the producer's output read by the act alone. */
    for (int i = 0; i < c->n; i++) {
        const qf_node *a = c->node[i];
        if (!ck_fusable(a->op) || !a->inputs[0] || !a->inputs[0]->producer) continue;
        const qf_value *x = a->inputs[0];
        int p = ck_idx(c, x->producer);
        if (c->kind[p] == CK_FUSED && x->producer->op == QF_OP_ADD && c->fused[c->owner[p]] == p)
            p = c->owner[p]; /* after a MatMul's bias */
        else if (!ck_absorbs(x->producer->op) || c->kind[p] != CK_COMPUTE || c->fused[p] >= 0)
            continue;
        if (x->nuses != 1 || x->is_output) continue;
        c->kind[i] = CK_FUSED;
        c->owner[i] = p;
        c->fused[p] = i;
    }
    for (int i = 0; i < c->n; i++) {
        if (c->kind[i] == CK_CONST) c->owner[i] = ck_consumer(c, i, 0);
        const qf_node *n = c->node[i];
        if (c->kind[i] != CK_QDQ) continue;
        int o;
        if (n->op == QF_OP_DEQUANTIZE) {
            o = ck_consumer(c, i, 0);
            if (o < 0 && ck_to_output(n, 0))
                o = -1; /* float graph output */
            else if (o < 0)
                o = ck_producer(c, i, 0);
        } else {
            const qf_value *x = n->inputs[0];
            if (x && x->kind == QF_VALUE_INPUT)
                o = -1; /* float graph input */
            else {
                o = ck_producer(c, i, 0);
                if (o < 0) o = ck_consumer(c, i, 0);
            }
        }
        c->owner[i] = o;
        if (o < 0) c->kind[i] = CK_BOUNDARY;
    }
}

/* --- 2. views ------------------------------------------------------------ */

static bool ck_int8(qf_dtype d) { return d == QF_DTYPE_I8 || d == QF_DTYPE_U8; }

/* Operand from a Q / DQ node q (inputs: x, scale, zero point). */
static qf_status ck_qparams(qf_ck *c, const qf_node *q, qf_nq *r)
{
    const qf_value *s = q->ninputs > 1 ? q->inputs[1] : NULL,
                   *z = q->ninputs > 2 ? q->inputs[2] : NULL;
    r->quantized = true;
    r->nscale = 1;
    r->axis = -1;
    if (s && s->type.data && s->type.dtype == QF_DTYPE_F32) {
        r->nscale = qf_tensor_numel(&s->type);
        r->scale = s->type.data;
    }
    if (r->nscale > 1) {
        int64_t axis = qf_node_attr_int(q, "axis", 1);
        int rank = q->inputs[0] ? q->inputs[0]->type.ndim : 0;
        if (axis < 0) axis += rank;
        r->axis = (int)axis;
    }
    if (z && z->type.data) {
        int64_t nz = qf_tensor_numel(&z->type);
        int32_t *zp = qf_arena_alloc(&c->arena, (size_t)(nz > 0 ? nz : 1) * sizeof *zp);
        if (!zp) return QF_ERR_NOMEM;
        for (int64_t k = 0; k < nz; k++) zp[k] = (int32_t)qf_tensor_get_i64(&z->type, k);
        r->zero_point = zp;
    }
    return QF_OK;
}

static qf_status ck_view(qf_ck *c, int i)
{
    const qf_node *n = c->node[i];
    qf_nview *w = &c->view[i];
    qf_nq *in = qf_arena_alloc(&c->arena, (size_t)(n->ninputs + 1) * sizeof *in);
    qf_nq *out = qf_arena_alloc(&c->arena, (size_t)(n->noutputs + 1) * sizeof *out);
    if (!in || !out) return QF_ERR_NOMEM;
    for (int k = 0; k < n->ninputs; k++) {
        const qf_value *v = n->inputs[k];
        qf_nq *r = &in[k];
        r->v = v;
        r->axis = -1;
        if (!v) continue;
        r->qtype = v->type.dtype;
        r->is_static = qf_value_is_const(v);
        if (v->producer && v->producer->op == QF_OP_DEQUANTIZE && v->producer->inputs[0]) {
            const qf_value *x = v->producer->inputs[0];
            QF_TRY(ck_qparams(c, v->producer, r));
            r->qtype = x->type.dtype;
            r->is_static = qf_value_is_const(x);
        } else if (v->producer && c->kind[ck_idx(c, v->producer)] == CK_CONST) {
            /* a constant computation (qfold's Linear on a 3-D input reads
             * Transpose(DQ(W^T))): static, quantized as the DQ under it */
            r->is_static = true;
            const qf_node *p = v->producer;
            for (int d = 0; d < 4 && p && p->op != QF_OP_DEQUANTIZE; d++)
                p = p->ninputs && p->inputs[0] ? p->inputs[0]->producer : NULL;
            if (p && p->op == QF_OP_DEQUANTIZE && p->inputs[0]) {
                QF_TRY(ck_qparams(c, p, r));
                r->qtype = p->inputs[0]->type.dtype;
                if (r->nscale > 1) r->axis = -1; /* its axis is the DQ's, before the layout change */
            }
        } else if (v->producer && v->producer->op == QF_OP_QUANTIZE && ck_int8(v->type.dtype)) {
            /* integers straight from a QuantizeLinear (split_group_conv_qdq's
             * Split): quantized as that Q writes them */
            QF_TRY(ck_qparams(c, v->producer, r));
        }
    }
    /* An output is quantized by the Q after the cluster (after the fused
     * activation when there is one). */
    const qf_node *last = c->fused[i] >= 0 ? c->node[c->fused[i]] : n;
    for (int k = 0; k < n->noutputs; k++) {
        qf_nq *r = &out[k];
        r->v = n->outputs[k];
        r->axis = -1;
        if (!r->v) continue;
        r->qtype = r->v->type.dtype;
        const qf_value *y = k == 0 ? last->outputs[0] : n->outputs[k];
        /* integers read by DequantizeLinear nodes: quantized as they read them */
        qf_op want = y && ck_int8(y->type.dtype) ? QF_OP_DEQUANTIZE : QF_OP_QUANTIZE;
        for (int u = 0; y && u < y->nuses; u++) {
            const qf_node *q = y->uses[u].node;
            if (q->op != want) continue;
            QF_TRY(ck_qparams(c, q, r));
            r->qtype = want == QF_OP_QUANTIZE ? q->outputs[0]->type.dtype : y->type.dtype;
            break;
        }
    }
    *w = (qf_nview){.g = c->g,
                    .node = n,
                    .nin = n->ninputs,
                    .nout = n->noutputs,
                    .in = in,
                    .out = out,
                    .fused_act = c->fused[i] >= 0 ? c->node[c->fused[i]] : NULL};
    return QF_OK;
}

/* --- 3. the verdict ------------------------------------------------------- */

/* What every converter requires before its own rules (ExecuTorch's
 * partitioner takes only nodes in a QDQ cluster; NodeConverter's
 * uses_quantization_type_for_io: main input and output int8 / uint8). */
static bool ck_cluster(const qf_ck *c, int i, qf_nwhy *why)
{
    const qf_nview *w = &c->view[i];
    static const char *fix = "quantize it (`qfold quantize --target neutron`)";
    for (int k = 0; k < w->nin; k++) {
        const qf_nq *r = &w->in[k];
        if (!r->v || r->quantized || r->is_static) continue;
        return qf_neutron_refuse(why, fix,
                                 "not quantized: input '%s' does not come from a DequantizeLinear",
                                 r->v->name);
    }
    const qf_node *last = c->fused[i] >= 0 ? c->node[c->fused[i]] : w->node;
    for (int k = 0; k < w->nout; k++) {
        const qf_value *y = k == 0 ? last->outputs[0] : w->node->outputs[k];
        if (!y || (!y->nuses && !y->is_output)) continue;
        qf_op want = ck_int8(y->type.dtype) ? QF_OP_DEQUANTIZE : QF_OP_QUANTIZE;
        bool all = y->nuses > 0;
        for (int u = 0; u < y->nuses; u++)
            if (y->uses[u].node->op != want) all = false;
        if (!all)
            return qf_neutron_refuse(
                why, fix, "not quantized: output '%s' does not go to a QuantizeLinear", y->name);
    }
    if (w->nin && w->in[0].v && !ck_int8(w->in[0].qtype))
        return qf_neutron_refuse(why, "quantize its input to int8",
                                 "input '%s' is %s, not int8 / uint8", w->in[0].v->name,
                                 qf_dtype_name(w->in[0].qtype));
    if (w->nout && w->out[0].v && !ck_int8(w->out[0].qtype))
        return qf_neutron_refuse(why, "quantize its output to int8",
                                 "output '%s' is %s, not int8 / uint8", w->out[0].v->name,
                                 qf_dtype_name(w->out[0].qtype));
    return true;
}

static void ck_verdict(qf_ck *c, int i)
{
    const qf_node *n = c->node[i];
    qf_nwhy *why = &c->why[i];
    const qf_neutron_row *row = qf_neutron_row_find(n->op);
    qf_neutron_rule rule = !row ? NULL : c->t->flow == QF_NEUTRON_SDK2 ? row->sdk2 : row->sdk3;
    /* ONNX Runtime's QOperator form: the NPU's converters read QDQ clusters */
    bool qop = n->op == QF_OP_QLINEAR_CONV || n->op == QF_OP_QLINEAR_MATMUL ||
               n->op == QF_OP_CONV_INTEGER || n->op == QF_OP_MATMUL_INTEGER;
    if (!row)
        c->ok[i] = qf_neutron_refuse(
            why,
            qop ? "quantize the model in QDQ form (ONNX Runtime: quant_format=QuantFormat.QDQ; "
                  "or `qfold quantize --target neutron` on the float model)"
                : NULL,
            "no Neutron converter for %s", qf_op_label(n));
    else if (!rule)
        c->ok[i] = qf_neutron_refuse(why, NULL, "no Neutron converter for %s in %s", qf_op_label(n),
                                     c->t->flow == QF_NEUTRON_SDK2 ? "SDK 2.x" : "SDK 3.x");
    else
        c->ok[i] = ck_cluster(c, i, why) && rule(&c->view[i], c->t, why);
}

/* --- 4. partitions -------------------------------------------------------- */

/* The compute nodes that read what compute node i's cluster writes (through
 * Q / DQ nodes), each once. */
static qf_status ck_successors(qf_ck *c, int i)
{
    int cap = 8, m = 0;
    int *s = qf_arena_alloc(&c->arena, (size_t)cap * sizeof *s);
    if (!s) return QF_ERR_NOMEM;
    /* Worklist of nodes whose outputs to follow: i, its fused activation,
     * the Q / DQ nodes met. */
    int *stack = c->wstack, top = 0, epoch = ++c->wepoch;
    stack[top++] = i;
    if (c->fused[i] >= 0) stack[top++] = c->fused[i];
    while (top) {
        const qf_node *n = c->node[stack[--top]];
        for (int o = 0; o < n->noutputs; o++) {
            const qf_value *v = n->outputs[o];
            for (int u = 0; v && u < v->nuses; u++) {
                int k = ck_idx(c, v->uses[u].node);
                if (c->kind[k] == CK_QDQ || c->kind[k] == CK_BOUNDARY || c->kind[k] == CK_CONST) {
                    if (c->kind[k] != CK_CONST && c->wmark[k] != epoch) {
                        c->wmark[k] = epoch;
                        stack[top++] = k;
                    }
                    continue;
                }
                int o2 = c->owner[k];
                if (o2 == i) continue;
                bool seen = false;
                for (int j = 0; j < m; j++) seen |= s[j] == o2;
                if (seen) continue;
                if (m == cap) {
                    int *s2 = qf_arena_alloc(&c->arena, (size_t)cap * 2 * sizeof *s2);
                    if (!s2) return QF_ERR_NOMEM;
                    memcpy(s2, s, (size_t)m * sizeof *s);
                    s = s2;
                    cap *= 2;
                }
                s[m++] = o2;
            }
        }
    }
    c->succ[i] = s;
    c->nsucc[i] = m;
    return QF_OK;
}

static bool ck_supported(const qf_ck *c, int i)
{
    return c->kind[i] == CK_COMPUTE && c->ok[i] && !c->dnd[i];
}

/* Merging partitions a and b creates a cycle when a path leaves a ∪ b and
 * comes back into it (through a node outside: a CPU node or another
 * partition). mark / stack: scratch of c->n. */
static bool ck_cycle(const qf_ck *c, int a, int b, int *mark, int *stack, int epoch)
{
    int top = 0;
    for (int i = 0; i < c->n; i++) {
        if (c->kind[i] != CK_COMPUTE || (c->part[i] != a && c->part[i] != b)) continue;
        for (int j = 0; j < c->nsucc[i]; j++) {
            int s = c->succ[i][j];
            if (c->part[s] == a || c->part[s] == b || mark[s] == epoch) continue;
            mark[s] = epoch;
            stack[top++] = s;
        }
    }
    while (top) {
        int k = stack[--top];
        for (int j = 0; j < c->nsucc[k]; j++) {
            int s = c->succ[k][j];
            if (c->part[s] == a || c->part[s] == b) return true;
            if (mark[s] == epoch) continue;
            mark[s] = epoch;
            stack[top++] = s;
        }
    }
    return false;
}

/* As torch.fx's CapabilityBasedPartitioner.propose_partitions (torch 2.x,
 * which ExecuTorch's NeutronPartitioner runs): nodes in reverse graph
 * order; a supported node starts a partition, then every partition is
 * merged into the first candidate (the new partition, else the oldest one)
 * unless the merge would create a cycle: the "limited horizontal fusion"
 * that also joins independent NPU branches (two consumers of a CPU node).
 * torch tries the merges at every node; nothing changes between two nodes
 * unless a partition was created or merged, so the merges are tried only
 * then. Partitions are then numbered in graph order. */
static qf_status ck_partition(qf_ck *c)
{
    size_t n = (size_t)c->n + 1;
    int *mark = qf_calloc(n, sizeof *mark), *stack = qf_malloc(n * sizeof *stack);
    int *renum = qf_malloc(n * sizeof *renum);
    bool *alive = qf_calloc(n, sizeof *alive);
    if (!mark || !stack || !renum || !alive) {
        qf_free(mark);
        qf_free(stack);
        qf_free(renum);
        qf_free(alive);
        return QF_ERR_NOMEM;
    }
    int epoch = 0, next = 0;
    bool dirty = false;
    for (int i = 0; i < c->n; i++) c->part[i] = -1;
    for (int i = c->n - 1; i >= 0; i--) {
        if (c->kind[i] != CK_COMPUTE) continue;
        int self = -1;
        if (ck_supported(c, i)) {
            c->part[i] = self = next++;
            alive[self] = dirty = true;
        }
        if (!dirty) continue;
        dirty = false;
        for (int p = 0; self < 0 && p < next; p++)
            if (alive[p]) self = p;
        for (int p = 0; p < next; p++) {
            if (!alive[p] || p == self || ck_cycle(c, self, p, mark, stack, ++epoch)) continue;
            for (int k = 0; k < c->n; k++)
                if (c->part[k] == p) c->part[k] = self;
            alive[p] = false;
            dirty = true;
        }
    }
    for (int p = 0; p < next; p++) renum[p] = -1;
    c->npart = 0;
    for (int i = 0; i < c->n; i++)
        if (c->part[i] >= 0) {
            if (renum[c->part[i]] < 0) renum[c->part[i]] = c->npart++;
            c->part[i] = renum[c->part[i]];
        }
    qf_free(mark);
    qf_free(stack);
    qf_free(renum);
    qf_free(alive);
    return QF_OK;
}

/* ExecuTorch's partition loop: form the partitions, ask every delegated
 * node's partition rule; a node that refuses is kept off the NPU and the
 * partitions are formed again, until every rule agrees. */
static qf_status ck_partitions(qf_ck *c)
{
    size_t n = (size_t)c->n + 1;
    const qf_node **members = qf_malloc(n * sizeof *members);
    int *off = qf_malloc((n + 1) * sizeof *off), *fill = qf_malloc(n * sizeof *fill);
    qf_status st = members && off && fill ? QF_OK : QF_ERR_NOMEM;
    for (int iter = 0; st == QF_OK && iter <= c->n; iter++) {
        if ((st = ck_partition(c)) != QF_OK) break;
        /* the compute nodes of each partition, in graph order: partition p's
         * are members[off[p] .. off[p + 1]) */
        for (int p = 0; p <= c->npart; p++) off[p] = 0;
        for (int k = 0; k < c->n; k++)
            if (c->kind[k] == CK_COMPUTE && c->part[k] >= 0) off[c->part[k] + 1]++;
        for (int p = 0; p < c->npart; p++) {
            off[p + 1] += off[p];
            fill[p] = off[p];
        }
        for (int k = 0; k < c->n; k++)
            if (c->kind[k] == CK_COMPUTE && c->part[k] >= 0)
                members[fill[c->part[k]]++] = c->node[k];
        bool valid = true;
        for (int i = 0; i < c->n; i++) {
            if (c->part[i] < 0) continue;
            const qf_neutron_row *row = qf_neutron_row_find(c->node[i]->op);
            if (!row || !row->partition) continue;
            int p = c->part[i];
            qf_npart np = {.ncompute = off[p + 1] - off[p], .compute = members + off[p]};
            if (!row->partition(&c->view[i], &np, c->t, &c->why[i])) {
                c->dnd[i] = true;
                valid = false;
            }
        }
        if (valid) break;
    }
    qf_free(members);
    qf_free(off);
    qf_free(fill);
    return st;
}

/* --- 5. MACs -------------------------------------------------------------- */

static int64_t ck_numel(const qf_value *v)
{
    if (!v) return 0;
    int64_t n = 1;
    for (int d = 0; d < v->type.ndim; d++)
        n *= v->type.dims[d] < 0 ? 1 : v->type.dims[d]; /* dynamic as 1 */
    return n;
}

static int64_t ck_dim(const qf_value *v, int d)
{
    if (!v || d < 0 || d >= v->type.ndim) return 1;
    return v->type.dims[d] < 0 ? 1 : v->type.dims[d];
}

/* Multiply-accumulates of compute node i and what the NPU spends on them
 * with the channels (Conv: Cin per group and Cout; Gemm / MatMul: K and N)
 * rounded up to num_macs. */
static void ck_macs(qf_ck *c, int i)
{
    const qf_node *n = c->node[i];
    const qf_value *x = n->ninputs ? n->inputs[0] : NULL, *w = n->ninputs > 1 ? n->inputs[1] : NULL;
    const qf_value *y = n->noutputs ? n->outputs[0] : NULL;
    int64_t m = c->t->num_macs, macs = 0, padded = 0;
    if (!x || !w || !y) return;
    if (n->op == QF_OP_CONV && w->type.ndim >= 3) {
        /* N*Cout*Hout*Wout * (Cin/g)*kh*kw */
        int64_t cout = ck_dim(w, 0), cin_g = ck_dim(w, 1), k = 1;
        for (int d = 2; d < w->type.ndim; d++) k *= ck_dim(w, d);
        int64_t sp = cout ? ck_numel(y) / cout : 0; /* N*Hout*Wout */
        int64_t group = qf_node_attr_int(n, "group", 1);
        macs = sp * cout * cin_g * k;
        /* depthwise: the channels are the parallel dimension, one input
         * channel per output channel */
        if (group > 1 && cin_g == 1)
            padded = sp * qf_neutron_round_up(cout, m) * k;
        else
            padded = sp * qf_neutron_round_up(cout, m) * qf_neutron_round_up(cin_g, m) * k;
    } else if (n->op == QF_OP_CONV_TRANSPOSE && w->type.ndim >= 3) {
        /* every input element times Cout/g * kh*kw */
        int64_t cin = ck_dim(w, 0), cout_g = ck_dim(w, 1), k = 1;
        for (int d = 2; d < w->type.ndim; d++) k *= ck_dim(w, d);
        int64_t group = qf_node_attr_int(n, "group", 1);
        int64_t sp = cin ? ck_numel(x) / cin : 0;
        macs = sp * cin * cout_g * k;
        padded = sp * qf_neutron_round_up(cin / (group ? group : 1), m) * (group ? group : 1) *
                 qf_neutron_round_up(cout_g, m) * k;
    } else if (n->op == QF_OP_GEMM || n->op == QF_OP_MATMUL || n->op == QF_OP_LINEAR) {
        int64_t kdim;
        if (n->op == QF_OP_GEMM)
            kdim = qf_node_attr_int(n, "transA", 0) ? ck_dim(x, 0) : ck_dim(x, 1);
        else
            kdim = ck_dim(x, x->type.ndim - 1);
        int64_t ncol = ck_dim(y, y->type.ndim - 1);
        int64_t rows = ncol ? ck_numel(y) / ncol : 0;
        macs = rows * ncol * kdim;
        padded = rows * qf_neutron_round_up(ncol, m) * qf_neutron_round_up(kdim, m);
    }
    c->macs[i] = macs;
    c->macs_padded[i] = padded > macs ? padded : macs;
}

/* --- the QDQ check ------------------------------------------------------- */

static void ck_free(qf_ck *c)
{
    qf_free(c->node);
    qf_free(c->index);
    qf_free(c->kind);
    qf_free(c->owner);
    qf_free(c->fused);
    qf_free(c->view);
    qf_free(c->ok);
    qf_free(c->dnd);
    qf_free(c->why);
    qf_free(c->part);
    qf_free(c->succ);
    qf_free(c->nsucc);
    qf_free(c->macs);
    qf_free(c->macs_padded);
    qf_free(c->wstack);
    qf_free(c->wmark);
    qf_arena_free(&c->arena);
}

static qf_status ck_run(qf_ck *c, const qf_graph *g, const qf_target_spec *t)
{
    *c = (qf_ck){.g = g, .t = t};
    qf_arena_init(&c->arena);
    size_t n = (size_t)g->nnodes + 1;
    c->n = g->nnodes;
    c->node = qf_calloc(n, sizeof *c->node);
    c->index = qf_malloc(((size_t)g->next_node_id + 1) * sizeof *c->index);
    c->kind = qf_calloc(n, sizeof *c->kind);
    c->owner = qf_calloc(n, sizeof *c->owner);
    c->fused = qf_calloc(n, sizeof *c->fused);
    c->view = qf_calloc(n, sizeof *c->view);
    c->ok = qf_calloc(n, sizeof *c->ok);
    c->dnd = qf_calloc(n, sizeof *c->dnd);
    c->why = qf_calloc(n, sizeof *c->why);
    c->part = qf_calloc(n, sizeof *c->part);
    c->succ = qf_calloc(n, sizeof *c->succ);
    c->nsucc = qf_calloc(n, sizeof *c->nsucc);
    c->macs = qf_calloc(n, sizeof *c->macs);
    c->macs_padded = qf_calloc(n, sizeof *c->macs_padded);
    c->wstack = qf_calloc(n + 2, sizeof *c->wstack);
    c->wmark = qf_calloc(n, sizeof *c->wmark);
    if (!c->node || !c->index || !c->kind || !c->owner || !c->fused || !c->view || !c->ok ||
        !c->dnd || !c->why || !c->part || !c->succ || !c->nsucc || !c->macs || !c->macs_padded ||
        !c->wstack || !c->wmark)
        return QF_ERR_NOMEM;
    int i = 0;
    qf_graph_for_each_node(g, nd)
    {
        c->node[i] = nd;
        c->index[nd->id] = i++;
    }
    ck_classify(c);
    for (i = 0; i < c->n; i++) {
        if (c->kind[i] != CK_COMPUTE) continue;
        QF_TRY(ck_view(c, i));
        QF_TRY(ck_successors(c, i));
        ck_verdict(c, i);
        ck_macs(c, i);
    }
    for (i = 0; i < c->n; i++)
        if (c->kind[i] == CK_FUSED) c->view[c->owner[i]].fused_act = c->node[i];
    return ck_partitions(c);
}

/* The placement of node i of the checked graph: its owner's. */
static bool ck_npu(const qf_ck *c, int i)
{
    int o = c->owner[i];
    return o >= 0 && c->part[o] >= 0;
}

/* --- the result ------------------------------------------------------------ */

static const char *ck_str(qf_check_result *r, const char *s)
{
    return s && *s ? qf_arena_strdup(r->arena, s) : NULL;
}

/* Whether `piece` is named "<name>_...": a node a pass made of node `name`. */
static bool ck_piece(const char *name, const char *piece)
{
    size_t len = strlen(name);
    return strncmp(piece, name, len) == 0 && piece[len] == '_';
}

/* Fill r->nodes[k] from node i of the checked graph (name and op given). */

static qf_status ck_fill(const qf_ck *c, qf_check_result *r, int k, int i, const char *name,
                         const char *op, const char *note)
{
    qf_check_node *e = &r->nodes[k];
    int o = c->owner[i];
    e->name = qf_arena_strdup(r->arena, name ? name : "");
    e->op = qf_arena_strdup(r->arena, op ? op : "");
    char fused[600];
    if (!note && c->kind[i] == CK_FUSED) {
        snprintf(fused, sizeof fused, "fused into %s '%s'", qf_op_label(c->node[o]),
                 c->node[o]->name);
        note = fused;
    }
    e->note = ck_str(r, note);
    e->qdq = c->kind[i] == CK_QDQ || c->kind[i] == CK_BOUNDARY || c->kind[i] == CK_CONST;
    e->placement = ck_npu(c, i) ? QF_PLACE_NPU : QF_PLACE_CPU;
    e->partition = o >= 0 ? c->part[o] : -1;
    if (!e->name || !e->op) return QF_ERR_NOMEM;
    if (c->kind[i] == CK_COMPUTE) {
        e->macs = c->macs[i];
        e->macs_padded = c->macs_padded[i];
    }
    if (e->placement == QF_PLACE_NPU) return QF_OK;
    char buf[512];
    if (c->kind[i] == CK_BOUNDARY) {
        e->rule =
            ck_str(r, c->node[i]->op == QF_OP_QUANTIZE
                          ? "quantizes a float model input: runs on the CPU before the NPU"
                          : "dequantizes to a float model output: runs on the CPU after the NPU");
        e->fix = NULL;
    } else if (o < 0) {
        e->rule = ck_str(r, "a constant computation no NPU node reads");
        e->fix = NULL;
    } else if (o == i && ck_piece(name, c->node[i]->name)) {
        /* one of the nodes a pass split a node of the float model into */
        snprintf(buf, sizeof buf, "its part %s '%s' is not delegated: %s", qf_op_label(c->node[i]),
                 c->node[i]->name, c->why[i].rule[0] ? c->why[i].rule : "not delegated");
        e->rule = ck_str(r, buf);
        e->fix = ck_str(r, c->why[i].fix);
    } else if (o != i || strcmp(name, c->node[i]->name) != 0) {
        /* a cluster's Q / DQ, a fused activation, a node of a float model
         * that went into another (a folded BatchNorm) */
        snprintf(buf, sizeof buf, "runs with %s '%s' (on the CPU: %s)", qf_op_label(c->node[o]),
                 c->node[o]->name, c->why[o].rule);
        e->rule = ck_str(r, buf);
        e->fix = ck_str(r, c->why[o].fix);
    } else {
        e->rule = ck_str(r, c->why[i].rule[0] ? c->why[i].rule : "not delegated");
        e->fix = ck_str(r, c->why[i].fix);
    }
    return e->rule ? QF_OK : QF_ERR_NOMEM;
}

/* Partitions, counts, MAC totals and transitions of r from its nodes. */
static qf_status ck_summarize(const qf_ck *c, qf_check_result *r)
{
    r->npartitions = c->npart;
    r->partitions = qf_arena_alloc(r->arena, ((size_t)c->npart + 1) * sizeof *r->partitions);
    r->partition_len = qf_arena_alloc(r->arena, ((size_t)c->npart + 1) * sizeof *r->partition_len);
    if (!r->partitions || !r->partition_len) return QF_ERR_NOMEM;
    for (int p = 0; p < c->npart; p++) {
        int m = 0;
        for (int k = 0; k < r->nnodes; k++) m += r->nodes[k].partition == p;
        r->partitions[p] = qf_arena_alloc(r->arena, ((size_t)m + 1) * sizeof **r->partitions);
        if (!r->partitions[p]) return QF_ERR_NOMEM;
        for (int k = 0; k < r->nnodes; k++)
            if (r->nodes[k].partition == p) r->partitions[p][r->partition_len[p]++] = k;
    }
    for (int k = 0; k < r->nnodes; k++) {
        const qf_check_node *e = &r->nodes[k];
        if (e->qdq) continue;
        r->macs_total += e->macs;
        if (e->placement == QF_PLACE_NPU) {
            r->npu_nodes++;
            r->macs_npu += e->macs;
            r->macs_npu_padded += e->macs_padded;
        } else
            r->cpu_nodes++;
    }
    r->npu_mac_fraction = r->macs_total  ? (double)r->macs_npu / (double)r->macs_total
                          : r->cpu_nodes ? 0.0
                                         : 1.0;
    /* Transitions: the data edges between a compute node (with its cluster)
     * on the NPU and one on the CPU, each producer -> consumer pair once. */
    for (int i = 0; i < c->n; i++) {
        if (c->kind[i] != CK_COMPUTE) continue;
        for (int j = 0; j < c->nsucc[i]; j++)
            r->transitions += ck_npu(c, i) != ck_npu(c, c->succ[i][j]);
    }
    return QF_OK;
}

static qf_status ck_result_qdq(const qf_ck *c, qf_check_result *r)
{
    r->nnodes = c->n;
    r->nodes = qf_arena_alloc(r->arena, ((size_t)c->n + 1) * sizeof *r->nodes);
    if (!r->nodes) return QF_ERR_NOMEM;
    for (int i = 0; i < c->n; i++) {
        const qf_node *n = c->node[i];
        QF_TRY(ck_fill(c, r, i, i, n->name, qf_op_label(n), NULL));
    }
    return ck_summarize(c, r);
}

/* --- a float model: quantized first ---------------------------------------- */

/* Synthetic calibration samples: the placement does not depend on the
 * qparams' values, one sample gives every tensor its qparams. */
#define CK_SAMPLES 1

/* One array per graph input, [CK_SAMPLES, dims[1:]...]: uniform in [-1, 1)
 * for float inputs (a fixed LCG: the same model checks the same way), zeros
 * otherwise. */
static qf_status ck_synthetic(const qf_graph *g, qf_tensor *data)
{
    uint32_t seed = 12345;
    for (int i = 0; i < g->ninputs; i++) {
        const qf_value *v = g->inputs[i];
        int64_t dims[QF_MAX_DIMS];
        if (v->type.ndim < 1)
            return qf_error(QF_ERR_UNSUPPORTED,
                            "input '%s' is a scalar: the check needs a batch dimension", v->name);
        dims[0] = CK_SAMPLES;
        for (int d = 1; d < v->type.ndim; d++) {
            if (v->type.dims[d] < 0)
                return qf_error(
                    QF_ERR_UNSUPPORTED,
                    "input '%s' has an unknown dim %d: checking a float model needs fixed shapes "
                    "(only the batch may be dynamic)",
                    v->name, d);
            dims[d] = v->type.dims[d];
        }
        QF_TRY(qf_tensor_init(&data[i], v->type.dtype, v->type.ndim, dims));
        if (v->type.dtype != QF_DTYPE_F32) continue;
        float *x = data[i].data;
        for (int64_t k = 0, m = qf_tensor_numel(&data[i]); k < m; k++) {
            seed = seed * 1664525u + 1013904223u;
            x[k] = (float)(seed >> 8) / (float)(1u << 23) - 1.0f;
        }
    }
    return QF_OK;
}

/* q (freed here) as ONNX bytes in memory, read back: the graph `qfold
 * quantize` writes (qfold's internal linear / relu6 as Gemm / MatMul /
 * Clip). q goes before the load, so that at most two copies of the weights
 * are alive (the bytes and the loaded graph's own). */
static qf_status ck_roundtrip(qf_graph *q, qf_graph **out)
{
    void *bytes = NULL;
    size_t size = 0;
    qf_status st = qf_onnx_save_buffer(q, &bytes, &size);
    qf_graph_free(q);
    if (st == QF_OK) st = qf_onnx_load_buffer(bytes, size, "the quantized model", out);
    qf_free(bytes);
    return st;
}

static qf_status ck_quantize(const qf_graph *g, const qf_target_spec *t, qf_graph **out,
                             qf_quantize_model_result *res)
{
    const qf_quant_profile *base = qf_quant_profile_find(t->name);
    if (!base) return qf_error(QF_ERR_INTERNAL, "no quantization profile for target '%s'", t->name);
    qf_quant_profile p = *base;
    /* The cheapest calibration: min / max, no equalization (the placement
     * reads shapes and how operands are quantized, not the qparams' values). */
    p.equalize = QF_QEQ_OFF;
    QF_TRY(qf_quant_profile_set(&p, "activation-observer=minmax"));
    if (!t->neutron_passes) QF_TRY(qf_quant_profile_set(&p, "neutron-passes=off"));
    QF_TRY(qf_quant_register_passes());
    qf_tensor data[QF_QUANT_MAX_INPUTS] = {0};
    const qf_tensor *ptrs[QF_QUANT_MAX_INPUTS];
    if (g->ninputs > QF_QUANT_MAX_INPUTS)
        return qf_error(QF_ERR_UNSUPPORTED, "the model has %d inputs, more than %d", g->ninputs,
                        QF_QUANT_MAX_INPUTS);
    qf_graph *q = NULL;
    qf_status st = ck_synthetic(g, data);
    if (st == QF_OK) st = qf_graph_clone(g, &q);
    if (st == QF_OK) {
        for (int i = 0; i < g->ninputs; i++) ptrs[i] = &data[i];
        qf_data_source src = qf_data_source_tensors(ptrs, g->ninputs);
        qf_quantize_model_options mo = {
            .quantize = {.profile = &p, .batch = CK_SAMPLES, .max_samples = CK_SAMPLES},
            .sqnr_samples = -1};
        st = qf_quantize_model(q, &src, &mo, res);
    }
    for (int i = 0; i < g->ninputs; i++) qf_tensor_free(&data[i]);
    if (st != QF_OK) {
        qf_graph_free(q);
        return st;
    }
    return ck_roundtrip(q, out);
}

/* --- the original model's names ------------------------------------------------
 *
 * Every node of the float model is reported under its own name, resolved to
 * a node of the checked (quantized) graph, the first rule that applies:
 *   1. a checked node of the same name (passes keep names: canonicalize's
 *      Gemm -> linear -> Gemm, a Clip(0, 6) as relu6 -> Clip);
 *   2. checked nodes named "<name>_..." (a node a pass replaced or split
 *      names its pieces so: "<conv>_g0", "<mul>_hard_swish"), with the
 *      node of rule 1 when that one is now another op (the Concat of a
 *      split grouped Conv keeps its name): placed on the CPU if any piece
 *      is, its MACs their sum;
 *   3. a pass event on the node whose reason quotes another node ("folded
 *      into Conv 'c1'"): that node's placement, the reason as the note;
 *   4. a pass event on another node that quotes this one ("matmul + add
 *      'add' -> linear" on the MatMul): that node's placement;
 *   5. the nearest neighbour along data edges (the producer of its first
 *      activation input, else its first consumer) that resolves: a node a
 *      pass removed (Identity, Dropout) runs where its neighbour does.
 * A folded node has no MACs of its own (its neighbour's include them). */
typedef struct ck_map {
    const qf_ck *c;
    const qf_graph *orig;
    const qf_pass_event **ev;
    int nev;
    const qf_node **onode; /* original nodes by index */
    int *index;            /* original node id -> index */
    int *res;              /* checked index, -1 none */
    int *state;            /* 0 unvisited, 1 in progress, 2 done */
    char **note;
    int64_t *macs, *macs_padded;
} ck_map;

static int ck_map_resolve(ck_map *m, int k, int depth);

/* The checked index of the original node named `name`, or of a checked
 * node of that name. */
static int ck_map_name(ck_map *m, const char *name, int depth)
{
    const qf_node *o = qf_graph_find_node(m->orig, name);
    if (o) return ck_map_resolve(m, m->index[o->id], depth + 1);
    const qf_node *n = qf_graph_find_node(m->c->g, name);
    return n ? m->c->index[n->id] : -1;
}

/* Quoted names in a pass event's reason: calls fn on each until it returns >= 0. */
static int ck_map_quoted(ck_map *m, const char *reason, const char *self, int depth)
{
    char name[512];
    for (const char *p = reason ? strchr(reason, '\'') : NULL; p; p = strchr(p + 1, '\'')) {
        const char *e = strchr(p + 1, '\'');
        if (!e) break;
        size_t len = (size_t)(e - p - 1);
        if (len && len < sizeof name) {
            memcpy(name, p + 1, len);
            name[len] = '\0';
            if (strcmp(name, self) != 0) {
                int r = ck_map_name(m, name, depth);
                if (r >= 0) return r;
            }
        }
        p = e;
    }
    return -1;
}

static qf_status ck_map_note(ck_map *m, int k, const char *fmt, const char *a, const char *b)
{
    char buf[600];
    snprintf(buf, sizeof buf, fmt, a, b);
    m->note[k] = qf_strdup(buf);
    return m->note[k] ? QF_OK : QF_ERR_NOMEM;
}

static const qf_pass_event *ck_map_event(const ck_map *m, const char *name)
{
    const qf_pass_event *last = NULL;
    for (int e = 0; e < m->nev; e++)
        if (m->ev[e]->node && strcmp(m->ev[e]->node, name) == 0) last = m->ev[e];
    return last;
}

/* Whether checked node `piece` is a piece of original node `name`: named
 * "<name>_...", not an original node itself, nor a piece of a longer
 * original name ("/Conv_1_g0" is "/Conv_1"'s, not "/Conv"'s). */
static bool ck_piece_of(const qf_graph *orig, const char *name, const char *piece)
{
    if (!ck_piece(name, piece) || qf_graph_find_node(orig, piece)) return false;
    char buf[512];
    size_t len = strlen(name), plen = strlen(piece);
    if (plen >= sizeof buf) return true;
    for (size_t j = len + 1; j < plen; j++) {
        if (piece[j] != '_') continue;
        memcpy(buf, piece, j);
        buf[j] = '\0';
        if (qf_graph_find_node(orig, buf)) return false;
    }
    return true;
}

static int ck_map_resolve(ck_map *m, int k, int depth)
{
    if (m->state[k] == 2) return m->res[k];
    if (m->state[k] == 1 || depth > 16) return -1;
    m->state[k] = 1;
    const qf_ck *c = m->c;
    const qf_node *o = m->onode[k];
    const qf_node *n = qf_graph_find_node(c->g, o->name);
    const qf_pass_event *ev = ck_map_event(m, o->name);
    int r = -1;
    qf_status st = QF_OK;
    if (n) {
        r = c->index[n->id];
        m->macs[k] = c->macs[r];
        m->macs_padded[k] = c->macs_padded[r];
        /* the name kept by another op (a Mul as the HardSwish it became, a
         * MatMul + Add as one Gemm) */
        if (strcmp(qf_op_label(n), qf_op_label(o)) != 0) {
            if (ev)
                st = ck_map_note(m, k, "%s%s", ev->reason, "");
            else
                st = ck_map_note(m, k, "runs as %s '%s'", qf_op_label(n), n->name);
        }
    }
    /* 2. pieces named "<name>_...", also when a piece kept the name (a
     * grouped Conv split into "<conv>_split", "<conv>_g<k>" and the Concat
     * "<conv>"): on the CPU if any piece is, its MACs their sum */
    bool renamed = n && strcmp(qf_op_label(n), qf_op_label(o)) != 0;
    int pieces = 0, first = -1;
    for (int i = 0; (r < 0 || renamed) && i < c->n; i++) {
        const qf_node *p = c->node[i];
        if (c->kind[i] != CK_COMPUTE && c->kind[i] != CK_FUSED) continue;
        if (!ck_piece_of(m->orig, o->name, p->name)) continue;
        if (first < 0 || (ck_npu(c, first) && !ck_npu(c, i))) first = i;
        pieces++;
        m->macs[k] += c->macs[i];
        m->macs_padded[k] += c->macs_padded[i];
    }
    if (r >= 0 && first >= 0) {
        if (ck_npu(c, r) && !ck_npu(c, first)) r = first;
    } else if (r < 0 && first >= 0) {
        r = first;
        if (ev)
            st = ck_map_note(m, k, "%s%s", ev->reason, "");
        else if (pieces == 1)
            st = ck_map_note(m, k, "replaced by %s '%s'", qf_op_label(c->node[first]),
                             c->node[first]->name);
        else {
            char cnt[32];
            snprintf(cnt, sizeof cnt, "%d", pieces);
            st = ck_map_note(m, k, "replaced by %s nodes named '%s_...'", cnt, o->name);
        }
    }
    /* 3. its own event quotes the node it went into */
    if (r < 0 && ev && (r = ck_map_quoted(m, ev->reason, o->name, depth)) >= 0)
        st = ck_map_note(m, k, "%s%s", ev->reason, "");
    /* 4. another node's event quotes it */
    char quoted[600];
    snprintf(quoted, sizeof quoted, "'%s'", o->name);
    for (int e = 0; r < 0 && e < m->nev; e++) {
        const qf_pass_event *x = m->ev[e];
        if (!x->node || strcmp(x->node, o->name) == 0 || !x->reason || !strstr(x->reason, quoted))
            continue;
        if ((r = ck_map_name(m, x->node, depth)) >= 0)
            st =
                ck_map_note(m, k, "folded into %s '%s'", qf_op_label(c->node[r]), c->node[r]->name);
    }
    /* 5. the nearest neighbour */
    for (int s = 0; r < 0 && s < o->ninputs; s++) {
        const qf_value *v = o->inputs[s];
        if (v && v->producer) r = ck_map_resolve(m, m->index[v->producer->id], depth + 1);
    }
    for (int s = 0; r < 0 && s < o->noutputs; s++) {
        const qf_value *v = o->outputs[s];
        for (int u = 0; r < 0 && v && u < v->nuses; u++)
            r = ck_map_resolve(m, m->index[v->uses[u].node->id], depth + 1);
    }
    if (!n && !m->note[k] && st == QF_OK) {
        if (ev)
            st = ck_map_note(m, k, "%s%s", ev->reason, "");
        else if (r >= 0)
            st = ck_map_note(m, k, "removed by qfold's passes; placed with %s '%s'",
                             qf_op_label(c->node[r]), c->node[r]->name);
        else
            st = ck_map_note(m, k, "removed by qfold's passes%s%s", "", "");
    }
    m->res[k] = st == QF_OK ? r : -2;
    m->state[k] = 2;
    return m->res[k] == -2 ? -1 : r;
}

static void ck_map_events(ck_map *m, const qf_pass_report *rep, int *cap)
{
    for (int i = 0; rep && i < rep->nresults; i++)
        for (int e = 0; e < rep->results[i].nrewritten; e++) {
            if (m->nev == *cap) {
                const qf_pass_event **ev = qf_realloc(m->ev, (size_t)(*cap * 2 + 16) * sizeof *ev);
                if (!ev)
                    return; /* fewer events: fewer notes, the neighbour rule still places the node */
                m->ev = ev;
                *cap = *cap * 2 + 16;
            }
            m->ev[m->nev++] = &rep->results[i].rewritten[e];
        }
}

/* Whether original node o computes from constants only (an Identity of a
 * weight in a PyTorch export, a Constant): not counted, as in the QDQ case. */
static bool ck_orig_const(const qf_node *o, int depth)
{
    if (depth > 8) return false;
    for (int k = 0; k < o->ninputs; k++) {
        const qf_value *v = o->inputs[k];
        if (v && !qf_value_is_const(v) && !(v->producer && ck_orig_const(v->producer, depth + 1)))
            return false;
    }
    return true;
}

/* The original model's nodes, each placed through ck_map_resolve, with the
 * left-float reasons of the quantizer for the nodes it left in float. */
static qf_status ck_result_float(const qf_ck *c, const qf_graph *orig,
                                 const qf_quantize_model_result *res, qf_check_result *r)
{
    ck_map m = {.c = c, .orig = orig};
    size_t n = (size_t)orig->nnodes + 1;
    m.onode = qf_calloc(n, sizeof *m.onode);
    m.index = qf_calloc((size_t)orig->next_node_id + 1, sizeof *m.index);
    m.res = qf_calloc(n, sizeof *m.res);
    m.state = qf_calloc(n, sizeof *m.state);
    m.note = qf_calloc(n, sizeof *m.note);
    m.macs = qf_calloc(n, sizeof *m.macs);
    m.macs_padded = qf_calloc(n, sizeof *m.macs_padded);
    r->nodes = qf_arena_alloc(r->arena, n * sizeof *r->nodes);
    qf_status st = QF_OK;
    if (!m.onode || !m.index || !m.res || !m.state || !m.note || !m.macs || !m.macs_padded ||
        !r->nodes)
        st = QF_ERR_NOMEM;
    int cap = 0;
    if (st == QF_OK) {
        ck_map_events(&m, res->passes, &cap);
        ck_map_events(&m, res->quant.prepare, &cap);
        ck_map_events(&m, res->quant.convert, &cap);
        int k = 0;
        qf_graph_for_each_node(orig, o)
        {
            m.onode[k] = o;
            m.index[o->id] = k++;
        }
    }
    for (int k = 0; st == QF_OK && k < orig->nnodes; k++) {
        const qf_node *o = m.onode[k];
        int i = ck_map_resolve(&m, k, 0);
        qf_check_node *e = &r->nodes[k];
        if (m.res[k] == -2)
            st = QF_ERR_NOMEM;
        else if (i >= 0) {
            st = ck_fill(c, r, k, i, o->name, qf_op_label(o), m.note[k]);
            /* a node of the user's model: counted, unless a constant computation */
            e->qdq = ck_orig_const(o, 0) || c->kind[i] == CK_CONST;
            e->macs = m.macs[k];
            e->macs_padded = m.macs_padded[k];
        } else {
            /* nowhere in the checked graph (evaluated to a constant): runs nowhere */
            *e = (qf_check_node){.name = qf_arena_strdup(r->arena, o->name),
                                 .op = qf_arena_strdup(r->arena, qf_op_label(o)),
                                 .placement = QF_PLACE_NPU,
                                 .partition = -1,
                                 .note = ck_str(r, m.note[k])};
            if (!e->name || !e->op) st = QF_ERR_NOMEM;
        }
        r->nnodes = k + 1;
        /* a node the row would take but the quantizer left in float: the
         * quantizer's reason */
        bool unq = e->rule && strncmp(e->rule, "not quantized", 13) == 0;
        for (int f = 0; st == QF_OK && unq && f < res->quant.nleft_float; f++)
            if (strcmp(res->quant.left_float[f].name, o->name) == 0) {
                char buf[600];
                const char *why = res->quant.left_float[f].reason;
                if (strncmp(why, "the profile has no int8 form", 28) == 0)
                    /* a limit of qfold's quantizer, not of the NPU */
                    snprintf(buf, sizeof buf,
                             "left in float by the quantizer: qfold has no int8 %s (the NPU "
                             "takes only quantized ops)",
                             qf_op_label(o));
                else
                    snprintf(buf, sizeof buf, "left in float by the quantizer: %s", why);
                if (!(e->rule = ck_str(r, buf))) st = QF_ERR_NOMEM;
                /* not "quantize it": qfold's quantizer is what left it */
                e->fix = NULL;
            }
    }
    for (int k = 0; k < orig->nnodes && m.note; k++) qf_free(m.note[k]);
    qf_free(m.ev);
    qf_free(m.onode);
    qf_free(m.index);
    qf_free(m.res);
    qf_free(m.state);
    qf_free(m.note);
    qf_free(m.macs);
    qf_free(m.macs_padded);
    return st == QF_OK ? ck_summarize(c, r) : st;
}

/* --- entry points ------------------------------------------------------------ */

qf_status qf_target_check(const qf_graph *g, const qf_target_spec *t, qf_check_result *r)
{
    *r = (qf_check_result){.target = *t};
    r->arena = qf_calloc(1, sizeof *r->arena);
    if (!r->arena) return QF_ERR_NOMEM;
    qf_arena_init(r->arena);
    qf_ck c = {0};
    qf_status st;
    if (qf_graph_is_quantized(g)) {
        st = ck_run(&c, g, t);
        if (st == QF_OK) st = ck_result_qdq(&c, r);
    } else {
        qf_graph *q = NULL;
        qf_quantize_model_result res = {0};
        r->from_float = true;
        st = ck_quantize(g, t, &q, &res);
        if (st != QF_OK && st != QF_ERR_NOMEM)
            qf_error_prefix(st, "quantizing the float model to check it: ");
        if (st == QF_OK) st = ck_run(&c, q, t);
        if (st == QF_OK) st = ck_result_float(&c, g, &res, r);
        ck_free(&c);
        c = (qf_ck){0};
        qf_quantize_model_result_free(&res);
        qf_graph_free(q);
    }
    ck_free(&c);
    if (st != QF_OK) qf_check_result_free(r);
    return st;
}

void qf_check_result_free(qf_check_result *r)
{
    if (!r) return;
    if (r->arena) {
        qf_arena_free(r->arena);
        qf_free(r->arena);
    }
    *r = (qf_check_result){0};
}
