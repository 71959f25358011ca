/* qfold as a library: fuse -> quantize -> eval -> export, through the public
 * headers (include/qfold/) alone, writing what the CLI writes for the same
 * steps:
 *
 *   qfold fuse     MODEL -o OUT/fused.onnx
 *   qfold quantize OUT/fused.onnx -o OUT/quant.onnx --calib CALIB.npy   (target neutron)
 *   qfold eval     OUT/quant.onnx --data TEST.npy --labels LABELS.npy --json
 *   qfold export   OUT/quant.onnx -o OUT/quant.tflite
 *
 *   usage: qfold_pipeline MODEL.onnx CALIB.npy TEST.npy LABELS.npy OUTDIR
 *
 * Prints the eval figures as `qfold eval --json` does (the test compares the
 * two, and the three files byte for byte: tests/examples/pipeline_test.py).
 * Every file is written all or nothing (qf_outputs: a temporary name next
 * to it, renamed once written). The OpenMP environment oneDNN's threads run
 * best with is set before anything loads oneDNN, as the CLI does
 * (qf_engine_environment, qfold/exec.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qfold/exec.h"
#include "qfold/io.h"
#include "qfold/pass.h"
#include "qfold/quant.h"
#include "qfold/tflite.h"

#define PATH_LEN 4096

/* Write g to `path` all or nothing; `in` is the file it came from (never
 * overwritten). */
static qf_status save_model(const qf_graph *g, const char *path, const char *in)
{
    qf_outputs out;
    qf_outputs_init(&out);
    const char *tmp = NULL;
    qf_status st = qf_outputs_add(&out, "output", path);
    if (st == QF_OK) st = qf_outputs_input(&out, "the input model", in);
    if (st == QF_OK) st = qf_outputs_save_model(&out, 0, g, &tmp);
    if (st == QF_OK) st = qf_outputs_commit(&out);
    qf_outputs_free(&out);
    return st;
}

/* 1. Fold BatchNorm (the ptq pipeline, verified after every pass). */
static qf_status fuse(const char *model, const char *path)
{
    qf_graph *g = NULL;
    qf_pass_report *r = NULL;
    qf_onnx_load_options lo = {.defer = true}; /* big weights read when needed, as `qfold fuse` */
    QF_TRY(qf_onnx_load_ex(model, &lo, &g));
    qf_pass_options po = {.verify = true};
    qf_status st = qf_pipeline_run(g, "ptq", &po, &r);
    if (st == QF_OK) st = save_model(g, path, model);
    qf_pass_report_free(r);
    qf_graph_free(g);
    return st;
}

/* 2. Quantize for NXP's Neutron on the calibration samples (read a batch at
 * a time), then print what the recipe found. */
static qf_status quantize(const char *in, const char *calib, const char *path)
{
    qf_graph *g = NULL;
    qf_npy_file *f = NULL;
    qf_npy_source *src = NULL;
    qf_quantize_model_result r = {0};
    qf_status st = qf_onnx_load(in, &g);
    if (st == QF_OK) st = qf_npy_open(calib, &f);
    if (st == QF_OK) st = qf_npy_source_init(&src, &f, 1);
    qf_quantize_model_options o = {.quantize = {.profile = qf_quant_profile_find("neutron")},
                                   .name = in};
    if (st == QF_OK) st = qf_quantize_model(g, qf_npy_source_get(src), &o, &r);
    if (st == QF_OK) st = save_model(g, path, in);
    if (st == QF_OK)
        fprintf(stderr,
                "quantize: %lld samples, %d activations, %d weights; lowest SQNR %s %.1f dB\n",
                (long long)r.quant.samples, r.quant.stats.activations, r.quant.stats.weights,
                r.nsqnr ? r.sqnr[0].name : "-", r.nsqnr ? r.sqnr[0].sqnr_db : 0.0);
    qf_quantize_model_result_free(&r);
    qf_npy_source_free(src);
    qf_npy_close(f);
    qf_graph_free(g);
    return st;
}

/* 3. Top-1 / top-5 of the int8 model, its conv groups in integers with
 * TFLite's requantization (as `qfold eval` and `qfold run` run a QDQ model). */
