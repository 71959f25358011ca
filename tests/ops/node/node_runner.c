/* Runs ONNX backend node tests through qfold and compares with the expected
 * outputs.
 *
 *   node_runner MANIFEST.txt       (one test directory per line)
 *   node_runner TEST_DIR...
 *
 * Each test directory holds model.onnx, qf_meta.txt (input / output names in
 * order, written by gen_node_tests.py) and test_data_set_0/{input,output}_<j>.pb.
 * int64 and bool inputs, and any input that feeds a shape operand of an op
 * (Range's start / limit / delta), are bound as constants (shape-like
 * operands must be constant for qfold's static shapes); the others set the
 * input shapes.
 * Floats compare as onnx's backend does (|got - want| <= atol + rtol |want|,
 * rtol 1e-3, atol 1e-7); integers and bools exactly. One line per test, then
 * "N passed, M failed"; exit status 1 if any failed or none ran.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qfold/exec.h"
#include "qfold/io.h"
#include "qfold/schema.h"

#define NR_MAX_IO 16
#define NR_RTOL 1e-3
#define NR_ATOL 1e-7

typedef struct nr_meta {
    int nin, nout;
    char in[NR_MAX_IO][256];
    char out[NR_MAX_IO][256];
} nr_meta;

static int nr_read_meta(const char *dir, nr_meta *m, char *err, size_t errsz)
{
    char path[4096], kind[16], name[256];
    int j;
    snprintf(path, sizeof path, "%s/qf_meta.txt", dir);
    FILE *f = fopen(path, "r");
    memset(m, 0, sizeof *m);
    if (!f) {
        snprintf(err, errsz, "cannot open %.1500s", path);
        return -1;
    }
    while (fscanf(f, "%15s %d %255s", kind, &j, name) == 3) {
        if (j < 0 || j >= NR_MAX_IO) continue;
        if (strcmp(kind, "input") == 0) {
            snprintf(m->in[j], sizeof m->in[j], "%s", name);
            if (j + 1 > m->nin) m->nin = j + 1;
        } else if (strcmp(kind, "output") == 0) {
            snprintf(m->out[j], sizeof m->out[j], "%s", name);
            if (j + 1 > m->nout) m->nout = j + 1;
        }
    }
    fclose(f);
    return 0;
}

/* Whether graph input v is read by some node as a shape operand. */
static bool nr_feeds_shape(const qf_value *v)
{
    for (int u = 0; u < v->nuses; u++) {
        const qf_use *use = &v->uses[u];
        if (qf_op_input_role(use->node->op, use->slot) == QF_ROLE_SHAPE)
            return true;
    }
    return false;
}

static int nr_input_index(const qf_graph *g, const char *name)
{
    for (int i = 0; i < g->ninputs; i++)
        if (strcmp(g->inputs[i]->name, name) == 0) return i;
    return -1;
}

static int nr_output_index(const qf_graph *g, const char *name)
{
    for (int i = 0; i < g->noutputs; i++)
        if (strcmp(g->outputs[i]->name, name) == 0) return i;
    return -1;
}

static int nr_is_float(qf_dtype dt) { return dt == QF_DTYPE_F32 || dt == QF_DTYPE_F64; }

