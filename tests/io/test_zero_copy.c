/* The zero-copy ONNX import: initializers borrow their bytes in the buffer
 * the model was read into (qf_tensor.writable) instead of being copied.
 *
 *   test_zero_copy MODELS_DIR WORKDIR
 *
 * - fold_equal: for torch models of the ref_models fixture, `fuse`'s ptq
 *   pipeline on the zero-copy load writes, byte for byte, the model that the
 *   same pipeline writes when every weight is an owned copy (what the
 *   copying importer made), and the input file is left untouched; saving
 *   over the input's own path works and leaves the graph intact.
 * - alignment: hand-made models whose raw_data payloads sit at every offset
 *   modulo 8, for float32, int64, float64 and int8, with and without room to
 *   move them into alignment: every constant comes back with its values and
 *   aligned for its dtype, borrowed where there was room, copied where not.
 * - discard: removing a borrowed weight hands its whole pages back and
 *   leaves the weights around it as they were.
 */
#include <stdint.h>
#include <string.h>

#include "qfold/io.h"
#include "qfold/pass.h"
#include "io_test_files.h"
#include "tools/qf_check.h"

static const char *models_dir, *work_dir;

/* --- helpers ------------------------------------------------------------------ */

static bool aligned(const qf_tensor *t)
{
    size_t es = qf_dtype_size(t->dtype);
    return es == 0 || (uintptr_t)t->data % es == 0;
}

/* Constants whose data is borrowed from the model buffer; every constant's
 * data is checked for alignment on the way. */
static int count_borrowed(const qf_graph *g, const char *model)
{
    int n = 0;
    for (int i = 0; i < g->nvalues; i++) {
        const qf_value *v = g->values[i];
        if (!v || !qf_value_is_const(v)) continue;
        CHECKF(aligned(&v->type), "%s: constant '%s' (%s) is not aligned", model, v->name,
               qf_dtype_name(v->type.dtype));
        CHECKF(!(v->type.owns && v->type.writable), "%s: '%s' both owns and borrows", model, v->name);
        n += !v->type.owns && v->type.writable;
    }
    return n;
}

/* Every constant an owned copy of itself, as the copying importer left them. */
static qf_status own_everything(qf_graph *g)
{
    for (int i = 0; i < g->nvalues; i++) {
        qf_value *v = g->values[i];
        if (!v || !qf_value_is_const(v) || v->type.owns) continue;
        qf_tensor t;
        QF_TRY(qf_tensor_copy(&t, &v->type));
        qf_value_set_data(v, &t);
    }
    return QF_OK;
}

static qf_status fuse_and_save(qf_graph *g, const char *out)
{
    qf_pass_report *r = NULL;
    qf_status st = qf_pipeline_run(g, "ptq", &(qf_pass_options){.verify = true}, &r);
    qf_pass_report_free(r);
    return st == QF_OK ? qf_onnx_save(g, out) : st;
}

/* --- fold_equal ---------------------------------------------------------------------- */

static void fold_equal_one(const char *name)
{
    char in[4096], ref[4096], zc[4096], same[4096], again[4096];
    snprintf(in, sizeof in, "%s/%s.onnx", models_dir, name);
    snprintf(ref, sizeof ref, "%s/%s.owned.onnx", work_dir, name);
    snprintf(zc, sizeof zc, "%s/%s.zero_copy.onnx", work_dir, name);
    snprintf(same, sizeof same, "%s/%s.same_path.onnx", work_dir, name);
    snprintf(again, sizeof again, "%s/%s.again.onnx", work_dir, name);
    void *before = NULL;
    size_t nbefore = 0;
    REQUIRE(read_bytes(in, &before, &nbefore), "%s", in);

    qf_graph *g = NULL;
    CHECK_OK(qf_onnx_load(in, &g));
    if (g) {
        CHECK_OK(own_everything(g));
        CHECK_OK(fuse_and_save(g, ref));
        qf_graph_free(g);
        g = NULL;
    }

    CHECK_OK(qf_onnx_load(in, &g));
    if (g) {
        CHECKF(count_borrowed(g, name) > 0, "%s: no initializer was borrowed", name);
        CHECK_OK(fuse_and_save(g, zc));
        qf_graph_free(g);
        g = NULL;
    }
    CHECKF(same_file(ref, zc), "%s: the fused zero-copy model differs from the copying one", name);

    void *after = NULL;
    size_t nafter = 0;
    if (read_bytes(in, &after, &nafter))
        CHECKF(nafter == nbefore && memcmp(before, after, nbefore) == 0, "%s: the input file changed", name);
    qf_free(after);

    /* Over its own path: the graph's weights live in its buffer, not in the
     * file, so the file can be replaced under it, and saved again. */
    CHECK_OK(qf_file_write_atomic(same, before, nbefore));
    CHECK_OK(qf_onnx_load(same, &g));
    if (g) {
        CHECK_OK(fuse_and_save(g, same));
        CHECK_OK(qf_onnx_save(g, again));
        qf_graph_free(g);
    }
    CHECKF(same_file(ref, same), "%s: saved over its own path, the model differs", name);
    CHECKF(same_file(ref, again), "%s: saved again after that, the model differs", name);
    qf_free(before);
    remove(ref);
    remove(zc);
    remove(same);
    remove(again);
}

