/* qf_verify_graphs (qfold/io.h): a rewritten model against the original
 * on the same inputs, the inputs the caller does not give synthesized.
 * `qfold fuse --verify`, `quantize --verify` and `finalize --verify` all
 * verify through it.
 *
 * Inputs come from the caller (fuse: --verify-data, per input NAME=X.npy,
 * or X.npy for a model with one input; quantize: calibration samples) or
 * are generated. A generated input's unknown dims
 * are sized from the model's constraints: a dim that shares its symbolic
 * name with a dim of a given array takes that array's size; the leading dim
 * (the batch) is 1; the others take one size S, the smallest of 1, 2, 4,
 * ..., 256 at which the model's shape inference and planning pass (a
 * pooling or convolution window needs S >= its size; the graph is planned,
 * not run, at each try). When no S works, or the model holds an op qfold
 * cannot run, the model cannot be verified: QF_ERR_MISMATCH (exit 1) with
 * a message that says what the caller should give (opt->hint: fuse's
 * "--verify-data X.npy").
 * Before that, the shapes the model declares for the values after its
 * inputs (value_info, outputs) size the unknown dims where they pin them
 * (see "sizes from the declared shapes" below); sizes that reproduce no
 * consistent set of them are an error too (exit 1, naming the hint).
 * It sits in io/ because the sizes come from what the ONNX file declares
 * (dim names, value_info: io/onnx_problems.h). */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "onnx_problems.h"
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

/* Inputs at size S in ts (the given ones copied, the others generated);
 * `sized` (NULL: none) holds the sizes the declared shapes asked for,
 * QF_MAX_DIMS per input, -1 where they say nothing. */
static qf_status qf_verify_make(const qf_graph *g, const qf_tensor *given, int64_t s, const int64_t *sized,
                                qf_tensor *ts)
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
            if (dims[d] < 0 && sized) dims[d] = sized[i * QF_MAX_DIMS + d];
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

/* --- sizes from the declared shapes -------------------------------------------
 *
 * An exporter often writes concrete shapes for intermediate values or the
 * outputs (value_info) while the inputs' dims are symbolic. Those pin the
 * unknown input dims: the sizes are chosen so that shape inference
 * reproduces every declared dim it leaves unknown at import ("pins").
 * The unknown dims are the variables (dims tied by name are one); each is
 * searched in turn, the others held, over the sizes 1, 2, 4 ... 256, the
 * declared dims themselves and, for each pin, the smallest size at which
 * it reaches its declared value (binary search up to QF_VERIFY_MAX_PINNED:
 * output sizes grow with input sizes), keeping the size that leaves the
 * fewest pins unmet; a few rounds, until every pin is met. One copy of the
 * graph is re-inferred at each try (nothing is planned or run). */

#define QF_VERIFY_MAX_PINNED 65536
#define QF_VERIFY_MAX_PINS 32   /* pinned dims searched for (the first, nearest the inputs) */
#define QF_VERIFY_MAX_EVALS 4000 /* shape inferences, at most */

typedef struct qf_verify_pin {
    const char *name; /* a value of g */
    int d;
    int64_t want;
    const qf_value *v; /* the value in the copy */
    int pos;           /* its producer's place in the copy's node list */
} qf_verify_pin;

typedef struct qf_verify_var {
    int input[QF_MAX_DIMS * 4], dim[QF_MAX_DIMS * 4]; /* the dims it sizes */
    int n;
    const char *name; /* NULL: an unnamed dim */
} qf_verify_var;

typedef struct qf_verify_solver {
    const qf_graph *g;
    const qf_tensor *given;
    qf_graph *c; /* the copy re-inferred at each try */
    qf_verify_pin *pins;
    int npins;
    qf_verify_var *vars;
    int nvars;
    int64_t *x; /* a size per variable */
    int evals;
    int failed_at; /* the last try's first node whose inference failed (INT_MAX: none) */
    struct qf_verify_saved {
        qf_value *v;
        int64_t dims[QF_MAX_DIMS];
    } *saved; /* the copy's inputs and node outputs as g has them, restored at each try */
    int nsaved;
    char miss[512]; /* the first pin unmet at the last try */
} qf_verify_solver;

