/* The model file of `quantize`, `qat` and `finalize`: ONNX, or TFLite when
 * the output's name ends in ".tflite" (the library's qf_tflite_save, the
 * same call as `qfold export`, default options: int8 inputs and outputs). */
#include <string.h>

#include "cli.h"
#include "qfold/io.h"
#include "qfold/tflite.h"

bool qf_cli_is_tflite(const char *path)
{
    size_t n = path ? strlen(path) : 0;
    return n >= 7 && strcmp(path + n - 7, ".tflite") == 0;
}

qf_status qf_cli_save_model(const struct qf_graph *g, const char *path, const char *tmp)
{
    if (!qf_cli_is_tflite(path)) return qf_onnx_save(g, tmp);
    qf_tflite_result r;
    qf_status st = qf_tflite_save(g, tmp, NULL, &r);
    if (st == QF_OK) qf_tflite_report_print(&r, stderr);
    qf_tflite_result_free(&r);
    return st;
}