/* 0 when equal within tolerance; otherwise a message in err. */
static int nr_compare(const char *name, const qf_tensor *got, const qf_tensor *want, bool exact, char *err,
                      size_t errsz)
{
    char a[128], b[128];
    if (got->dtype != want->dtype) {
        snprintf(err, errsz, "output '%s': dtype %s, expected %s", name, qf_dtype_name(got->dtype),
                 qf_dtype_name(want->dtype));
        return -1;
    }
    if (!qf_shape_equal(got->ndim, got->dims, want->ndim, want->dims)) {
        snprintf(err, errsz, "output '%s': shape %s, expected %s", name,
                 qf_shape_str(got->ndim, got->dims, a, sizeof a),
                 qf_shape_str(want->ndim, want->dims, b, sizeof b));
        return -1;
    }
    int64_t n = qf_tensor_numel(want);
    if (n > 0 && !got->data) {
        snprintf(err, errsz, "output '%s': no data", name);
        return -1;
    }
    int64_t bad = 0, first = -1;
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        int ok;
        if (nr_is_float(want->dtype)) {
            double x = qf_tensor_get_f64(got, i), y = qf_tensor_get_f64(want, i);
            if (isnan(y)) ok = isnan(x);
            else if (isinf(y)) ok = x == y;
            else {
                double d = fabs(x - y);
                ok = exact ? x == y : d <= NR_ATOL + NR_RTOL * fabs(y);
                if (!(d <= worst)) worst = d;
                if (isnan(x)) ok = 0;
            }
        } else {
            ok = qf_tensor_get_i64(got, i) == qf_tensor_get_i64(want, i);
        }
        if (!ok) {
            if (first < 0) first = i;
            bad++;
        }
    }
    if (!bad) return 0;
    if (nr_is_float(want->dtype))
        snprintf(err, errsz,
                 "output '%s': %lld of %lld elements differ; first at [%lld]: got %.9g, expected "
                 "%.9g (max |diff| %.3g)",
                 name, (long long)bad, (long long)n, (long long)first, qf_tensor_get_f64(got, first),
                 qf_tensor_get_f64(want, first), worst);
    else
        snprintf(err, errsz, "output '%s': %lld of %lld elements differ; first at [%lld]: got %lld, "
                 "expected %lld",
                 name, (long long)bad, (long long)n, (long long)first,
                 (long long)qf_tensor_get_i64(got, first), (long long)qf_tensor_get_i64(want, first));
    return -1;
}

/* --- bfloat16 test data ------------------------------------------------------------
 * onnx 1.12 writes the bfloat16 tensors of its tests (Cast to / from
 * BFLOAT16) as UINT16 TensorProtos holding the bfloat16 bit patterns (numpy
 * has no bfloat16), which qf_onnx_tensor_load refuses (qfold has no uint16).
 * Where the model declares that input / output BFLOAT16, the driver reads
 * the file itself: dims (1), data_type (2) = UINT16, the values in raw_data
 * (9, little-endian) or int32_data (5), each the upper half of a float32. */

static const uint8_t *nr_varint(const uint8_t *p, const uint8_t *end, uint64_t *v)
{
    *v = 0;
    for (int k = 0; k < 10 && p < end; k++, p++) {
        *v |= (uint64_t)(*p & 0x7f) << (7 * k);
        if (!(*p & 0x80)) return p + 1;
    }
    return NULL;
}

static float nr_bf16(uint64_t bits)
{
    uint32_t u = (uint32_t)(bits & 0xffff) << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* A UINT16 TensorProto file as bfloat16 values (float32 tensor); -1 with
 * err filled when it is not one. */
static int nr_load_bf16(const char *path, qf_tensor *out, char *err, size_t errsz)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    long size = -1;
    if (f && fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)size + 1)) &&
        fread(buf, 1, (size_t)size, f) != (size_t)size)
        size = -1;
    if (f) fclose(f);
    if (!buf || size < 0) {
        free(buf);
        snprintf(err, errsz, "cannot read %.1500s", path);
        return -1;
    }
    int64_t dims[QF_MAX_DIMS];
    int ndim = 0, dtype = 0, bad = 0;
    const uint8_t *raw = NULL, *p = buf, *end = buf + size;
    uint64_t nraw = 0, tag, v;
    uint16_t *ints = NULL;
    int64_t nints = 0;
    while (p && p < end && !bad) {
        if (!(p = nr_varint(p, end, &tag))) break;
        unsigned field = (unsigned)(tag >> 3), wire = (unsigned)(tag & 7);
        if (wire == 0) {
            if (!(p = nr_varint(p, end, &v))) break;
            if (field == 1 && ndim < QF_MAX_DIMS) dims[ndim++] = (int64_t)v;
            else if (field == 1) bad = 1;
            if (field == 2) dtype = (int)v;
            if (field == 5) {
                uint16_t *q = realloc(ints, sizeof *q * (size_t)(nints + 1));
                if (!q) bad = 1;
                else (ints = q)[nints++] = (uint16_t)v;
            }
        } else if (wire == 2) {
            if (!(p = nr_varint(p, end, &v)) || v > (uint64_t)(end - p)) break;
            const uint8_t *body = p, *bend = p + v;
            if (field == 9) raw = body, nraw = v;
            for (const uint8_t *q = body; (field == 1 || field == 5) && q && q < bend;) {
                uint64_t x;
                if (!(q = nr_varint(q, bend, &x))) bad = 1;
                else if (field == 1 && ndim < QF_MAX_DIMS) dims[ndim++] = (int64_t)x;
                else if (field == 1) bad = 1;
                else {
                    uint16_t *r = realloc(ints, sizeof *r * (size_t)(nints + 1));
                    if (!r) bad = 1;
                    else (ints = r)[nints++] = (uint16_t)x;
                }
            }
            p = bend;
        } else if (wire == 1 || wire == 5) {
            p = (size_t)(end - p) >= (wire == 1 ? 8u : 4u) ? p + (wire == 1 ? 8 : 4) : NULL;
        } else {
            bad = 1;
        }
    }
    int rc = -1;
    if (!p || p != end || bad || dtype != 4 /* UINT16 */)
        snprintf(err, errsz, "%.1500s: not a UINT16 TensorProto holding bfloat16 bits", path);
    else if (qf_tensor_init(out, QF_DTYPE_F32, ndim, dims) != QF_OK)
        snprintf(err, errsz, "%.1500s: %s", path, qf_error_message());
    else {
        int64_t n = qf_tensor_numel(out);
        float *o = out->data;
        if (raw ? nraw != (uint64_t)n * 2 : nints != n) {
            snprintf(err, errsz, "%.1500s: %lld values for shape of %lld", path,
                     (long long)(raw ? (int64_t)(nraw / 2) : nints), (long long)n);
            qf_tensor_free(out);
        } else {
            for (int64_t i = 0; i < n; i++) o[i] = nr_bf16(raw ? (uint64_t)raw[2 * i] | (uint64_t)raw[2 * i + 1] << 8 : ints[i]);
            rc = 0;
        }
    }
    free(ints);
    free(buf);
    return rc;
}

