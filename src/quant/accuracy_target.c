/* An accuracy target (qfold/quant.h, qf_quantize_to_target): quantize, count
 * the int8 model's top-1 against the float model's on labelled data, and
 * while the drop exceeds the target try the recoveries in turn, then keep
 * the worst layers (by local SQNR) in float, one at a time. Each trial is a
 * whole qf_quantize_model on a copy of the model as loaded: nothing of one
 * trial leaks into the next but the choices kept. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/clock.h"
#include "qfold/exec.h"
#include "qfold/quant.h"

/* One candidate model: the graph, its recipe result, its top-1. */
typedef struct qf_tg_model {
    qf_graph *g;
    qf_quantize_model_result m;
    double top1;
} qf_tg_model;

static void qf_tg_model_free(qf_tg_model *c)
{
    qf_graph_free(c->g);
    qf_quantize_model_result_free(&c->m);
    memset(c, 0, sizeof *c);
}

static double qf_tg_pct(int64_t k, int64_t n) { return n ? 100.0 * (double)k / (double)n : 0.0; }

/* Top-1 (percent) of g, run as `qfold eval` runs it: a QDQ graph lowered to
 * its integer groups first (on a copy: g is kept as written). */
static qf_status qf_tg_top1(const qf_graph *g, bool lower, const qf_quant_target_options *opt, int64_t *n,
                            double *top1)
{
    qf_graph *c = NULL;
    QF_TRY(qf_graph_clone(g, &c));
    qf_status st = lower ? qf_quant_lower_int8(c, NULL, QF_REQUANT_FIXED_POINT, NULL) : QF_OK;
    qf_classify_result r = {0};
    if (st == QF_OK)
        st = qf_classify(c, opt->eval, opt->labels, &(qf_classify_options){.batch = opt->eval_batch ? opt->eval_batch : 64},
                         &r);
    if (st == QF_OK) {
        *n = r.n;
        *top1 = qf_tg_pct(r.top1, r.n);
    }
    qf_classify_result_free(&r);
    qf_graph_free(c);
    return st;
}

/* A trial: g0 quantized with profile p and exclude entries x. */
static qf_status qf_tg_run(const qf_graph *g0, const qf_data_source *calib, const qf_quant_target_options *opt,
                           const qf_quant_profile *p, char *const *x, int nx, qf_tg_model *c)
{
    memset(c, 0, sizeof *c);
    QF_TRY(qf_graph_clone(g0, &c->g));
    qf_quantize_model_options mo = opt->model;
    mo.quantize.profile = p;
    mo.quantize.exclude = (const char *const *)x;
    mo.quantize.nexclude = nx;
    int64_t n = 0;
    qf_status st = qf_quantize_model(c->g, calib, &mo, &c->m);
    if (st == QF_OK) st = qf_tg_top1(c->g, true, opt, &n, &c->top1);
    if (st != QF_OK) qf_tg_model_free(c);
    return st;
}

static qf_status qf_tg_push(qf_quant_target_result *t, const qf_quant_target_trial *tr,
                            const qf_quant_target_options *opt)
{
    qf_quant_target_trial *a = qf_realloc(t->trials, sizeof *a * (size_t)(t->ntrials + 1));
    if (!a) return qf_error(QF_ERR_NOMEM, "out of memory recording a trial");
    t->trials = a;
    a[t->ntrials] = *tr;
    if (opt->trial) opt->trial(opt->trial_ud, tr, t->ntrials);
    t->ntrials++;
    return QF_OK;
}

/* Whether the user's --set rules name key ("key=..."). */
static const char *qf_tg_user_set(const qf_quant_target_options *opt, const char *key)
{
    size_t k = strlen(key);
    for (int i = 0; i < opt->nsets; i++)
        if (opt->sets[i] && strncmp(opt->sets[i], key, k) == 0 && opt->sets[i][k] == '=') return opt->sets[i];
    return NULL;
}

static bool qf_tg_weighted(const qf_node *n)
{
    return n && (n->op == QF_OP_CONV || n->op == QF_OP_CONV_TRANSPOSE || n->op == QF_OP_GEMM || n->op == QF_OP_MATMUL);
}

/* The node that writes v's input 0 in g, looking through a BatchNormalization
 * (folded into the layer before it: not a node one can exclude). */
static const qf_node *qf_tg_before(const qf_node *n)
{
    const qf_node *p = n->ninputs > 0 && n->inputs[0] ? n->inputs[0]->producer : NULL;
    if (p && p->op == QF_OP_BATCH_NORM && p->ninputs > 0 && p->inputs[0]) p = p->inputs[0]->producer;
    return p;
}

/* The layer writing value `name` in g (the model as loaded): its node names
 * in l[0..*nl) (a Conv / Gemm with the activation fused after it, through a
 * folded BatchNormalization; a BatchNormalization's own output is its
 * layer's). false when no named node writes it. */
