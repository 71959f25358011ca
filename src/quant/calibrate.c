/* Calibration state: an observer per shared-qparams group. */
#include <string.h>

#include "qfold/quant.h"

struct qf_quant_calib {
    const qf_graph *g;
    qf_quant_annotation *a;
    int nvalues;
    qf_observer **obs;   /* by group root value id; NULL elsewhere */
    qf_qparams *qp;      /* by value id: a fixed group's root from init, every member after finish */
    bool *has_qp;
    bool *fixed;         /* by group root: the group has fixed qparams (no observer) */
    float *lo, *hi;      /* by group root, after finish: the observed range the qparams come from */
    bool finished;
    bool per_channel;    /* an observer is per channel (it needs NCHW tensors) */
};

static bool is_activation_spec(qf_qspec_kind k)
{
    return k == QF_QSPEC_OBSERVE || k == QF_QSPEC_SHARE || k == QF_QSPEC_FIXED;
}

void qf_quant_calib_free(qf_quant_calib *c)
{
    if (!c) return;
    for (int i = 0; c->obs && i < c->nvalues; i++) qf_observer_free(c->obs[i]);
    qf_free(c->obs);
    qf_free(c->qp);
    qf_free(c->has_qp);
    qf_free(c->fixed);
    qf_free(c->lo);
    qf_free(c->hi);
    qf_free(c);
}

/* The observer of value v's group, or NULL (fixed group, not quantized). */
static qf_observer *group_observer(const qf_quant_calib *c, uint32_t v)
{
    return c->obs[qf_quant_group(c->a, v)];
}

qf_status qf_quant_calib_init(qf_quant_calib **out, const qf_graph *g, qf_quant_annotation *a,
                              const qf_quant_profile *p)
{
    *out = NULL;
    qf_quant_calib *c = qf_calloc(1, sizeof *c);
    if (!c) return QF_ERR_NOMEM;
    c->g = g;
    c->a = a;
    c->nvalues = a->nvalues;
    size_t nv = (size_t)(a->nvalues ? a->nvalues : 1);
    c->obs = qf_calloc(nv, sizeof *c->obs);
    c->qp = qf_calloc(nv, sizeof *c->qp);
    c->has_qp = qf_calloc(nv, sizeof *c->has_qp);
    c->fixed = qf_calloc(nv, sizeof *c->fixed);
    c->lo = qf_calloc(nv, sizeof *c->lo);
    c->hi = qf_calloc(nv, sizeof *c->hi);
    if (!c->obs || !c->qp || !c->has_qp || !c->fixed || !c->lo || !c->hi) {
        qf_quant_calib_free(c);
        return QF_ERR_NOMEM;
    }
    /* A group with a fixed member has its qparams (annotation gives a group
     * at most one); every other group one observer. */
    bool *fixed = c->fixed;
    for (int i = 0; i < a->nvalues; i++)
        if (a->spec[i].kind == QF_QSPEC_FIXED) {
            uint32_t r = qf_quant_group(a, (uint32_t)i);
            fixed[r] = true;
            c->qp[r] = a->spec[i].fixed;
        }
    qf_status st = QF_OK;
    for (int i = 0; i < a->nvalues && st == QF_OK; i++) {
        const qf_qspec *s = &a->spec[i];
        if (!is_activation_spec(s->kind)) continue;
        uint32_t r = qf_quant_group(a, (uint32_t)i);
        if (fixed[r] || c->obs[r]) continue;
        qf_observer_config oc = qf_observer_config_default(s->format.observer);
        oc.scheme = s->format.scheme;
        oc.qmin = s->format.qmin;
        oc.qmax = s->format.qmax;
        oc.eps = p->min_scale;
        c->per_channel |= oc.kind == QF_OBSERVER_PER_CHANNEL;
        st = qf_observer_init(&c->obs[r], &oc);
    }
    /* Observed constants are seen once, now. */
    for (int i = 0; i < a->nvalues && st == QF_OK; i++) {
        const qf_value *v = g->values[i];
        if (v && is_activation_spec(a->spec[i].kind) && qf_value_is_const(v)) {
            qf_observer *o = group_observer(c, (uint32_t)i);
            if (o) st = qf_observer_update(o, &v->type);
            if (st != QF_OK) qf_error_prefix(st, "constant '%s': ", v->name);
        }
    }
    if (st != QF_OK) {
        qf_quant_calib_free(c);
        return st;
    }
    *out = c;
    return QF_OK;
}

bool qf_quant_calib_wants(const qf_quant_calib *c, uint32_t v)
{
    if (v >= (uint32_t)c->nvalues || !is_activation_spec(c->a->spec[v].kind)) return false;
    const qf_value *val = c->g->values[v];
    return val && !qf_value_is_const(val) && group_observer(c, v) != NULL;
}

qf_status qf_quant_calib_observe(qf_quant_calib *c, uint32_t v, const qf_tensor *t)
{
    if (!qf_quant_calib_wants(c, v)) return QF_OK;
    qf_status st = qf_observer_update(group_observer(c, v), t);
    if (st != QF_OK) return qf_error_prefix(st, "value '%s': ", c->g->values[v]->name);
    return QF_OK;
}

bool qf_quant_calib_order_free(const qf_quant_calib *c)
{
    return !c->per_channel;
}

qf_status qf_quant_calib_finish(qf_quant_calib *c)
{
    const qf_quant_annotation *a = c->a;
    for (int i = 0; i < a->nvalues; i++) {
        const qf_qspec *s = &a->spec[i];
        if (!is_activation_spec(s->kind)) continue;
        uint32_t r = qf_quant_group(c->a, (uint32_t)i);
        /* Once per group (the histogram's range search is not cheap): into
         * the root's entry, then copied to each member. */
        if (!c->fixed[r] && !c->has_qp[r]) {
            if (!qf_observer_seen(c->obs[r]))
                return qf_error(QF_ERR_INVALID, "value '%s': calibration saw no data for it", c->g->values[i]->name);
            QF_TRY(qf_observer_result(c->obs[r], &c->qp[r], &c->lo[r], &c->hi[r], 1));
            c->has_qp[r] = true;
        }
        c->qp[i] = c->qp[r];
        c->has_qp[i] = true;
    }
    c->finished = true;
    return QF_OK;
}

const qf_qparams *qf_quant_calib_qparams(const qf_quant_calib *c, uint32_t v)
{
    if (!c->finished || v >= (uint32_t)c->nvalues || !c->has_qp[v]) return NULL;
    return &c->qp[v];
}

qf_status qf_quant_calib_range(const qf_quant_calib *c, uint32_t v, float *min, float *max)
{
    if (!c->finished || v >= (uint32_t)c->nvalues || !c->has_qp[v])
        return qf_error(QF_ERR_INVALID, "value %u has no calibrated range", v);
    /* a fixed group observed nothing: 0, 0 */
    uint32_t r = qf_quant_group(c->a, v);
    *min = c->lo[r];
    *max = c->hi[r];
    return QF_OK;
}