static void fold_equal(void)
{
    static const char *const models[] = {"tiny_cnn", "conv1d_bn", "convtranspose_bn", "grouped_conv",
                                         "depthwise_conv", "linear_bn1d", "linear_3d", "resnet18",
                                         "mobilenet_v2"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) fold_equal_one(models[i]);
}

/* --- alignment: hand-made protobuf ----------------------------------------------------- */

typedef struct pb {
    uint8_t b[4096];
    size_t n;
} pb;

static void pb_varint(pb *p, uint64_t v)
{
    do {
        uint8_t c = v & 0x7f;
        v >>= 7;
        p->b[p->n++] = (uint8_t)(c | (v ? 0x80 : 0));
    } while (v);
}

static void pb_int(pb *p, unsigned field, uint64_t v)
{
    pb_varint(p, (uint64_t)field << 3);
    pb_varint(p, v);
}

static void pb_bytes(pb *p, unsigned field, const void *data, size_t len)
{
    pb_varint(p, (uint64_t)field << 3 | 2);
    pb_varint(p, len);
    memcpy(p->b + p->n, data, len);
    p->n += len;
}

static void pb_msg(pb *p, unsigned field, const pb *m) { pb_bytes(p, field, m->b, m->n); }

/* A TensorProto of `count` elements (values 1, 2, 3, ... in dtype dt) named
 * `name`; raw_data first (2 bytes of key and length before the payload: no
 * room to align it) or, as every exporter writes it, last. */
static void tensor_proto(pb *t, const char *name, qf_dtype dt, int count, bool raw_first)
{
    uint8_t raw[8 * 16];
    size_t es = qf_dtype_size(dt);
    for (int i = 0; i < count; i++) {
        double v = i + 1;
        switch (dt) {
        case QF_DTYPE_F32: { float f = (float)v; memcpy(raw + i * es, &f, es); break; }
        case QF_DTYPE_F64: memcpy(raw + i * es, &v, es); break;
        case QF_DTYPE_I64: { int64_t k = i + 1; memcpy(raw + i * es, &k, es); break; }
        default: raw[i] = (uint8_t)(i + 1); break;
        }
    }
    t->n = 0;
    if (raw_first) pb_bytes(t, 9, raw, (size_t)count * es);
    pb_int(t, 1, (uint64_t)count);    /* dims */
    pb_int(t, 2, (uint64_t)dt);       /* data_type */
    pb_bytes(t, 8, name, strlen(name));
    if (!raw_first) pb_bytes(t, 9, raw, (size_t)count * es);
}

/* A model whose outputs are its initializers (one per dtype), after a
 * producer_name of `pad` bytes that moves every payload by that much. */