/* The input shapes for sizes x into the copy, inferred node by node up to
 * the first that fails; the score: twice the pins unmet (a pin not reached
 * counts as unmet, one that shape inference leaves unknown does not), plus
 * one when inference failed. 0: every pin met. */
static int qf_verify_eval(qf_verify_solver *sv, const int64_t *x)
{
    const qf_graph *g = sv->g;
    sv->evals++;
    int k = 0, failed_at = INT_MAX;
    for (int m = 0; m < sv->nsaved; m++)
        memcpy(sv->saved[m].v->type.dims, sv->saved[m].dims, sizeof sv->saved[m].dims);
    for (int i = 0; i < g->ninputs; i++) {
        const qf_value *v = g->inputs[i];
        if (sv->given[i].data && sv->given[i].dtype == QF_DTYPE_I64) continue; /* bound */
        int64_t dims[QF_MAX_DIMS];
        for (int d = 0; d < v->type.ndim; d++)
            dims[d] = sv->given[i].data ? sv->given[i].dims[d] : v->type.dims[d];
        for (int j = 0; j < sv->nvars; j++)
            for (int m = 0; m < sv->vars[j].n; m++)
                if (sv->vars[j].input[m] == i) dims[sv->vars[j].dim[m]] = x[j];
        /* the shapes as g has them, then the input's (what set_input_shape
         * would do on g itself; the copy's input is concrete after a try) */
        qf_value *cv = sv->c->inputs[k++];
        for (int d = 0; d < v->type.ndim; d++) cv->type.dims[d] = dims[d];
    }
    char why[400] = "";
    int pos = 0;
    qf_graph_for_each_node(sv->c, n) {
        if (failed_at != INT_MAX) break;
        if (qf_node_infer(sv->c, n) != QF_OK) {
            failed_at = pos;
            snprintf(why, sizeof why, "%s", qf_error_message());
        }
        pos++;
    }
    int unmet = 0;
    sv->miss[0] = 0;
    for (int p = 0; p < sv->npins; p++) {
        const qf_verify_pin *pin = &sv->pins[p];
        if (pin->pos >= failed_at) {
            unmet++;
            continue;
        }
        int64_t got = pin->d < pin->v->type.ndim ? pin->v->type.dims[pin->d] : -1;
        if (got < 0 || got == pin->want) continue;
        if (!unmet++)
            snprintf(sv->miss, sizeof sv->miss, "value '%s' is declared with dim %d = %lld, shape inference gives %lld",
                     pin->name, pin->d, (long long)pin->want, (long long)got);
    }
    if (!sv->miss[0] && why[0]) snprintf(sv->miss, sizeof sv->miss, "%s", why);
    sv->failed_at = failed_at;
    return 2 * unmet + (failed_at != INT_MAX);
}

/* Pin p's dim at sizes x with variable j at xj: -1 when not inferred. */
static int64_t qf_verify_pin_at(qf_verify_solver *sv, int j, int64_t xj, int p)
{
    int64_t keep = sv->x[j];
    sv->x[j] = xj;
    (void)qf_verify_eval(sv, sv->x);
    sv->x[j] = keep;
    const qf_verify_pin *pin = &sv->pins[p];
    return sv->failed_at > pin->pos && pin->d < pin->v->type.ndim ? pin->v->type.dims[pin->d] : -1;
}

/* Try size xj for variable j: keep it when it leaves fewer pins unmet. */
static void qf_verify_consider(qf_verify_solver *sv, int j, int64_t xj, int *best)
{
    if (xj < 1 || xj == sv->x[j] || sv->evals >= QF_VERIFY_MAX_EVALS) return;
    int64_t keep = sv->x[j];
    sv->x[j] = xj;
    int r = qf_verify_eval(sv, sv->x);
    if (r < *best)
        *best = r;
    else
        sv->x[j] = keep;
}

