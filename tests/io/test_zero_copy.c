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
 */
#include <stdint.h>
#include <string.h>

#include "qfold/io.h"
#include "qfold/pass.h"
#include "tools/qf_check.h"

static const char *models_dir, *work_dir;

/* --- helpers ------------------------------------------------------------------ */

static bool read_bytes(const char *path, void **data, size_t *size)
{
    qf_status st = qf_file_read(path, data, size);
    if (st != QF_OK) FAIL("cannot read %s: %s", path, qf_error_message());
    return st == QF_OK;
}

static bool same_file(const char *a, const char *b)
{
    void *da = NULL, *db = NULL;
    size_t na = 0, nb = 0;
    bool same = read_bytes(a, &da, &na) && read_bytes(b, &db, &nb) && na == nb && memcmp(da, db, na) == 0;
    qf_free(da);
    qf_free(db);
    return same;
}

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

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_zero_copy MODELS_DIR WORKDIR\n");
        return 2;
    }
    models_dir = argv[1];
    work_dir = argv[2];
    RUN(alignment);
    RUN(fold_equal);
    return qf_check_report();
}
