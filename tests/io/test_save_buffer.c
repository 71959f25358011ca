/* qf_onnx_save_buffer: the model as ONNX bytes in memory (for
 * qf_onnx_load_buffer, `qfold check`'s float path, the Python package).
 *
 *   test_save_buffer MODELS_DIR WORKDIR
 *
 * - same_bytes: for torch models of the ref_models fixture (plain CNN,
 *   linear lowered to MatMul with a transposed initializer, relu6 lowered to
 *   Clip, the ptq pipeline's folds) and a quantized one (QDQ, int8 and int32
 *   initializers), the buffer holds byte for byte the file qf_onnx_save
 *   writes; qf_onnx_load_buffer of it gives a graph whose own save is those
 *   bytes again (the round trip).
 * - deferred: resnet18 loaded with its weights left in the file
 *   (qf_onnx_load_options.defer) and folded (pending scales): the buffer is
 *   the file the eager load writes, the graph keeps its payloads deferred,
 *   and a second buffer is the same.
 * - too_big: a model over protobuf's 2 GiB is QF_ERR_UNSUPPORTED naming its
 *   size, *data NULL and *size 0 (its 2 GiB payload is allocated, never
 *   touched: refused before anything is packed or copied).
 * - no_memory: every allocation failing in turn: QF_ERR_NOMEM, nothing
 *   handed out, nothing leaked (the sanitizer build checks), then success.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io_test_files.h"
#include "qfold/io.h"
#include "qfold/pass.h"
#include "qfold/quant.h"
#include "tools/qf_check.h"

static const char *models_dir, *work_dir;

static qf_status run_ptq(qf_graph *g)
{
    qf_pass_report *r = NULL;
    qf_status st = qf_pipeline_run(g, "ptq", &(qf_pass_options){.verify = true}, &r);
    qf_pass_report_free(r);
    return st;
}

static int count_deferred(const qf_graph *g)
{
    int n = 0;
    for (int i = 0; i < g->nvalues; i++) n += g->values[i] && g->values[i]->deferred;
    return n;
}

/* The buffer of g against the file qf_onnx_save writes of it (`name` for
 * messages), then qf_onnx_load_buffer of it saved again: the same bytes. */
static void check_same(const char *name, const qf_graph *g)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.onnx", work_dir, name);
    CHECK_OK(qf_onnx_save(g, path));
    void *file = NULL, *buf = NULL, *again = NULL;
    size_t nfile = 0, nbuf = 0, nagain = 0;
    if (!read_bytes(path, &file, &nfile)) return;
    CHECK_OK(qf_onnx_save_buffer(g, &buf, &nbuf));
    CHECKF(buf && nbuf == nfile && memcmp(buf, file, nfile) == 0,
           "%s: the buffer (%zu bytes) is not the file qf_onnx_save writes (%zu bytes)", name, nbuf,
           nfile);
    qf_graph *back = NULL;
    if (buf) CHECK_OK(qf_onnx_load_buffer(buf, nbuf, name, &back));
    if (back) {
        CHECKF(back->ninputs == g->ninputs && back->noutputs == g->noutputs,
               "%s: the round trip has %d inputs / %d outputs, not %d / %d", name, back->ninputs,
               back->noutputs, g->ninputs, g->noutputs);
        CHECK_OK(qf_onnx_save_buffer(back, &again, &nagain));
        CHECKF(again && nagain == nbuf && memcmp(again, buf, nbuf) == 0,
               "%s: qf_onnx_load_buffer then qf_onnx_save_buffer gave other bytes (%zu for %zu)",
               name, nagain, nbuf);
        qf_graph_free(back);
    }
    qf_free(file);
    qf_free(buf);
    qf_free(again);
    remove(path);
}

static qf_graph *load_model(const char *name, bool defer)
{
    char in[4096];
    snprintf(in, sizeof in, "%s/%s.onnx", models_dir, name);
    qf_onnx_load_options o = {.defer = defer};
    qf_graph *g = NULL;
    qf_status st = qf_onnx_load_ex(in, &o, &g);
    if (st != QF_OK) FAIL("cannot load %s: %s", in, qf_error_message());
    return g;
}

static void same_bytes(void)
{
    static const char *const models[] = {"tiny_cnn", "linear_3d", "relu6", "hardswish",
                                         "mobilenet_v2"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        qf_graph *g = load_model(models[i], false);
        if (!g) continue;
        check_same(models[i], g);
        CHECK_OK(run_ptq(g));
        char name[256];
        snprintf(name, sizeof name, "%s.ptq", models[i]);
        check_same(name, g);
        qf_graph_free(g);
    }

    /* A QDQ model: the quantizer on the fixture's input. */
    qf_graph *g = load_model("tiny_cnn", false);
    if (!g) return;
    char npy[4096];
    snprintf(npy, sizeof npy, "%s/tiny_cnn.in0.npy", models_dir);
    qf_tensor x = {0};
    CHECK_OK(qf_quant_register_passes());
    if (qf_npy_load(npy, &x) != QF_OK) {
        FAIL("cannot load %s: %s", npy, qf_error_message());
        qf_graph_free(g);
        return;
    }
    const qf_tensor *xs[1] = {&x};
    qf_data_source src = qf_data_source_tensors(xs, 1);
    qf_quantize_model_options o = {.quantize = {.profile = qf_quant_profile_find("neutron")},
                                   .sqnr_samples = -1};
    qf_quantize_model_result r = {0};
    CHECK_OK(qf_quantize_model(g, &src, &o, &r));
    CHECK(qf_graph_is_quantized(g));
    check_same("tiny_cnn.qdq", g);
    qf_quantize_model_result_free(&r);
    qf_tensor_free(&x);
    qf_graph_free(g);
}

