/* qf_target_check (qfold/target.h), whose engine is check.c: a QDQ model
 * is checked as it is; a float model is first quantized as `qfold quantize --target neutron` would, on one synthetic
 * sample, written as ONNX bytes in memory and read back (the check sees the
 * file `qfold quantize` writes: Gemm, not qfold's internal linear); then
 * every node of the original model reported under its own name
 * (ck_map_resolve). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_engine.h"
#include "qfold/io.h"
#include "qfold/pass.h"
#include "qfold/schema.h"

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

qf_status ck_quantize(const qf_graph *g, const qf_target_spec *t, qf_graph **out, qf_quantize_model_result *res)
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
qf_status ck_result_float(const qf_ck *c, const qf_graph *orig, const qf_quantize_model_result *res,
                          qf_check_result *r)
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