static void model_proto(pb *m, size_t pad, bool raw_first)
{
    static const qf_dtype dts[] = {QF_DTYPE_F32, QF_DTYPE_I64, QF_DTYPE_F64, QF_DTYPE_I8};
    static const char *const names[] = {"w_f32", "w_i64", "w_f64", "w_i8"};
    pb g = {.n = 0};
    pb_bytes(&g, 2, "g", 1); /* name */
    for (int k = 0; k < 4; k++) {
        pb t;
        tensor_proto(&t, names[k], dts[k], 5 + k, raw_first);
        pb_msg(&g, 5, &t); /* initializer */
    }
    for (int k = 0; k < 4; k++) {
        pb dim = {.n = 0}, shape = {.n = 0}, tt = {.n = 0}, ty = {.n = 0}, vi = {.n = 0};
        pb_int(&dim, 1, (uint64_t)(5 + k));      /* dim_value */
        pb_msg(&shape, 1, &dim);                 /* dim */
        pb_int(&tt, 1, (uint64_t)dts[k]);        /* elem_type */
        pb_msg(&tt, 2, &shape);                  /* shape */
        pb_msg(&ty, 1, &tt);                     /* tensor_type */
        pb_bytes(&vi, 1, names[k], strlen(names[k]));
        pb_msg(&vi, 2, &ty);
        pb_msg(&g, 12, &vi); /* output */
    }
    char padding[16];
    memset(padding, 'p', sizeof padding);
    pb op = {.n = 0};
    pb_int(&op, 2, 13); /* opset version 13, default domain */
    m->n = 0;
    pb_int(m, 1, 8); /* ir_version */
    pb_bytes(m, 2, padding, pad); /* producer_name */
    pb_msg(m, 7, &g);
    pb_msg(m, 8, &op);
}

static void alignment(void)
{
    for (int raw_first = 0; raw_first < 2; raw_first++) {
        int borrowed = 0, copied = 0;
        for (size_t pad = 1; pad <= 8; pad++) {
            pb m;
            model_proto(&m, pad, raw_first);
            qf_graph *g = NULL;
            CHECK_OK(qf_onnx_load_buffer(m.b, m.n, "hand-made", &g));
            if (!g) continue;
            for (int i = 0; i < g->noutputs; i++) {
                const qf_value *v = g->outputs[i];
                REQUIRE(qf_value_is_const(v), "output '%s' is not a constant", v->name);
                CHECKF(aligned(&v->type), "pad %zu: '%s' is not aligned", pad, v->name);
                int64_t n = qf_tensor_numel(&v->type);
                CHECKF(n == 5 + i, "pad %zu: '%s' has %lld elements", pad, v->name, (long long)n);
                for (int64_t k = 0; k < n; k++)
                    CHECKF(qf_tensor_get_f64(&v->type, k) == (double)(k + 1), "pad %zu: '%s'[%lld] = %g",
                           pad, v->name, (long long)k, qf_tensor_get_f64(&v->type, k));
                borrowed += !v->type.owns && v->type.writable;
                copied += v->type.owns;
            }
            qf_graph_free(g);
        }
        /* Exporter order: always room (dims, data_type and name come first).
         * raw_data first: 2 bytes of room, so some payloads must be copied. */
        if (!raw_first) {
            CHECKF(borrowed == 32 && copied == 0, "exporter order: %d borrowed, %d copied", borrowed, copied);
        } else {
            CHECKF(borrowed > 0 && copied > 0 && borrowed + copied == 32, "raw_data first: %d borrowed, %d copied",
                   borrowed, copied);
        }
    }
}

/* --- discard: a removed borrowed weight's pages go back, its neighbours stay ------ */

/* A model of `count` float32 initializers of `elems` elements each (values
 * k * 1000 + i), the first one the graph's output, the others unused. */
