/* Classification accuracy over a data source (qfold/exec.h, qf_classify):
 * the counting `qfold eval` prints, for any program. */
#include "qfold/exec.h"

typedef struct qf_classify_ctx {
    const char *path, *labels_path;
    const int64_t *labels;
    qf_classify_result *r;
} qf_classify_ctx;

static qf_status qf_classify_batch(void *ud, int64_t first, int64_t count, const qf_plan *plan)
{
    qf_classify_ctx *cx = ud;
    qf_classify_result *r = cx->r;
    const qf_tensor *y = qf_plan_output(plan, 0);
    if (y->dtype != QF_DTYPE_F32 || y->ndim != 2)
        return qf_error(QF_ERR_UNSUPPORTED,
                        "'%s': the first output is %s of rank %d; eval needs class scores "
                        "[batch, classes] in float32",
                        cx->path, qf_dtype_name(y->dtype), y->ndim);
    int64_t c = y->dims[1];
    if (r->classes == 0) r->classes = c;
    const float *s = y->data;
    for (int64_t b = 0; b < count; b++) {
        const float *row = s + b * c;
        int64_t label = cx->labels[first + b];
        if (label < 0 || label >= c)
            return qf_error(QF_ERR_INVALID,
                            "%s%s%slabel %lld of sample %lld is out of range: the model has %lld "
                            "classes",
                            cx->labels_path ? "labels '" : "",
                            cx->labels_path ? cx->labels_path : "", cx->labels_path ? "': " : "",
                            (long long)label, (long long)(first + b), (long long)c);
        /* Rank of the true class: how many scores beat it (ties go to the
         * lower index, as argmax). NaN scores never beat anything. */
        int64_t better = 0, best = 0;
        for (int64_t k = 0; k < c; k++) {
            if (row[k] > row[label] || (row[k] == row[label] && k < label)) better++;
            if (row[k] > row[best]) best = k;
        }
        r->pred[first + b] = (int32_t)best;
        r->top1 += better == 0;
        r->top5 += better < 5;
    }
    return QF_OK;
}

qf_status qf_classify(qf_graph *g, const qf_data_source *src, const int64_t *labels,
                      const qf_classify_options *opt, qf_classify_result *out)
{
    *out = (qf_classify_result){0};
    qf_classify_options o = opt ? *opt : (qf_classify_options){0};
    out->n = src->ninputs > 0 && src->inputs[0]->ndim >= 1 ? src->inputs[0]->dims[0] : 0;
    out->pred = qf_calloc((size_t)(out->n ? out->n : 1), sizeof *out->pred);
    if (!out->pred) return QF_ERR_NOMEM;
    if (g->noutputs < 1)
        return qf_error(QF_ERR_INVALID, "'%s' has no outputs",
                        o.model_name ? o.model_name : "the model");
    qf_classify_ctx cx = {.path = o.model_name ? o.model_name : "the model",
                          .labels_path = o.labels_name,
                          .labels = labels,
                          .r = out};
    qf_batch_options bo = {.batch = o.batch, .on_batch = qf_classify_batch, .ud = &cx};
    return qf_run_source(g, src, &bo);
}

void qf_classify_result_free(qf_classify_result *r)
{
    if (!r) return;
    qf_free(r->pred);
    *r = (qf_classify_result){0};
}