static qf_status eval(const char *in, const char *data, const char *labels_path)
{
    qf_graph *g = NULL;
    qf_npy_file *f = NULL;
    qf_npy_source *src = NULL;
    qf_tensor lab = {0};
    int64_t *labels = NULL;
    qf_classify_result r = {0};
    qf_status st = qf_onnx_load(in, &g);
    if (st == QF_OK) st = qf_npy_open(data, &f);
    if (st == QF_OK) st = qf_npy_source_init(&src, &f, 1);
    if (st == QF_OK) st = qf_npy_load(labels_path, &lab);
    int64_t n = st == QF_OK ? qf_npy_info(f)->dims[0] : 0;
    if (st == QF_OK && (lab.ndim != 1 || lab.dims[0] != n))
        st = qf_error(QF_ERR_SHAPE, "labels '%s': expected [%lld]", labels_path, (long long)n);
    if (st == QF_OK && !(labels = malloc(sizeof *labels * (size_t)(n ? n : 1)))) st = QF_ERR_NOMEM;
    for (int64_t i = 0; st == QF_OK && i < n; i++) labels[i] = qf_tensor_get_i64(&lab, i);
    if (st == QF_OK) st = qf_quant_lower_int8(g, NULL, QF_REQUANT_FIXED_POINT, NULL);
    qf_classify_options co = {.batch = 64, .model_name = in, .labels_name = labels_path};
    if (st == QF_OK) st = qf_classify(g, qf_npy_source_get(src), labels, &co, &r);
    if (st == QF_OK) {
        /* As `qfold eval --json` prints them. */
        printf("{\"samples\": %lld, \"classes\": %lld, \"models\": [{\"model\": \"%s\", \"top1\": "
               "%.6f",
               (long long)r.n, (long long)r.classes, in, (double)r.top1 / (double)r.n);
        if (r.classes >= 5) printf(", \"top5\": %.6f", (double)r.top5 / (double)r.n);
        printf("}]}\n");
    }
    qf_classify_result_free(&r);
    free(labels);
    qf_tensor_free(&lab);
    qf_npy_source_free(src);
    qf_npy_close(f);
    qf_graph_free(g);
    return st;
}

/* 4. The int8 TFLite flatbuffer of the QDQ model. */
static qf_status export_tflite(const char *in, const char *path)
{
    qf_graph *g = NULL;
    qf_tflite_result r = {0};
    qf_outputs out;
    qf_outputs_init(&out);
    const char *tmp = NULL;
    qf_status st = qf_outputs_add(&out, "output", path);
    if (st == QF_OK) st = qf_outputs_input(&out, "the input model", in);
    if (st == QF_OK) st = qf_onnx_load(in, &g);
    qf_tflite_options o = {0};
    if (st == QF_OK) st = qf_tflite_export(g, &o, &r);
    if (st == QF_OK) st = qf_outputs_stage(&out, 0, &tmp);
    if (st == QF_OK) st = qf_file_write_atomic(tmp, r.data, r.size);
    if (st == QF_OK) st = qf_outputs_commit(&out);
    qf_outputs_free(&out);
    qf_tflite_result_free(&r);
    qf_graph_free(g);
    return st;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: qfold_pipeline MODEL.onnx CALIB.npy TEST.npy LABELS.npy OUTDIR\n");
        return 2;
    }
    const char *model = argv[1], *calib = argv[2], *test = argv[3], *labels = argv[4],
               *dir = argv[5];
    char fused[PATH_LEN], quant[PATH_LEN], tfl[PATH_LEN];
    snprintf(fused, sizeof fused, "%s/fused.onnx", dir);
    snprintf(quant, sizeof quant, "%s/quant.onnx", dir);
    snprintf(tfl, sizeof tfl, "%s/quant.tflite", dir);
    /* Before anything loads oneDNN: libgomp reads its environment once. */
    qf_engine_env env[QF_ENGINE_ENV_MAX];
    for (int k = 0, m = qf_engine_environment(env); k < m; k++)
        setenv(env[k].name, env[k].value, 0);
    qf_status st = fuse(model, fused);
    if (st == QF_OK) st = quantize(fused, calib, quant);
    if (st == QF_OK) st = eval(quant, test, labels);
    if (st == QF_OK) st = export_tflite(quant, tfl);
    if (st != QF_OK) {
        fprintf(stderr, "qfold_pipeline: %s\n", qf_error_message());
        return 1;
    }
    return 0;
}
