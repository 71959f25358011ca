/* qfold eval MODEL.onnx --data X.npy --labels Y.npy [--batch B] [--compare OTHER.onnx] */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/strbuf.h"
#include "qfold/exec.h"
#include "qfold/io.h"
#include "qfold/quant.h"

#define QF_EVAL_MAX_DATA 16

typedef struct qf_eval_args {
    const char *model, *compare, *labels;
    const char *data[QF_EVAL_MAX_DATA];
    int ndata;
    int64_t batch;
    bool json;
    bool simulate; /* QDQ models: Q / DQ as written (else integer conv groups, as `run`) */
    bool onnx_requant; /* --requant onnx: the integer groups requantize as ONNX Runtime's kernels */
} qf_eval_args;

/* One model's results. */
typedef struct qf_eval_result {
    const char *path;
    int64_t n, classes;
    int64_t top1, top5;
    int32_t *pred;      /* top-1 class per sample */
    const int64_t *labels;
    const char *labels_path; /* the labels file, for messages (NULL: not named) */
} qf_eval_result;

/* The labels as int64 [N] (int64, int32 or uint8 .npy, [N] or [N, 1]); also
 * `quantize --eval-labels`'s. */
qf_status qf_cli_labels(const char *path, int64_t n, qf_tensor *t, int64_t **out)
{
    QF_TRY(qf_npy_load(path, t));
    int64_t count = t->ndim >= 1 ? t->dims[0] : 0;
    bool shape_ok = (t->ndim == 1 || (t->ndim == 2 && t->dims[1] == 1));
    bool dtype_ok = t->dtype == QF_DTYPE_I64 || t->dtype == QF_DTYPE_I32 || t->dtype == QF_DTYPE_U8;
    if (!dtype_ok)
        return qf_error(QF_ERR_INVALID, "labels '%s': dtype %s, expected int64, int32 or uint8 class indices", path,
                        qf_dtype_name(t->dtype));
    if (!shape_ok || count != n) {
        char got[128];
        return qf_error(QF_ERR_SHAPE, "labels '%s': shape %s, expected [%lld] (one label per sample of the data)",
                        path, qf_shape_str(t->ndim, t->dims, got, sizeof got), (long long)n);
    }
    int64_t *l = qf_malloc(sizeof *l * (size_t)n);
    if (!l) return QF_ERR_NOMEM;
    for (int64_t i = 0; i < n; i++) l[i] = qf_tensor_get_i64(t, i);
    *out = l;
    return QF_OK;
}

/* The data files against model g's inputs (named in the error with the
 * file), scanned for NaN / Inf once (for the first model). */
static qf_status qf_eval_check_data(const qf_eval_args *ea, const char *path, const qf_graph *g,
                                    qf_npy_file *const *files, bool scan)
{
    if (ea->ndata != g->ninputs)
        return qf_error(QF_ERR_INVALID, "'%s' has %d input%s: give one --data per input, got %d", path, g->ninputs,
                        g->ninputs == 1 ? "" : "s", ea->ndata);
    for (int i = 0; i < ea->ndata; i++) {
        const qf_tensor *t = qf_npy_info(files[i]), *t0 = qf_npy_info(files[0]);
        qf_status st = qf_data_check(g->inputs[i], t);
        if (st != QF_OK) return qf_error_prefix(st, "data '%s': ", ea->data[i]);
        if (t->dims[0] != t0->dims[0])
            return qf_error(QF_ERR_SHAPE, "data '%s' holds %lld samples, '%s' %lld", ea->data[i],
                            (long long)t->dims[0], ea->data[0], (long long)t0->dims[0]);
        if (scan) QF_TRY(qf_npy_check_finite("data", ea->data[i], g->inputs[i], files[i]));
    }
    return QF_OK;
}

/* Model i (0: MODEL, 1: --compare): load, check the data against it, (for
 * the first) read the labels, run it over the data. */
static qf_status qf_eval_model(const qf_eval_args *ea, int i, qf_npy_file *const *files, const qf_data_source *src,
                               qf_tensor *lab, int64_t **labels, qf_eval_result *r)
{
    const char *path = i ? ea->compare : ea->model;
    qf_graph *g = NULL;
    QF_TRY(qf_onnx_load(path, &g));
    r->path = path;
    qf_status st = qf_eval_check_data(ea, path, g, files, i == 0);
    if (st == QF_OK && i == 0) st = qf_cli_labels(ea->labels, r->n, lab, labels);
    r->labels = *labels;
    if (st == QF_OK && g->noutputs < 1) st = qf_error(QF_ERR_INVALID, "'%s' has no outputs", path);
    /* A QDQ model is evaluated as `qfold run` runs it: its conv groups in
     * integers (TFLite's requantization, or ONNX's with --requant onnx),
     * unless --simulate. */
    if (st == QF_OK && !ea->simulate)
        st = qf_quant_lower_int8(g, NULL, ea->onnx_requant ? QF_REQUANT_ONNX : QF_REQUANT_FIXED_POINT, NULL);
    /* The counting is the library's (qf_classify). */
    qf_classify_options co = {.batch = ea->batch, .model_name = path, .labels_name = r->labels_path};
    qf_classify_result cr = {0};
    if (st == QF_OK) {
        st = qf_classify(g, src, r->labels, &co, &cr);
        if (st != QF_OK && !strstr(qf_error_message(), path)) qf_error_prefix(st, "'%s': ", path);
        r->classes = cr.classes;
        r->top1 = cr.top1;
        r->top5 = cr.top5;
        r->pred = cr.pred; /* owned by r now */
    }
    qf_graph_free(g);
    return st;
}

