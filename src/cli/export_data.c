/* qfold export --data X.npy [--count N]: the report's per-op max_lsb, the
 * largest difference between the integer reference (the QDQ model lowered
 * with TFLite's requantization: what the .tflite computes) and qfold's int8
 * run of the QDQ model as written (the simulation), measured on the data by
 * qf_quant_int8_diff. Ops are matched by their output tensor's name (the
 * ONNX value name); an op the QDQ graph has no int8 value for (a TRANSPOSE
 * or QUANTIZE the export adds, a float output) stays null. */
#include <math.h>
#include <stdio.h>

#include "cli.h"
#include "qfold/exec.h"
#include "qfold/io.h"
#include "qfold/quant.h"
#include "qfold/tflite.h"

qf_status qf_cli_export_lsb(const qf_graph *g, const qf_tflite_result *r, const char *const *data, int ndata,
                            int64_t count, double **max_lsb)
{
    *max_lsb = NULL;
    if (ndata != g->ninputs)
        return qf_error(QF_ERR_INVALID, "the model has %d input%s: give one --data per input, got %d", g->ninputs,
                        g->ninputs == 1 ? "" : "s", ndata);
    qf_npy_file *files[QF_CLI_EXPORT_MAX_DATA] = {0};
    qf_npy_source *src = NULL;
    const char **names = qf_calloc((size_t)r->nops + 1, sizeof *names);
    int32_t *lsb = qf_calloc((size_t)r->nops + 1, sizeof *lsb);
    double *out = qf_calloc((size_t)r->nops + 1, sizeof *out);
    qf_status st = names && lsb && out ? QF_OK : QF_ERR_NOMEM;
    for (int i = 0; i < ndata && st == QF_OK; i++) {
        st = qf_npy_open(data[i], &files[i]);
        if (st != QF_OK) {
            st = qf_error_prefix(st, "data '%s': ", data[i]);
            break;
        }
        const qf_tensor *t = qf_npy_info(files[i]), *t0 = qf_npy_info(files[0]);
        st = qf_data_check(g->inputs[i], t);
        if (st != QF_OK) st = qf_error_prefix(st, "data '%s': ", data[i]);
        if (st == QF_OK) st = qf_npy_check_finite("data", data[i], g->inputs[i], files[i]);
        if (st == QF_OK && t->dims[0] != t0->dims[0])
            st = qf_error(QF_ERR_SHAPE, "data '%s' holds %lld samples, '%s' %lld", data[i], (long long)t->dims[0],
                          data[0], (long long)t0->dims[0]);
    }
    if (st == QF_OK) st = qf_npy_source_init(&src, files, ndata);
    /* The reference kernels: the default engine computes the same integers,
     * but not under QFOLD_INT8=fast (oneDNN's int8 convs requantize in float
     * then, within 1 LSB of TFLite's fixed point, not equal to it). */
    if (st == QF_OK) st = qf_set_engine(QF_ENGINE_REF);
    for (int k = 0; k < r->nops && st == QF_OK; k++) names[k] = r->ops[k].output ? r->ops[k].output : "";
    if (st == QF_OK) st = qf_quant_int8_diff(g, qf_npy_source_get(src), count, r->nops, names, lsb);
    for (int k = 0; k < r->nops && st == QF_OK; k++) out[k] = lsb[k] < 0 ? NAN : (double)lsb[k];
    qf_npy_source_free(src);
    for (int i = 0; i < ndata; i++) qf_npy_close(files[i]);
    qf_free(names);
    qf_free(lsb);
    if (st != QF_OK) qf_free(out);
    else *max_lsb = out;
    return st;
}