static void big_model(uint8_t *out, size_t cap, size_t *size, int count, int elems)
{
    size_t es = sizeof(float), nb = (size_t)elems * es;
    uint8_t *raw = qf_malloc(nb);
    pb *t = qf_malloc(sizeof *t);
    uint8_t *g = qf_malloc(cap);
    size_t gn = 0;
    REQUIRE(raw && t && g, "out of memory");
    pb tail = {.n = 0};
    pb_bytes(&tail, 2, "g", 1);
    memcpy(g, tail.b, tail.n);
    gn = tail.n;
    for (int k = 0; k < count; k++) {
        for (int i = 0; i < elems; i++) {
            float f = (float)(k * 1000 + i % 1000);
            memcpy(raw + (size_t)i * es, &f, es);
        }
        char name[16];
        snprintf(name, sizeof name, "big%d", k);
        /* TensorProto: dims, data_type, name, raw_data (the exporter order). */
        t->n = 0;
        pb_int(t, 1, (uint64_t)elems);
        pb_int(t, 2, QF_DTYPE_F32);
        pb_bytes(t, 8, name, strlen(name));
        pb_varint(t, 9 << 3 | 2);
        pb_varint(t, nb);
        /* key + length of the initializer field, the header, the payload */
        pb hdr = {.n = 0};
        pb_varint(&hdr, 5 << 3 | 2);
        pb_varint(&hdr, t->n + nb);
        REQUIRE(gn + hdr.n + t->n + nb < cap - 512, "model too big");
        memcpy(g + gn, hdr.b, hdr.n), gn += hdr.n;
        memcpy(g + gn, t->b, t->n), gn += t->n;
        memcpy(g + gn, raw, nb), gn += nb;
    }
    pb dim = {.n = 0}, shape = {.n = 0}, tt = {.n = 0}, ty = {.n = 0}, vi = {.n = 0}, outp = {.n = 0};
    pb_int(&dim, 1, (uint64_t)elems);
    pb_msg(&shape, 1, &dim);
    pb_int(&tt, 1, QF_DTYPE_F32);
    pb_msg(&tt, 2, &shape);
    pb_msg(&ty, 1, &tt);
    pb_bytes(&vi, 1, "big0", 4);
    pb_msg(&vi, 2, &ty);
    pb_msg(&outp, 12, &vi);
    memcpy(g + gn, outp.b, outp.n), gn += outp.n;
    pb m = {.n = 0}, op = {.n = 0};
    pb_int(&op, 2, 13);
    pb_int(&m, 1, 8);
    pb_varint(&m, 7 << 3 | 2);
    pb_varint(&m, gn);
    memcpy(out, m.b, m.n);
    memcpy(out + m.n, g, gn);
    size_t n = m.n + gn;
    pb tailm = {.n = 0};
    pb_msg(&tailm, 8, &op);
    memcpy(out + n, tailm.b, tailm.n);
    *size = n + tailm.n;
    qf_free(raw);
    qf_free(t);
    qf_free(g);
}

static void discard(void)
{
    enum { COUNT = 6, ELEMS = 5000 }; /* 20 KB each: several whole pages */
    size_t cap = (size_t)COUNT * ELEMS * 4 + 4096, size = 0;
    uint8_t *bytes = qf_malloc(cap);
    REQUIRE(bytes, "out of memory");
    big_model(bytes, cap, &size, COUNT, ELEMS);
    qf_graph *g = NULL;
    CHECK_OK(qf_onnx_load_buffer(bytes, size, "big", &g));
    qf_free(bytes);
    REQUIRE(g, "load failed");
    qf_value *v[COUNT];
    for (int k = 0; k < COUNT; k++) {
        char name[16];
        snprintf(name, sizeof name, "big%d", k);
        v[k] = qf_graph_find_value(g, name);
        REQUIRE(v[k] && qf_value_is_const(v[k]), "%s is missing", name);
        CHECKF(!v[k]->type.owns && v[k]->type.writable, "%s is not borrowed", name);
    }
    /* Remove every other one (not the output): the neighbours' bytes, some
     * on pages the removed ones partly cover, must be unchanged. */
    const float *removed = v[3]->type.data;
    for (int k = 1; k < COUNT; k += 2) qf_graph_remove_value(g, v[k]);
    for (int k = 0; k < COUNT; k += 2) {
        const float *d = v[k]->type.data;
        int bad = 0;
        for (int i = 0; i < ELEMS; i++) bad += d[i] != (float)(k * 1000 + i % 1000);
        CHECKF(bad == 0, "big%d: %d values changed after its neighbours were removed", k, bad);
    }
#if defined(__linux__)
    /* The removed slice's whole pages were handed back: they read as zeros
     * (Linux: private anonymous memory after MADV_DONTNEED); the bytes at its
     * ends share pages with neighbours and keep their values. */
    int zeros = 0;
    for (int i = 0; i < ELEMS; i++) zeros += removed[i] == 0.0f;
    CHECKF(zeros >= ELEMS / 2, "big3: %d of %d values read as zero after removal", zeros, ELEMS);
#else
    (void)removed;
#endif
    qf_graph_free(g);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_zero_copy MODELS_DIR WORKDIR\n");
        return 2;
    }
    models_dir = argv[1];
    work_dir = argv[2];
    RUN(alignment);
    RUN(discard);
    RUN(fold_equal);
    return qf_check_report();
}