static void qf_verify_search(qf_verify_solver *sv, int *best)
{
    for (int round = 0; round < 4 && *best; round++) {
        int before = *best;
        for (int j = 0; j < sv->nvars && *best; j++) {
            for (int64_t s = 1; s <= QF_VERIFY_MAX_SIZE; s *= 2) qf_verify_consider(sv, j, s, best);
            for (int p = 0; p < sv->npins && *best; p++) {
                qf_verify_consider(sv, j, sv->pins[p].want, best);
                /* the smallest size at which pin p reaches its value */
                int64_t hi = QF_VERIFY_MAX_PINNED, lo = 1;
                int64_t at_hi = qf_verify_pin_at(sv, j, hi, p);
                if (at_hi < sv->pins[p].want || qf_verify_pin_at(sv, j, lo, p) == at_hi) continue;
                while (lo < hi && sv->evals < QF_VERIFY_MAX_EVALS) {
                    int64_t mid = lo + (hi - lo) / 2;
                    if (qf_verify_pin_at(sv, j, mid, p) >= sv->pins[p].want)
                        hi = mid;
                    else
                        lo = mid + 1;
                }
                qf_verify_consider(sv, j, lo, best);
            }
        }
        if (*best >= before) break;
    }
    /* sv->miss for the sizes kept */
    *best = qf_verify_eval(sv, sv->x);
}

/* The unknown input dims (not sized by a given array) as variables, tied by
 * name. */
static qf_status qf_verify_vars(qf_verify_solver *sv)
{
    const qf_graph *g = sv->g;
    int cap = g->ninputs * QF_MAX_DIMS + 1;
    if (!(sv->vars = qf_calloc((size_t)cap, sizeof *sv->vars)) || !(sv->x = qf_calloc((size_t)cap, sizeof *sv->x)))
        return QF_ERR_NOMEM;
    for (int i = 0; i < g->ninputs; i++) {
        const qf_value *v = g->inputs[i];
        if (sv->given[i].data) continue;
        for (int d = 0; d < v->type.ndim; d++) {
            if (v->type.dims[d] >= 0) continue;
            const char *nm = qf_onnx_dim_name(g, v->name, v->type.ndim, d);
            bool fixed = false; /* named alike a dim of a given array */
            for (int k = 0; nm && k < g->ninputs; k++)
                for (int e = 0; sv->given[k].data && e < g->inputs[k]->type.ndim; e++) {
                    const char *o = qf_onnx_dim_name(g, g->inputs[k]->name, g->inputs[k]->type.ndim, e);
                    fixed = fixed || (o && strcmp(o, nm) == 0);
                }
            if (fixed) continue;
            int j = 0;
            while (j < sv->nvars && !(nm && sv->vars[j].name && strcmp(sv->vars[j].name, nm) == 0)) j++;
            qf_verify_var *var = &sv->vars[j];
            if (j == sv->nvars) {
                sv->nvars++;
                var->name = nm;
                sv->x[j] = 1;
            }
            if (var->n < QF_MAX_DIMS * 4) {
                var->input[var->n] = i;
                var->dim[var->n++] = d;
            }
        }
    }
    return QF_OK;
}

/* The pins: declared dims of values after the inputs that g's own shape
 * inference leaves unknown. */
static qf_status qf_verify_pins(qf_verify_solver *sv)
{
    const qf_graph *g = sv->g;
    if (!(sv->pins = qf_calloc(QF_VERIFY_MAX_PINS, sizeof *sv->pins))) return QF_ERR_NOMEM;
    qf_graph_for_each_node(g, n) {
        for (int o = 0; o < n->noutputs; o++) {
            const qf_value *v = n->outputs[o];
            int nd = 0;
            int64_t dims[QF_MAX_DIMS];
            if (!v || !qf_onnx_declared_shape(g, v->name, &nd, dims) || nd != v->type.ndim) continue;
            for (int d = 0; d < nd && sv->npins < QF_VERIFY_MAX_PINS; d++)
                if (dims[d] >= 0 && v->type.dims[d] < 0) sv->pins[sv->npins++] = (qf_verify_pin){v->name, d, dims[d]};
        }
    }
    return QF_OK;
}

/* Sizes for the unknown dims from the declared shapes: *found false when
 * the model declares none that depends on them (or when the sizes that meet
 * them all still fail shape inference further on: the fallback's sizes are
 * tried then); QF_ERR_MISMATCH when no
 * sizes reproduce them (the declared shapes contradict each other or the
 * graph). sized: QF_MAX_DIMS per input. */