qf_status qf_cli_top1(qf_graph *g, const qf_data_source *src, const int64_t *labels, int64_t batch, int64_t *top1)
{
    qf_classify_result r;
    qf_status st = qf_classify(g, src, labels, &(qf_classify_options){.batch = batch}, &r);
    *top1 = r.top1;
    qf_classify_result_free(&r);
    return st;
}

static double pct(int64_t k, int64_t n) { return n ? 100.0 * (double)k / (double)n : 0.0; }

static qf_status qf_eval_print(const qf_eval_args *ea, const qf_eval_result *r, int nr)
{
    bool top5 = r[0].classes >= 5;
    int64_t agree = 0;
    if (nr == 2)
        for (int64_t i = 0; i < r[0].n; i++) agree += r[0].pred[i] == r[1].pred[i];
    if (ea->json) {
        qf_strbuf b = {0};
        qf_strbuf_printf(&b, "{\"samples\": %lld, \"classes\": %lld, \"models\": [",
                         (long long)r[0].n, (long long)r[0].classes);
        for (int i = 0; i < nr; i++) {
            qf_strbuf_printf(&b, "%s{\"model\": ", i ? ", " : "");
            qf_strbuf_json_string(&b, r[i].path);
            qf_strbuf_printf(&b, ", \"top1\": %.6f", pct(r[i].top1, r[i].n) / 100.0);
            if (top5) qf_strbuf_printf(&b, ", \"top5\": %.6f", pct(r[i].top5, r[i].n) / 100.0);
            qf_strbuf_puts(&b, "}");
        }
        qf_strbuf_puts(&b, "]");
        if (nr == 2) qf_strbuf_printf(&b, ", \"top1_agreement\": %.6f", pct(agree, r[0].n) / 100.0);
        qf_strbuf_puts(&b, "}\n");
        char *text = qf_strbuf_take(&b, NULL);
        if (!text) return qf_error(QF_ERR_NOMEM, "out of memory writing the JSON");
        fputs(text, stdout);
        qf_free(text);
        return QF_OK;
    }
    char num[64];
    printf("samples  %s, %lld classes\n", qf_cli_thousands(r[0].n, num, sizeof num), (long long)r[0].classes);
    size_t w = 5;
    for (int i = 0; i < nr; i++) w = strlen(r[i].path) > w ? strlen(r[i].path) : w;
    printf("%-*s  %8s%s\n", (int)w, "model", "top-1", top5 ? "     top-5" : "");
    for (int i = 0; i < nr; i++) {
        printf("%-*s  %6.2f %%", (int)w, r[i].path, pct(r[i].top1, r[i].n));
        if (top5) printf("  %6.2f %%", pct(r[i].top5, r[i].n));
        printf("\n");
    }
    if (nr == 2) printf("top-1 agreement  %.2f %% (%lld of %lld samples)\n", pct(agree, r[0].n), (long long)agree,
                        (long long)r[0].n);
    return QF_OK;
}

static int qf_eval_parse(int argc, char **argv, qf_eval_args *ea)
{
    const char *v;
    qf_cli_args a = qf_cli_args_begin(&qf_cli_cmd_eval, argc, argv);
    while (qf_cli_args_next(&a)) {
        if (qf_cli_args_value(&a, "--data", NULL, &v)) {
            if (a.failed) break;
            if (ea->ndata == QF_EVAL_MAX_DATA) return qf_cli_usage_error(a.cmd, "more than %d --data", QF_EVAL_MAX_DATA);
            ea->data[ea->ndata++] = v;
        } else if (qf_cli_args_value(&a, "--labels", NULL, &v)) {
            ea->labels = v;
        } else if (qf_cli_args_value(&a, "--compare", NULL, &v)) {
            ea->compare = v;
        } else if (qf_cli_args_value(&a, "--batch", NULL, &v)) {
            char *end = NULL;
            long long b = a.failed ? 0 : strtoll(v, &end, 10);
            if (!a.failed && (!*v || *end || b < 1 || b > 1 << 20))
                return qf_cli_value_error(a.cmd, "--batch takes a number from 1 to %d, got '%s'", 1 << 20, v);
            ea->batch = b;
        } else if (qf_cli_args_flag(&a, "--json", NULL)) {
            ea->json = true;
        } else if (qf_cli_args_flag(&a, "--simulate", NULL)) {
            ea->simulate = true;
        } else if (qf_cli_args_value(&a, "--requant", NULL, &v)) {
            if (a.failed) break;
            if (strcmp(v, "tflite") == 0) ea->onnx_requant = false;
            else if (strcmp(v, "onnx") == 0) ea->onnx_requant = true;
            else return qf_cli_value_error(a.cmd, "--requant takes tflite or onnx, got '%s'", v);
        } else if (!ea->model && qf_cli_args_positional(&a, &v)) {
            ea->model = v;
        } else {
            return qf_cli_args_unknown(&a);
        }
    }
    if (a.failed) return QF_EXIT_USAGE;
    if (!ea->model) return qf_cli_usage_error(a.cmd, "no model given");
    if (!ea->ndata) return qf_cli_usage_error(a.cmd, "no data given (--data X.npy)");
    if (!ea->labels) return qf_cli_usage_error(a.cmd, "no labels given (--labels Y.npy)");
    return QF_EXIT_OK;
}