static bool qf_tg_layer(const qf_graph *g, const char *name, const char *l[2], int *nl)
{
    const qf_value *v = qf_graph_find_value(g, name);
    const qf_node *n = v ? v->producer : NULL;
    if (n && n->op == QF_OP_BATCH_NORM) n = qf_tg_before(n);
    if (!n || !n->name || !*n->name) return false;
    *nl = 0;
    const qf_node *w = qf_tg_before(n);
    bool act = n->op == QF_OP_RELU || n->op == QF_OP_RELU6 || n->op == QF_OP_CLIP;
    if (act && qf_tg_weighted(w) && w->name && *w->name) l[(*nl)++] = w->name;
    l[(*nl)++] = n->name;
    return true;
}

static bool qf_tg_has(char *const *x, int nx, const char *s)
{
    for (int i = 0; i < nx; i++)
        if (strcmp(x[i], s) == 0) return true;
    return false;
}

static void qf_tg_strings_free(char **x, int n)
{
    for (int i = 0; i < n; i++) qf_free(x[i]);
    qf_free(x);
}

/* x[0..n) and then add[0..nadd) (those not in it), copied. */
static qf_status qf_tg_strings_join(char *const *x, int n, const char *const *add, int nadd, char ***out, int *nout)
{
    char **y = qf_calloc((size_t)(n + nadd) + 1, sizeof *y);
    if (!y) return QF_ERR_NOMEM;
    int k = 0;
    for (int i = 0; i < n + nadd; i++) {
        const char *s = i < n ? x[i] : add[i - n];
        if (i >= n && qf_tg_has(y, k, s)) continue;
        if (!(y[k] = qf_strdup(s))) {
            qf_tg_strings_free(y, k);
            return QF_ERR_NOMEM;
        }
        k++;
    }
    *out = y;
    *nout = k;
    return QF_OK;
}

/* The next exclusion candidate of the model kept: the value with the lowest
 * finite local SQNR whose layer is not excluded already nor tried. */
static bool qf_tg_candidate(const qf_graph *g0, const qf_quantize_model_result *m, char *const *x, int nx,
                            char *const *tried, int ntried, const char *l[2], int *nl)
{
    int best = -1;
    const char *bl[2] = {0};
    int bn = 0;
    for (int i = 0; i < m->nsqnr; i++) {
        const qf_quant_sqnr *s = &m->sqnr[i];
        if (!isfinite(s->local_db) || (best >= 0 && s->local_db >= m->sqnr[best].local_db)) continue;
        const char *cl[2];
        int cn = 0;
        if (!qf_tg_layer(g0, s->name, cl, &cn)) continue;
        bool seen = false;
        for (int k = 0; k < cn; k++)
            seen = seen || qf_tg_has(x, nx, cl[k]) || qf_tg_has(tried, ntried, cl[k]);
        if (seen) continue;
        best = i;
        bn = cn;
        bl[0] = cl[0];
        bl[1] = cn > 1 ? cl[1] : NULL;
    }
    if (best < 0) return false;
    l[0] = bl[0];
    l[1] = bl[1];
    *nl = bn;
    return true;
}

static void qf_tg_decide(qf_quant_target_result *t, qf_quant_target_trial *tr, qf_tg_model *cur, qf_tg_model *cand)
{
    tr->top1 = cand->top1;
    tr->drop = t->float_top1 - cand->top1;
    tr->kept = cand->top1 > cur->top1;
    if (tr->kept) {
        qf_tg_model_free(cur);
        *cur = *cand;
        memset(cand, 0, sizeof *cand);
    } else {
        qf_tg_model_free(cand);
    }
}