static qf_status qf_verify_from_declared(const qf_graph *g, const qf_tensor *given, const char *hint, int64_t *sized,
                                         bool *found)
{
    qf_verify_solver sv = {.g = g, .given = given};
    *found = false;
    qf_status st = qf_verify_vars(&sv);
    if (st == QF_OK) st = qf_verify_pins(&sv);
    if (st == QF_OK && sv.nvars && sv.npins) st = qf_graph_clone(g, &sv.c);
    /* each pin's value in the copy, and its producer's place there */
    int kept = 0;
    for (int p = 0; st == QF_OK && sv.c && p < sv.npins; p++) {
        qf_verify_pin pin = sv.pins[p];
        pin.v = qf_graph_find_value(sv.c, pin.name);
        pin.pos = 0;
        qf_graph_for_each_node(sv.c, n) {
            if (pin.v && n == pin.v->producer) break;
            pin.pos++;
        }
        if (pin.v && pin.v->producer) sv.pins[kept++] = pin;
    }
    if (sv.c) sv.npins = kept;
    if (st == QF_OK && sv.c) {
        if (!(sv.saved = qf_calloc((size_t)sv.c->nvalues + 1, sizeof *sv.saved))) st = QF_ERR_NOMEM;
        for (int k = 0; st == QF_OK && k < sv.c->nvalues; k++) {
            qf_value *v = sv.c->values[k];
            if (!v || (!v->producer && v->kind != QF_VALUE_INPUT)) continue;
            sv.saved[sv.nsaved].v = v;
            memcpy(sv.saved[sv.nsaved++].dims, v->type.dims, sizeof v->type.dims);
        }
    }
    for (int i = g->ninputs - 1; st == QF_OK && sv.c && i >= 0; i--) {
        if (!given[i].data || given[i].dtype != QF_DTYPE_I64) continue;
        qf_tensor t;
        st = qf_tensor_copy(&t, &given[i]);
        if (st == QF_OK) st = qf_graph_bind_input(sv.c, i, &t);
        qf_tensor_free(&t);
    }
    if (st == QF_OK && sv.c) {
        *found = true;
        /* Start where shape inference passes: batch 1, the others the
         * smallest of 1, 2, 4 ... that infers (as the fallback sizes them). */
        int best = INT_MAX;
        int64_t start = 1;
        for (int64_t s = 1; s <= QF_VERIFY_MAX_SIZE; s *= 2) {
            for (int j = 0; j < sv.nvars; j++) sv.x[j] = sv.vars[j].dim[0] == 0 ? 1 : s;
            int r = qf_verify_eval(&sv, sv.x);
            if (r < best) best = r, start = s;
            if (!(r & 1)) break; /* inferred through */
        }
        for (int j = 0; j < sv.nvars; j++) sv.x[j] = sv.vars[j].dim[0] == 0 ? 1 : start;
        best = qf_verify_eval(&sv, sv.x);
        qf_verify_search(&sv, &best);
        if (best == 1) {
            /* every pin met, the graph fails further on at these sizes: the
             * fallback's sizes are tried as before */
            *found = false;
        } else if (best) {
            char shape[128] = "";
            size_t len = 0;
            for (int j = 0; j < sv.nvars && len < sizeof shape - 1; j++) {
                const qf_verify_var *var = &sv.vars[j];
                int w = var->name ? snprintf(shape + len, sizeof shape - len, "%s%s=%lld", j ? ", " : "", var->name,
                                             (long long)sv.x[j])
                                  : snprintf(shape + len, sizeof shape - len, "%s%s[%d]=%lld", j ? ", " : "",
                                             g->inputs[var->input[0]]->name, var->dim[0], (long long)sv.x[j]);
                if (w > 0) len += (size_t)w;
            }
            st = qf_error(QF_ERR_MISMATCH,
                          "cannot verify: no input sizes reproduce the shapes the model declares (value_info / "
                          "outputs contradict each other or the graph: %s at the closest sizes found, %s)%s%s",
                          sv.miss, shape, hint ? "; give the inputs with " : "", hint ? hint : "");
        }
        for (int j = 0; st == QF_OK && *found && j < sv.nvars; j++)
            for (int m = 0; m < sv.vars[j].n; m++) sized[sv.vars[j].input[m] * QF_MAX_DIMS + sv.vars[j].dim[m]] = sv.x[j];
    }
    qf_graph_free(sv.c);
    qf_free(sv.saved);
    qf_free(sv.pins);
    qf_free(sv.vars);
    qf_free(sv.x);
    return st;
}