static void deferred(void)
{
    qf_graph *eager = load_model("resnet18", false), *g = load_model("resnet18", true);
    if (eager && g) {
        int n = count_deferred(g);
        CHECKF(n > 0, "resnet18: no weight was left in the file");
        CHECK_OK(run_ptq(eager));
        CHECK_OK(run_ptq(g));
        int scaled = 0;
        for (int i = 0; i < g->nvalues; i++)
            scaled += g->values[i] && g->values[i]->deferred && g->values[i]->deferred->scale;
        CHECKF(scaled > 0, "resnet18: no fold was left pending on a weight");
        char path[4096];
        snprintf(path, sizeof path, "%s/resnet18.eager.onnx", work_dir);
        CHECK_OK(qf_onnx_save(eager, path));
        void *file = NULL, *buf = NULL, *again = NULL;
        size_t nfile = 0, nbuf = 0, nagain = 0;
        if (read_bytes(path, &file, &nfile)) {
            CHECK_OK(qf_onnx_save_buffer(g, &buf, &nbuf));
            CHECKF(
                buf && nbuf == nfile && memcmp(buf, file, nfile) == 0,
                "resnet18: the buffer of the deferred load (%zu bytes) is not the eager file (%zu)",
                nbuf, nfile);
            CHECKF(count_deferred(g) == n,
                   "resnet18: the save loaded payloads (%d deferred, %d before)", count_deferred(g),
                   n);
            CHECK_OK(qf_onnx_save_buffer(g, &again, &nagain));
            CHECKF(again && nagain == nbuf && memcmp(again, buf, nbuf) == 0,
                   "resnet18: a second buffer of the deferred graph differs");
        }
        qf_free(file);
        qf_free(buf);
        qf_free(again);
        remove(path);
    }
    qf_graph_free(eager);
    qf_graph_free(g);
}

static void too_big(void)
{
    /* One float32 constant of 2^29 + 1 elements (2 GiB + 4 bytes) as the
     * graph's output: malloc'd and never written (no page of it is used). */
    qf_graph *g = NULL;
    REQUIRE_OK(qf_graph_init(&g));
    int64_t n = ((int64_t)1 << 29) + 1;
    qf_tensor t = {.dtype = QF_DTYPE_F32, .ndim = 1, .dims = {n}};
    t.data = qf_malloc((size_t)n * 4);
    t.owns = true; /* the graph frees it */
    if (!t.data) {
        qf_graph_free(g);
        printf("too_big: skipped (2 GiB of address space refused)\n");
        return;
    }
    qf_value *v = qf_graph_add_constant(g, "big", QF_VALUE_PARAMETER, &t);
    if (!v) qf_free(t.data);
    REQUIRE(v, "cannot add the constant");
    CHECK_OK(qf_graph_add_output(g, v));
    void *data = (void *)1;
    size_t size = 1;
    CHECK_ERR(qf_onnx_save_buffer(g, &data, &size), QF_ERR_UNSUPPORTED, "2 GiB");
    /* 2^31 + 4 bytes of payload and some framing. */
    const char *msg = qf_error_message(), *at = strstr(msg, "the model is ");
    unsigned long long named = 0;
    CHECKF(at && sscanf(at, "the model is %llu bytes", &named) == 1 && named > (size_t)n * 4 &&
               named < (size_t)n * 4 + 4096,
           "the message does not name the model's size: %s", msg);
    CHECKF(!data && size == 0, "a refused save handed out %p, %zu bytes", data, size);
    qf_graph_free(g);
}

/* An allocator that fails the k-th call (counting from 1) and every one
 * after it until reset. */
static long alloc_calls, alloc_fail_at;
static void *failing_alloc(void *ud, void *ptr, size_t n)
{
    (void)ud;
    if (n == 0) {
        free(ptr);
        return NULL;
    }
    if (++alloc_calls >= alloc_fail_at) return NULL;
    return realloc(ptr, n);
}

static void no_memory(void)
{
    qf_graph *g = load_model("linear_3d", false);
    if (!g) return;
    void *ref = NULL;
    size_t nref = 0;
    CHECK_OK(qf_onnx_save_buffer(g, &ref, &nref));
    int fails = 0;
    for (long k = 1; k < 10000; k++) {
        alloc_calls = 0;
        alloc_fail_at = k;
        void *data = NULL;
        size_t size = 0;
        qf_set_allocator(failing_alloc, NULL);
        qf_status st = qf_onnx_save_buffer(g, &data, &size);
        qf_set_allocator(NULL, NULL);
        if (st == QF_OK) {
            CHECKF(size == nref && memcmp(data, ref, nref) == 0,
                   "the save that got all its memory wrote other bytes");
            qf_free(data);
            break;
        }
        fails++;
        CHECKF(st == QF_ERR_NOMEM, "allocation %ld failing: status %s, not QF_ERR_NOMEM (%s)", k,
               qf_status_name(st), qf_error_message());
        CHECKF(!data && size == 0, "allocation %ld failing: %p, %zu bytes handed out", k, data,
               size);
    }
    CHECKF(fails > 3, "only %d allocations could fail", fails);
    qf_free(ref);
    qf_graph_free(g);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_save_buffer MODELS_DIR WORKDIR\n");
        return 2;
    }
    models_dir = argv[1];
    work_dir = argv[2];
    RUN(same_bytes);
    RUN(deferred);
    RUN(too_big);
    RUN(no_memory);
    return qf_check_report();
}