qf_status qf_quantize_to_target(const qf_graph *g, const qf_data_source *calib, const qf_quant_target_options *opt,
                                qf_graph **out, qf_quantize_model_result *m, qf_quant_target_result *t)
{
    memset(t, 0, sizeof *t);
    memset(m, 0, sizeof *m);
    *out = NULL;
    if (!opt->eval || !opt->labels) return qf_error(QF_ERR_INVALID, "accuracy target: no eval data or labels");
    if (!(opt->max_drop >= 0.0) || !isfinite(opt->max_drop))
        return qf_error(QF_ERR_INVALID, "accuracy target: the top-1 drop must be a number >= 0, got %g", opt->max_drop);
    if (opt->max_excluded < 0)
        return qf_error(QF_ERR_INVALID, "accuracy target: at most %d exclusions: must be >= 0", opt->max_excluded);
    double t0 = qf_clock_seconds();
    t->max_drop = opt->max_drop;
    t->best = 0;
    const qf_quant_profile *p0 = opt->model.quantize.profile ? opt->model.quantize.profile : qf_quant_profile_find("neutron");
    t->profile = *p0;
    qf_status st = qf_tg_strings_join(NULL, 0, opt->model.quantize.exclude, opt->model.quantize.nexclude, &t->exclude,
                                      &t->nexclude);
    if (st != QF_OK) return qf_error(st, "out of memory");
    st = qf_tg_top1(g, false, opt, &t->samples, &t->float_top1);
    if (st != QF_OK) return st;

    qf_tg_model cur = {0}, cand = {0};
    qf_quant_target_trial tr = {.top1 = NAN, .drop = NAN};
    snprintf(tr.what, sizeof tr.what, "as asked");
    st = qf_tg_run(g, calib, opt, &t->profile, t->exclude, t->nexclude, &cur);
    if (st != QF_OK) return st;
    tr.top1 = cur.top1;
    tr.drop = t->float_top1 - cur.top1;
    tr.kept = true;
    st = qf_tg_push(t, &tr, opt);

    /* The recoveries, in turn. */
    static const struct {
        const char *key, *rule;
    } rec[] = {{"bias-correction", "bias-correction=auto"}, {"weight-rounding", "weight-rounding=adaround"}};
    for (size_t r = 0; st == QF_OK && r < sizeof rec / sizeof rec[0]; r++) {
        if (t->float_top1 - cur.top1 <= opt->max_drop) break;
        qf_quant_target_trial x = {.top1 = NAN, .drop = NAN};
        snprintf(x.what, sizeof x.what, "%s", rec[r].rule);
        const char *user = qf_tg_user_set(opt, rec[r].key);
        bool on = r == 0 ? t->profile.bias_correction != QF_QBIAS_OFF : t->profile.weight_rounding != QF_QROUND_NEAREST;
        if (user) x.skipped = "the user's --set stands";
        else if (on) x.skipped = "on already";
        if (!x.skipped) {
            qf_quant_profile p = t->profile;
            st = qf_quant_profile_set(&p, rec[r].rule);
            if (st == QF_OK) st = qf_tg_run(g, calib, opt, &p, t->exclude, t->nexclude, &cand);
            if (st != QF_OK) break;
            qf_tg_decide(t, &x, &cur, &cand);
            if (x.kept) {
                t->profile = p;
                t->best = t->ntrials;
            }
        }
        st = qf_tg_push(t, &x, opt);
    }

    /* Then the layers with the worst local SQNR, one at a time. */
    char **tried = NULL;
    int ntried = 0;
    for (int k = 0; st == QF_OK && k < opt->max_excluded; k++) {
        if (t->float_top1 - cur.top1 <= opt->max_drop) break;
        const char *l[2];
        int nl = 0;
        if (!qf_tg_candidate(g, &cur.m, t->exclude, t->nexclude, tried, ntried, l, &nl)) break;
        qf_quant_target_trial x = {.top1 = NAN, .drop = NAN};
        snprintf(x.what, sizeof x.what, "exclude %s%s%s", l[0], nl > 1 ? "," : "", nl > 1 ? l[1] : "");
        char **nt = NULL, **nx = NULL;
        int nnt = 0, nnx = 0;
        st = qf_tg_strings_join(tried, ntried, l, nl, &nt, &nnt);
        if (st == QF_OK) {
            qf_tg_strings_free(tried, ntried);
            tried = nt;
            ntried = nnt;
            st = qf_tg_strings_join(t->exclude, t->nexclude, l, nl, &nx, &nnx);
        }
        if (st != QF_OK) {
            st = qf_error(st, "out of memory");
            break;
        }
        st = qf_tg_run(g, calib, opt, &t->profile, nx, nnx, &cand);
        if (st != QF_OK) {
            qf_tg_strings_free(nx, nnx);
            break;
        }
        qf_tg_decide(t, &x, &cur, &cand);
        if (x.kept) {
            qf_tg_strings_free(t->exclude, t->nexclude);
            t->exclude = nx;
            t->nexclude = nnx;
            t->best = t->ntrials;
        } else {
            qf_tg_strings_free(nx, nnx);
        }
        st = qf_tg_push(t, &x, opt);
    }
    qf_tg_strings_free(tried, ntried);
    if (st != QF_OK) {
        qf_tg_model_free(&cur);
        qf_quant_target_result_free(t);
        return st;
    }
    t->met = t->float_top1 - cur.top1 <= opt->max_drop;
    t->ms = (qf_clock_seconds() - t0) * 1e3;
    *out = cur.g;
    *m = cur.m;
    return QF_OK;
}

void qf_quant_target_result_free(qf_quant_target_result *t)
{
    if (!t) return;
    qf_free(t->trials);
    qf_tg_strings_free(t->exclude, t->nexclude);
    memset(t, 0, sizeof *t);
}