/* The inputs for g: given (from --verify-data, .data NULL where not given)
 * and generated at the sizes the model's declared shapes pin, else at the
 * first size that plans. */
static qf_status qf_verify_inputs(const qf_graph *g, const qf_tensor *given, const char *who, const char *hint,
                                  qf_tensor *ts)
{
    int n = g->ninputs;
    bool search = qf_verify_has_unknown(g, given);
    char last[512] = "";
    int64_t *sized = qf_malloc(sizeof *sized * (size_t)(n * QF_MAX_DIMS + 1));
    if (!sized) return QF_ERR_NOMEM;
    for (int k = 0; k < n * QF_MAX_DIMS; k++) sized[k] = -1;
    bool declared = false;
    qf_status dst = search ? qf_verify_from_declared(g, given, hint, sized, &declared) : QF_OK;
    if (dst != QF_OK) {
        qf_free(sized);
        return dst;
    }
    if (declared) {
        /* the sizes the model declares: planned once, no other size tried */
        qf_status st = qf_verify_make(g, given, 1, sized, ts);
        if (st == QF_OK) st = qf_verify_try(g, ts);
        qf_free(sized);
        if (st == QF_OK) return QF_OK;
        for (int i = 0; i < n; i++) qf_tensor_free(&ts[i]);
        if (st == QF_ERR_NOMEM || st == QF_ERR_INTERRUPTED) return st;
        snprintf(last, sizeof last, "%s", qf_error_message());
        return qf_error(QF_ERR_MISMATCH,
                        "cannot verify: the %s model does not run at the input sizes its declared shapes pin "
                        "(%s)%s%s",
                        who, last, hint ? "; give the inputs with " : "", hint ? hint : "");
    }
    qf_free(sized);
    for (int64_t s = 1; s <= QF_VERIFY_MAX_SIZE; s *= 2) {
        qf_status st = qf_verify_make(g, given, s, NULL, ts);
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
                    "cannot verify: the %s model does not run on generated inputs%s (%s)%s%s", who,
                    search ? " at any size tried (unknown dims 1 to 256)" : "", last, hint ? "; give them with " : "",
                    hint ? hint : "");
}

qf_status qf_verify_graphs(qf_graph *ref, qf_graph *cand, const qf_tensor *given, const qf_verify_options *opt,
                           qf_compare_result *res)
{
    memset(res, 0, sizeof *res);
    res->worst = -1;
    qf_verify_options o = opt ? *opt : (qf_verify_options){0};
    int n = ref->ninputs;
    qf_tensor *none = given ? NULL : qf_calloc((size_t)n + 1, sizeof *none);
    qf_tensor *ts = qf_calloc((size_t)n + 1, sizeof *ts);
    const qf_tensor **tp = qf_calloc((size_t)n + 1, sizeof *tp);
    qf_status st = (!given && !none) || !ts || !tp ? QF_ERR_NOMEM : QF_OK;
    if (st == QF_OK) st = qf_verify_inputs(ref, given ? given : none, o.ref_name ? o.ref_name : "reference", o.hint, ts);
    if (st == QF_OK) {
        for (int i = 0; i < n; i++) tp[i] = &ts[i];
        qf_compare_options co = {.tolerance = o.tolerance, .ref_name = o.ref_name, .cand_name = o.cand_name,
                                 .change = o.change};
        st = qf_compare_graphs(ref, cand, tp, n, &co, res);
    }
    for (int i = 0; ts && i < n; i++) qf_tensor_free(&ts[i]);
    qf_free(none);
    qf_free(ts);
    qf_free(tp);
    return st;
}
