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
 * The entry points are in check_model.c: a float model is first quantized as `qfold quantize
 * --target neutron` would (qf_quantize_model with the target's profile on one synthetic
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

#include "check_engine.h"

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

void ck_free(qf_ck *c)
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

qf_status ck_run(qf_ck *c, const qf_graph *g, const qf_target_spec *t)
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
bool ck_npu(const qf_ck *c, int i)
{
    int o = c->owner[i];
    return o >= 0 && c->part[o] >= 0;
}

/* --- the result ------------------------------------------------------------ */

const char *ck_str(qf_check_result *r, const char *s)
{
    return s && *s ? qf_arena_strdup(r->arena, s) : NULL;
}

/* Whether `piece` is named "<name>_...": a node a pass made of node `name`. */
bool ck_piece(const char *name, const char *piece)
{
    size_t len = strlen(name);
    return strncmp(piece, name, len) == 0 && piece[len] == '_';
}

/* Fill r->nodes[k] from node i of the checked graph (name and op given). */

qf_status ck_fill(const qf_ck *c, qf_check_result *r, int k, int i, const char *name, const char *op,
                  const char *note)
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
qf_status ck_summarize(const qf_ck *c, qf_check_result *r)
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

qf_status ck_result_qdq(const qf_ck *c, qf_check_result *r)
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
