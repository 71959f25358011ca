/* Load an ONNX model with qfold and save it again: the import / export round
 * trip that tests/ref/roundtrip.py checks with onnx.checker and ONNX Runtime.
 *
 *   qf_roundtrip IN.onnx OUT.onnx
 *
 * Exit status 0 on success, 1 (with the message on stderr) on failure.
 */
#include <stdio.h>

#include "qfold/io.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: qf_roundtrip IN.onnx OUT.onnx\n");
        return 2;
    }
    qf_graph *g = NULL;
    qf_status st = qf_onnx_load(argv[1], &g);
    if (st == QF_OK) st = qf_onnx_save(g, argv[2]);
    qf_graph_free(g);
    if (st != QF_OK) {
        fprintf(stderr, "qf_roundtrip: %s: %s\n", qf_status_name(st), qf_error_message());
        return 1;
    }
    return 0;
}