/* Test data file `path` for a value the model stores as `store`. */
static int nr_load(const char *path, int store, qf_tensor *out, char *err, size_t errsz)
{
    qf_status st = qf_onnx_tensor_load(path, out);
    if (st == QF_OK) return 0;
    if ((store & QF_STORE_DTYPE) == QF_STORE_BF16) return nr_load_bf16(path, out, err, errsz);
    snprintf(err, errsz, "reading %.900s: %s: %.900s", path, qf_status_name(st), qf_error_message());
    return -1;
}

static const char *nr_status_msg(qf_status st, char *buf, size_t size)
{
    snprintf(buf, size, "%s: %s", qf_status_name(st), qf_error_message());
    return buf;
}

/* Runs one test; 0 pass, -1 fail with the reason in err. */
static int nr_run_test(const char *dir, char *err, size_t errsz)
{
    nr_meta m;
    char path[4096];
    qf_graph *g = NULL;
    qf_plan *p = NULL;
    qf_tensor in[NR_MAX_IO], want[NR_MAX_IO];
    const qf_tensor *feed[NR_MAX_IO];
    int nin_loaded = 0, nwant = 0, rc = -1;
    qf_status st;

    memset(in, 0, sizeof in);
    memset(want, 0, sizeof want);
    if (nr_read_meta(dir, &m, err, errsz)) return -1;

    snprintf(path, sizeof path, "%s/model.onnx", dir);
    qf_error_clear();
    if ((st = qf_onnx_load(path, &g)) != QF_OK) {
        nr_status_msg(st, err, errsz);
        g = NULL;
        goto out;
    }
    /* The test runs qfold's export of the model (written at the model's
     * opset, in that opset's forms), read back: import and export both.
     * node_export_check runs the onnx checker on every qf_export.onnx. */
    snprintf(path, sizeof path, "%s/qf_export.onnx", dir);
    st = qf_onnx_save(g, path);
    qf_graph_free(g);
    g = NULL;
    if (st != QF_OK || (st = qf_onnx_load(path, &g)) != QF_OK) {
        nr_status_msg(st, err, errsz);
        snprintf(err + strlen(err), errsz - strlen(err), " (qfold's export)");
        g = NULL;
        goto out;
    }
    for (int j = 0; j < m.nin; j++, nin_loaded++) {
        int i = nr_input_index(g, m.in[j]);
        snprintf(path, sizeof path, "%s/test_data_set_0/input_%d.pb", dir, j);
        if (nr_load(path, i >= 0 ? g->inputs[i]->store : 0, &in[j], err, errsz)) goto out;
    }
    for (int j = 0; j < m.nout; j++, nwant++) {
        int k = nr_output_index(g, m.out[j]);
        snprintf(path, sizeof path, "%s/test_data_set_0/output_%d.pb", dir, j);
        if (nr_load(path, k >= 0 ? g->outputs[k]->store : 0, &want[j], err, errsz)) goto out;
    }
    /* Bind or shape every input. An input the importer dropped (unused by
     * any node) is skipped. */
    for (int j = 0; j < m.nin; j++) {
        int i = nr_input_index(g, m.in[j]);
        if (i < 0) continue;
        if (in[j].dtype == QF_DTYPE_I64 || in[j].dtype == QF_DTYPE_BOOL || nr_feeds_shape(g->inputs[i])) {
            qf_tensor t;
            if ((st = qf_tensor_copy(&t, &in[j])) != QF_OK ||
                (st = qf_graph_bind_input(g, i, &t)) != QF_OK) {
                qf_tensor_free(&t);
                snprintf(err, errsz, "binding input '%s': %s: %s", m.in[j], qf_status_name(st),
                         qf_error_message());
                goto out;
            }
            qf_tensor_free(&t);
        } else if ((st = qf_graph_set_input_shape(g, i, in[j].ndim, in[j].dims)) != QF_OK) {
            snprintf(err, errsz, "shaping input '%s': %s: %s", m.in[j], qf_status_name(st),
                     qf_error_message());
            goto out;
        }
    }
    if ((st = qf_plan_init(&p, g)) != QF_OK) {
        nr_status_msg(st, err, errsz);
        p = NULL;
        goto out;
    }
    for (int i = 0; i < g->ninputs; i++) {
        feed[i] = NULL;
        for (int j = 0; j < m.nin; j++)
            if (strcmp(g->inputs[i]->name, m.in[j]) == 0) feed[i] = &in[j];
        if (!feed[i]) {
            snprintf(err, errsz, "graph input '%s' has no test data", g->inputs[i]->name);
            goto out;
        }
    }
    if ((st = qf_plan_run(p, feed, g->ninputs)) != QF_OK) {
        nr_status_msg(st, err, errsz);
        goto out;
    }
    if (qf_plan_num_outputs(p) != m.nout) {
        snprintf(err, errsz, "%d outputs, expected %d", qf_plan_num_outputs(p), m.nout);
        goto out;
    }
    for (int j = 0; j < m.nout; j++) {
        int k = nr_output_index(g, m.out[j]);
        if (k < 0) {
            snprintf(err, errsz, "output '%s' is missing from the graph", m.out[j]);
            goto out;
        }
        /* bfloat16 outputs: the same bit patterns (exact), not within rtol */
        bool exact = (g->outputs[k]->store & QF_STORE_DTYPE) == QF_STORE_BF16;
        if (nr_compare(m.out[j], qf_plan_output(p, k), &want[j], exact, err, errsz)) goto out;
    }
    rc = 0;
out:
    qf_plan_free(p);
    qf_graph_free(g);
    for (int j = 0; j < nin_loaded; j++) qf_tensor_free(&in[j]);
    for (int j = 0; j < nwant; j++) qf_tensor_free(&want[j]);
    return rc;
}

