/* libFuzzer target: an ONNX model from arbitrary bytes, through everything a
 * hostile file can reach — import (decode, fold, infer, verify), binding of
 * unknown input dims, planning, one run on zero inputs, export and the
 * re-import of what export wrote.
 *
 * The contract checked: any input either works or fails with a status and a
 * non-empty message; no crash, no sanitizer report, no leak. Memory is capped
 * through the allocation hook (one piece at most FUZZ_MAX_ALLOC, all live
 * pieces at most FUZZ_MAX_LIVE): a plan that needs more fails as out of
 * memory, as it would on a small machine, instead of tripping libFuzzer's
 * malloc limit.
 *
 *   cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DQF_FUZZ=ON -DQF_BUILD_TESTS=OFF
 *   cmake --build build-fuzz -j2 --target fuzz_onnx
 *   build-fuzz/fuzz_onnx -max_len=65536 -timeout=10 fuzz/corpus/onnx   (see README.md)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qfold/exec.h"
#include "qfold/io.h"
#include "fuzz_common.h"

/* A bound dim of an input whose size the model leaves open. */
#define FUZZ_BIND_DIM 2

static char fuzz_out[96];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* Export writes through a temporary file + rename into this directory. */
    char dir[64];
    fuzz_setup("onnx", dir, sizeof dir);
    snprintf(fuzz_out, sizeof fuzz_out, "%s/out.onnx", dir);
    return 0;
}

static void fuzz_run(qf_graph *g)
{
    for (int i = 0; i < g->ninputs; i++) {
        qf_value *v = g->inputs[i];
        int64_t dims[QF_MAX_DIMS];
        for (int d = 0; d < v->type.ndim; d++) dims[d] = v->type.dims[d] < 0 ? FUZZ_BIND_DIM : v->type.dims[d];
        qf_status st = qf_graph_set_input_shape(g, i, v->type.ndim, dims);
        if (st != QF_OK) {
            fuzz_check_failed(st);
            return;
        }
    }
    qf_plan *p = NULL;
    qf_status st = qf_plan_init(&p, g);
    if (st != QF_OK) {
        fuzz_check_failed(st);
        return;
    }
    int n = g->ninputs;
    qf_tensor *xs = calloc((size_t)(n ? n : 1), sizeof *xs);
    const qf_tensor **xp = calloc((size_t)(n ? n : 1), sizeof *xp);
    int made = 0;
    st = xs && xp ? QF_OK : QF_ERR_NOMEM;
    for (; st == QF_OK && made < n; made++) {
        const qf_value *v = g->inputs[made];
        st = qf_tensor_init(&xs[made], v->type.dtype, v->type.ndim, v->type.dims);
        if (st != QF_OK) break;
        xp[made] = &xs[made];
    }
    if (st == QF_OK) st = qf_plan_run(p, xp, n);
    if (st == QF_OK) {
        /* Touch every output byte, so a kernel that left some unwritten shows up under MSan / valgrind. */
        volatile unsigned char sink = 0;
        for (int i = 0; i < qf_plan_num_outputs(p); i++) {
            const qf_tensor *y = qf_plan_output(p, i);
            size_t nb = qf_tensor_nbytes(y);
            for (size_t k = 0; k < nb; k++) sink ^= ((const unsigned char *)y->data)[k];
        }
        (void)sink;
    }
    fuzz_check_failed(st);
    for (int i = 0; i < made; i++) qf_tensor_free(&xs[i]);
    free(xs);
    free(xp);
    qf_plan_free(p);
}

static void fuzz_check_freed(void)
{
    if (fuzz_live == 0) return;
    fprintf(stderr, "%zu bytes still allocated through the hook after everything was freed\n", fuzz_live);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    qf_error_clear();
    qf_graph *g = NULL;
    /* No `what` prefix: a failure without its own message shows up. */
    qf_status st = qf_onnx_load_buffer(data, size, NULL, &g);
    if (st != QF_OK) {
        if (g) abort(); /* a failed load hands back nothing */
        fuzz_check_failed(st);
        fuzz_check_freed();
        return 0;
    }
    /* Export before running: the plan's binding changes input shapes. */
    st = qf_onnx_save(g, fuzz_out);
    fuzz_check_failed(st);
    if (st == QF_OK) {
        qf_graph *g2 = NULL;
        st = qf_onnx_load(fuzz_out, &g2);
        fuzz_check_failed(st);
        qf_graph_free(g2);
        unlink(fuzz_out);
    }
    fuzz_run(g);
    qf_graph_free(g);
    fuzz_check_freed();
    return 0;
}