static int qf_cli_eval(int argc, char **argv)
{
    qf_eval_args ea = {.batch = 64};
    int rc = qf_eval_parse(argc, argv, &ea);
    if (rc != QF_EXIT_OK) return rc;
    qf_npy_file *files[QF_EVAL_MAX_DATA] = {0};
    qf_npy_source *src = NULL;
    qf_tensor lab = {0};
    qf_eval_result r[2] = {{0}};
    int64_t *labels = NULL;
    qf_status st = QF_OK;
    /* The data is read a batch at a time (never whole in memory). */
    for (int i = 0; i < ea.ndata && st == QF_OK; i++) {
        st = qf_npy_open(ea.data[i], &files[i]);
        if (st != QF_OK) qf_error_prefix(st, "data '%s': ", ea.data[i]);
    }
    const qf_tensor *t0 = st == QF_OK ? qf_npy_info(files[0]) : NULL;
    int64_t n = t0 && t0->ndim >= 1 ? t0->dims[0] : 0;
    if (st == QF_OK && n < 1) st = qf_error(QF_ERR_SHAPE, "data '%s' holds no samples", ea.data[0]);
    if (st == QF_OK) st = qf_npy_source_init(&src, files, ea.ndata);
    int nr = ea.compare ? 2 : 1;
    for (int i = 0; i < nr && st == QF_OK; i++) {
        r[i].n = n;
        r[i].labels_path = ea.labels;
        st = qf_eval_model(&ea, i, files, qf_npy_source_get(src), &lab, &labels, &r[i]);
    }
    if (st == QF_OK && nr == 2 && r[0].classes != r[1].classes)
        st = qf_error(QF_ERR_SHAPE, "'%s' has %lld classes, '%s' %lld", ea.model, (long long)r[0].classes, ea.compare,
                      (long long)r[1].classes);
    if (st == QF_OK) st = qf_eval_print(&ea, r, nr);
    if (st != QF_OK) rc = qf_cli_fail(st);
    qf_npy_source_free(src);
    for (int i = 0; i < ea.ndata; i++) qf_npy_close(files[i]);
    qf_tensor_free(&lab);
    qf_free(labels);
    qf_free(r[0].pred);
    qf_free(r[1].pred);
    return rc;
}

const qf_cli_command qf_cli_cmd_eval = {
    .name = "eval",
    .summary = "classification accuracy (top-1, top-5) of a model on a labelled data set",
    .usage = "qfold eval MODEL.onnx --data X.npy --labels Y.npy [--batch B] [--compare OTHER.onnx] [--json]\n"
             "                  [--simulate | --requant tflite|onnx]",
    .details =
        "The model's first output holds class scores [batch, classes]; the predicted class\n"
        "is the highest score.\n\n"
        "options:\n"
        "  --data FILE       .npy with every sample of the next graph input, the batch first\n"
        "                    ([N, ...input dims]); one --data per graph input, in order\n"
        "  --labels FILE     .npy of N class indices (int64, int32 or uint8)\n"
        "  --batch B         samples per run (default 64; a model with a fixed batch size\n"
        "                    runs that size)\n"
        "  --compare OTHER   evaluate OTHER.onnx on the same data too: both accuracies side by\n"
        "                    side and how often their top-1 predictions agree\n"
        "  --json            print the figures as one JSON object\n"
        "  --simulate        a quantized (QDQ) model in float simulation, Q / DQ as written\n"
        "                    (default: its conv groups in integers, as `qfold run`)\n"
        "  --requant KIND    those integer groups' requantization, as `qfold run`'s: tflite\n"
        "                    (default: TFLite's fixed point, as an int8 NPU computes it) or onnx\n"
        "                    (float scale, round half to even, as ONNX Runtime's integer kernels)\n",
    .fn = qf_cli_eval,
};