static const char *nr_basename(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static void nr_one(const char *dir, int *passed, int *failed)
{
    char err[2048] = "";
    if (nr_run_test(dir, err, sizeof err) == 0) {
        printf("PASS %s\n", nr_basename(dir));
        ++*passed;
    } else {
        printf("FAIL %s: %s\n", nr_basename(dir), err);
        ++*failed;
    }
    fflush(stdout);
}

int main(int argc, char **argv)
{
    int passed = 0, failed = 0;
    if (argc < 2) {
        fprintf(stderr, "usage: node_runner MANIFEST.txt | TEST_DIR...\n");
        return 2;
    }
    size_t len = strlen(argv[1]);
    if (argc == 2 && len > 4 && strcmp(argv[1] + len - 4, ".txt") == 0) {
        FILE *f = fopen(argv[1], "r");
        char line[4096];
        if (!f) {
            fprintf(stderr, "node_runner: cannot open %s\n", argv[1]);
            return 2;
        }
        while (fgets(line, sizeof line, f)) {
            line[strcspn(line, "\r\n")] = '\0';
            if (line[0]) nr_one(line, &passed, &failed);
        }
        fclose(f);
    } else {
        for (int i = 1; i < argc; i++) nr_one(argv[i], &passed, &failed);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed || passed == 0 ? 1 : 0;
}
