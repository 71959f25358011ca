/* Tests of the spatial ops: conv, conv_transpose, batch_norm, max_pool,
 * avg_pool, global_avg_pool, reduce_mean.
 *
 *   test_spatial            shape-inference and bad-input tests (no files)
 *   test_spatial CASEDIR    also every case of CASEDIR/manifest.txt, written by
 *                           tests/spatial_ref.py (PyTorch references and, with
 *                           --onnx-node, the ONNX backend node tests)
 *
 * Each case is a one-node graph built with the IR API; shape inference runs
 * through qf_graph_infer_shapes, the kernel is called directly with a
 * qf_kernel_io and the scratch size the op table asks for. Outputs must match
 * to 1e-4 relative (integers exactly); every mismatch is printed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op_table.h"
#include "qfold/exec.h"
#include "qfold/graph.h"

static int failures;

#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        if (!(cond)) {                                                      \
            failures++;                                                     \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);            \
            fprintf(stderr, __VA_ARGS__);                                   \
            fputc('\n', stderr);                                            \
        }                                                                   \
    } while (0)

/* --- running one node -------------------------------------------------------- */

/* Run node n: graph inputs take their data from feed[i] (graph input order),
 * constants from their payload. Outputs are allocated into outs[]. */
static qf_status run_node(qf_graph *g, qf_node *n, qf_tensor *const *feed, qf_tensor *outs)
{
    const qf_tensor *in[8] = {0};
    for (int i = 0; i < n->ninputs; i++) {
        qf_value *v = n->inputs[i];
        if (!v) continue;
        if (v->kind == QF_VALUE_INPUT) {
            for (int k = 0; k < g->ninputs; k++)
                if (g->inputs[k] == v) in[i] = feed[k];
        } else {
            in[i] = &v->type;
        }
    }
    qf_tensor *out[4] = {0};
    for (int i = 0; i < n->noutputs; i++) {
        const qf_tensor *t = &n->outputs[i]->type;
        QF_TRY(qf_tensor_init(&outs[i], t->dtype, t->ndim, t->dims));
        out[i] = &outs[i];
    }
    return qf_node_eval(n, g->opset, in, out);
}

/* --- manifest cases ------------------------------------------------------------ */

static qf_dtype parse_dtype(const char *s)
{
    if (!strcmp(s, "f32")) return QF_DTYPE_F32;
    if (!strcmp(s, "f64")) return QF_DTYPE_F64;
    if (!strcmp(s, "i64")) return QF_DTYPE_I64;
    if (!strcmp(s, "u8")) return QF_DTYPE_U8;
    if (!strcmp(s, "i8")) return QF_DTYPE_I8;
    return QF_DTYPE_UNDEFINED;
}

/* "NAME DTYPE NDIM DIMS... FILE" (strtok state continues after the keyword) */
static int read_tensor(const char *dir, char **name, qf_tensor *t)
{
    *name = strtok(NULL, " \n");
    char *dt = strtok(NULL, " \n");
    char *nd = strtok(NULL, " \n");
    if (!*name || !dt || !nd) return -1;
    int ndim = atoi(nd);
    int64_t dims[QF_MAX_DIMS];
    for (int i = 0; i < ndim; i++) dims[i] = atoll(strtok(NULL, " \n"));
    char *file = strtok(NULL, " \n");
    if (qf_tensor_init(t, parse_dtype(dt), ndim, dims) != QF_OK) return -1;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t nb = qf_tensor_nbytes(t);
    size_t got = fread(t->data, 1, nb, f);
    fclose(f);
    return got == nb ? 0 : -1;
}

static int compare(const char *cname, int k, const qf_tensor *got, const qf_tensor *want)
{
    char a[96], b[96];
    if (!qf_shape_equal(got->ndim, got->dims, want->ndim, want->dims) || got->dtype != want->dtype) {
        CHECK(0, "%s: output %d is %s %s, expected %s %s", cname, k, qf_dtype_name(got->dtype),
              qf_shape_str(got->ndim, got->dims, a, sizeof a), qf_dtype_name(want->dtype),
              qf_shape_str(want->ndim, want->dims, b, sizeof b));
        return 1;
    }
    int64_t n = qf_tensor_numel(want);
    double maxabs = 0.0;
    for (int64_t i = 0; i < n; i++) maxabs = fmax(maxabs, fabs(qf_tensor_get_f64(want, i)));
    bool exact = want->dtype != QF_DTYPE_F32 && want->dtype != QF_DTYPE_F64;
    int bad = 0;
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double x = qf_tensor_get_f64(got, i), y = qf_tensor_get_f64(want, i);
        double err = fabs(x - y);
        double tol = exact ? 0.0 : 1e-4 * fabs(y) + 1e-5 * fmax(1.0, maxabs);
        worst = fmax(worst, err);
        if (!(err <= tol) && !(isinf(x) && x == y)) {
            if (bad < 8) fprintf(stderr, "  %s out %d [%lld]: got %.8g, expected %.8g\n", cname, k, (long long)i, x, y);
            bad++;
        }
    }
    CHECK(bad == 0, "%s: output %d: %d of %lld elements differ (max abs error %.3g)", cname, k, bad, (long long)n,
          worst);
    return bad != 0;
}

/* Build, infer and run one case; returns 0 when it passed. */
static int run_case(const char *dir, const char *cname, const char *opname, int64_t opset, char **attr_lines,
                    int nattr, char **tensor_lines, int ntl)
{
    qf_graph *g;
    if (qf_graph_init(&g) != QF_OK) return 1;
    g->opset = opset;
    qf_value *ins[8];
    qf_tensor feed_t[8], want[4], got[4];
    qf_tensor *feed[8];
    int nin = 0, nfeed = 0, nout = 0, rc = 1;
    memset(got, 0, sizeof got);
    for (int i = 0; i < ntl; i++) {
        char *kw = strtok(tensor_lines[i], " \n");
        if (!strcmp(kw, "none")) {
            ins[nin++] = NULL;
            continue;
        }
        char *name;
        qf_tensor t;
        if (read_tensor(dir, &name, &t)) {
            CHECK(0, "%s: cannot read tensor line %d", cname, i);
            goto done;
        }
        if (!strcmp(kw, "in")) {
            ins[nin++] = qf_graph_add_input(g, name, t.dtype, t.ndim, t.dims);
            feed_t[nfeed] = t;
            feed[nfeed] = &feed_t[nfeed];
            nfeed++;
        } else if (!strcmp(kw, "const")) {
            ins[nin++] = qf_graph_add_constant(g, name, QF_VALUE_CONSTANT, &t);
        } else {
            want[nout++] = t;
        }
    }
    qf_node *n = qf_graph_add_node(g, qf_op_from_name(opname), "node0", nin, ins, nout);
    if (!n) goto done;
    for (int i = 0; i < nattr; i++) {
        char *ty = strtok(attr_lines[i], " \n");
        char *an = strtok(NULL, " \n");
        if (!strcmp(ty, "i")) qf_node_set_attr_int(g, n, an, atoll(strtok(NULL, " \n")));
        else if (!strcmp(ty, "f")) qf_node_set_attr_float(g, n, an, strtof(strtok(NULL, " \n"), NULL));
        else if (!strcmp(ty, "s")) qf_node_set_attr_string(g, n, an, strtok(NULL, " \n"));
        else if (!strcmp(ty, "is")) {
            int c = atoi(strtok(NULL, " \n"));
            int64_t v[16];
            for (int k = 0; k < c && k < 16; k++) v[k] = atoll(strtok(NULL, " \n"));
            qf_node_set_attr_ints(g, n, an, v, c);
        } else if (!strcmp(ty, "fs")) {
            int c = atoi(strtok(NULL, " \n"));
            float v[16];
            for (int k = 0; k < c && k < 16; k++) v[k] = strtof(strtok(NULL, " \n"), NULL);
            qf_node_set_attr_floats(g, n, an, v, c);
        }
    }
    for (int i = 0; i < nout; i++) qf_graph_add_output(g, n->outputs[i]);
    qf_status st = qf_graph_infer_shapes(g);
    if (st == QF_OK) st = qf_graph_verify(g);
    if (st == QF_OK) st = run_node(g, n, feed, got);
    if (st != QF_OK) {
        CHECK(0, "%s: %s: %s", cname, qf_status_name(st), qf_error_message());
        goto done;
    }
    rc = 0;
    for (int i = 0; i < nout; i++) rc |= compare(cname, i, &got[i], &want[i]);
done:
    for (int i = 0; i < nfeed; i++) qf_tensor_free(&feed_t[i]);
    for (int i = 0; i < nout; i++) {
        qf_tensor_free(&want[i]);
        qf_tensor_free(&got[i]);
    }
    qf_graph_free(g);
    return rc;
}

static void run_manifest(const char *dir)
{
    char path[4096], line[4096];
    snprintf(path, sizeof path, "%s/manifest.txt", dir);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "cannot open %s", path);
    if (!f) return;
    char cname[256] = "", opname[64] = "";
    int64_t opset = 13;
    char *attrs[32], *tens[16];
    int na = 0, nt = 0, ncases = 0, nfail = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (!strncmp(line, "case ", 5)) {
            snprintf(cname, sizeof cname, "%.250s", line + 5);
            na = nt = 0;
        } else if (!strncmp(line, "op ", 3)) {
            snprintf(opname, sizeof opname, "%.60s", line + 3);
        } else if (!strncmp(line, "opset ", 6)) {
            opset = atoll(line + 6);
        } else if (!strncmp(line, "attr ", 5) && na < 32) {
            attrs[na++] = strdup(line + 5);
        } else if (!strcmp(line, "end")) {
            int r = run_case(dir, cname, opname, opset, attrs, na, tens, nt);
            printf("%s %s\n", r ? "FAIL" : "ok  ", cname);
            ncases++;
            nfail += r;
            for (int i = 0; i < na; i++) free(attrs[i]);
            for (int i = 0; i < nt; i++) free(tens[i]);
            na = nt = 0;
        } else if (nt < 16) {
            tens[nt++] = strdup(line);
        }
    }
    fclose(f);
    printf("%d cases, %d failed\n", ncases, nfail);
    CHECK(ncases > 0, "no cases in %s", path);
}

/* --- shape inference and bad inputs -------------------------------------------- */

typedef struct mini {
    qf_graph *g;
    qf_node *n;
} mini;

/* A graph with input x (dims may hold -1) and, when wdims != NULL, a zero
 * constant w; one node of `op` reading them. */
static mini mini_graph(qf_op op, int xnd, const int64_t *xdims, int wnd, const int64_t *wdims)
{
    mini m = {0};
    if (qf_graph_init(&m.g) != QF_OK) return m;
    m.g->opset = 15;
    qf_value *in[2];
    in[0] = qf_graph_add_input(m.g, "x", QF_DTYPE_F32, xnd, xdims);
    int nin = 1;
    if (wdims) {
        qf_tensor t;
        qf_tensor_init(&t, QF_DTYPE_F32, wnd, wdims);
        in[nin++] = qf_graph_add_constant(m.g, "w", QF_VALUE_PARAMETER, &t);
    }
    m.n = qf_graph_add_node(m.g, op, "n0", nin, in, 1);
    return m;
}

static void expect_dims(const char *what, const mini *m, int nd, const int64_t *dims)
{
    qf_status st = qf_graph_infer_shapes(m->g);
    CHECK(st == QF_OK, "%s: infer failed: %s", what, qf_error_message());
    if (st != QF_OK) return;
    const qf_tensor *y = &m->n->outputs[0]->type;
    char a[96], b[96];
    CHECK(qf_shape_equal(y->ndim, y->dims, nd, dims), "%s: inferred %s, expected %s", what,
          qf_shape_str(y->ndim, y->dims, a, sizeof a), qf_shape_str(nd, dims, b, sizeof b));
}

static void expect_error(const char *what, const mini *m, qf_status code, const char *needle)
{
    qf_error_clear();
    qf_status st = qf_graph_infer_shapes(m->g);
    CHECK(st == code, "%s: status %s, expected %s (%s)", what, qf_status_name(st), qf_status_name(code),
          qf_error_message());
    CHECK(strstr(qf_error_message(), "'n0'") && strstr(qf_error_message(), needle),
          "%s: message '%s' should name the node and contain '%s'", what, qf_error_message(), needle);
}

static void test_inference(void)
{
    {
        int64_t x[] = {-1, 3, 8, 9}, w[] = {4, 3, 3, 3}, y[] = {-1, 4, 4, 5}, s[] = {2, 2}, p[] = {1, 1, 1, 1};
        mini m = mini_graph(QF_OP_CONV, 4, x, 4, w);
        qf_node_set_attr_ints(m.g, m.n, "strides", s, 2);
        qf_node_set_attr_ints(m.g, m.n, "pads", p, 4);
        expect_dims("conv symbolic batch", &m, 4, y);
        qf_graph_free(m.g);
    }
    {
        int64_t x[] = {2, 6, -1, 10}, w[] = {6, 1, 3, 3}, y[] = {2, 6, -1, 5}, s[] = {2, 2};
        mini m = mini_graph(QF_OP_CONV, 4, x, 4, w);
        qf_node_set_attr_ints(m.g, m.n, "strides", s, 2);
        qf_node_set_attr_int(m.g, m.n, "group", 6);
        qf_node_set_attr_string(m.g, m.n, "auto_pad", "SAME_UPPER");
        expect_dims("depthwise conv unknown height", &m, 4, y);
        qf_graph_free(m.g);
    }
    {
        int64_t x[] = {-1, 4, 5, -1}, w[] = {4, 3, 3, 3}, y[] = {-1, 6, 12, -1}, s[] = {2, 2}, op[] = {1, 1};
        mini m = mini_graph(QF_OP_CONV_TRANSPOSE, 4, x, 4, w);
        qf_node_set_attr_ints(m.g, m.n, "strides", s, 2);
        qf_node_set_attr_ints(m.g, m.n, "output_padding", op, 2);
        qf_node_set_attr_int(m.g, m.n, "group", 2);
        expect_dims("conv_transpose unknown batch and width", &m, 4, y);
        qf_graph_free(m.g);
    }
    {
        int64_t x[] = {-1, 64, 112, 112}, y[] = {-1, 64, 56, 56}, k[] = {3, 3}, s[] = {2, 2}, p[] = {1, 1, 1, 1};
        mini m = mini_graph(QF_OP_MAX_POOL, 4, x, 0, NULL);
        qf_node_set_attr_ints(m.g, m.n, "kernel_shape", k, 2);
        qf_node_set_attr_ints(m.g, m.n, "strides", s, 2);
        qf_node_set_attr_ints(m.g, m.n, "pads", p, 4);
        expect_dims("resnet max pool", &m, 4, y);
        qf_graph_free(m.g);
    }
    {
        int64_t x[] = {-1, 5, 7, 7}, y[] = {-1, 5, 1, 1};
        mini m = mini_graph(QF_OP_GLOBAL_AVG_POOL, 4, x, 0, NULL);
        expect_dims("global avg pool", &m, 4, y);
        qf_graph_free(m.g);
    }
    {
        int64_t x[] = {-1, 5, 7, 3}, y[] = {-1, 7}, ax[] = {1, -1};
        mini m = mini_graph(QF_OP_REDUCE_MEAN, 4, x, 0, NULL);
        qf_node_set_attr_ints(m.g, m.n, "axes", ax, 2);
        qf_node_set_attr_int(m.g, m.n, "keepdims", 0);
        expect_dims("reduce mean negative axes", &m, 2, y);
        qf_graph_free(m.g);
    }
}

static void test_bad_inputs(void)
{
    int64_t x4[] = {1, 3, 8, 8};
    {
        int64_t w[] = {4, 2, 3, 3};
        mini m = mini_graph(QF_OP_CONV, 4, x4, 4, w);
        expect_error("conv channel mismatch", &m, QF_ERR_SHAPE, "3 channels");
        qf_graph_free(m.g);
    }
    {
        int64_t x[] = {1, 4, 8, 8}, w[] = {3, 2, 3, 3};
        mini m = mini_graph(QF_OP_CONV, 4, x, 4, w);
        qf_node_set_attr_int(m.g, m.n, "group", 2);
        expect_error("conv group does not divide M", &m, QF_ERR_SHAPE, "group 2");
        qf_graph_free(m.g);
    }
    {
        int64_t w[] = {4, 3, 3, 3}, s[] = {1, 1, 1};
        mini m = mini_graph(QF_OP_CONV, 4, x4, 4, w);
        qf_node_set_attr_ints(m.g, m.n, "strides", s, 3);
        expect_error("conv strides length", &m, QF_ERR_INVALID, "strides has 3 entries");
        qf_graph_free(m.g);
    }
    {
        int64_t w[] = {4, 3, 3, 3}, s[] = {1, 0};
        mini m = mini_graph(QF_OP_CONV, 4, x4, 4, w);
        qf_node_set_attr_ints(m.g, m.n, "strides", s, 2);
        expect_error("conv zero stride", &m, QF_ERR_INVALID, "strides[1] = 0");
        qf_graph_free(m.g);
    }
    {
        int64_t w[] = {4, 3, 9, 3};
        mini m = mini_graph(QF_OP_CONV, 4, x4, 4, w);
        expect_error("conv kernel larger than input", &m, QF_ERR_SHAPE, "output size");
        qf_graph_free(m.g);
    }
    {
        int64_t w[] = {4, 3, 3, 3}, k[] = {3, 2};
        mini m = mini_graph(QF_OP_CONV, 4, x4, 4, w);
        qf_node_set_attr_ints(m.g, m.n, "kernel_shape", k, 2);
        expect_error("conv kernel_shape vs W", &m, QF_ERR_SHAPE, "kernel_shape[1] = 2");
        qf_graph_free(m.g);
    }
    {
        int64_t w[] = {4, 3, 3, 3}, p[] = {1, 1};
        mini m = mini_graph(QF_OP_CONV, 4, x4, 4, w);
        qf_node_set_attr_ints(m.g, m.n, "pads", p, 2);
        expect_error("conv pads length", &m, QF_ERR_INVALID, "pads has 2 entries");
        qf_graph_free(m.g);
    }
    {
        int64_t w[] = {3, 2, 3, 3};
        mini m = mini_graph(QF_OP_CONV_TRANSPOSE, 4, x4, 4, w);
        qf_node_set_attr_int(m.g, m.n, "group", 2);
        expect_error("conv_transpose group", &m, QF_ERR_SHAPE, "not divisible by group 2");
        qf_graph_free(m.g);
    }
    {
        mini m = mini_graph(QF_OP_MAX_POOL, 4, x4, 0, NULL);
        expect_error("max pool without kernel", &m, QF_ERR_INVALID, "kernel_shape");
        qf_graph_free(m.g);
    }
    {
        int64_t k[] = {3, 3};
        mini m = mini_graph(QF_OP_AVG_POOL, 4, x4, 0, NULL);
        qf_node_set_attr_ints(m.g, m.n, "kernel_shape", k, 2);
        qf_node_set_attr_string(m.g, m.n, "auto_pad", "SAME");
        expect_error("avg pool bad auto_pad", &m, QF_ERR_INVALID, "auto_pad 'SAME'");
        qf_graph_free(m.g);
    }
    {
        int64_t ax[] = {4};
        mini m = mini_graph(QF_OP_REDUCE_MEAN, 4, x4, 0, NULL);
        qf_node_set_attr_ints(m.g, m.n, "axes", ax, 1);
        expect_error("reduce mean axis range", &m, QF_ERR_INVALID, "axis 4");
        qf_graph_free(m.g);
    }
    {
        /* BN with a 4-entry scale for 3 channels. */
        qf_graph *g;
        qf_graph_init(&g);
        qf_value *in[5];
        in[0] = qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, x4);
        for (int i = 1; i < 5; i++) {
            int64_t d = i == 1 ? 4 : 3;
            qf_tensor t;
            qf_tensor_init(&t, QF_DTYPE_F32, 1, &d);
            in[i] = qf_graph_add_constant(g, NULL, QF_VALUE_CONSTANT, &t);
        }
        mini m = {g, qf_graph_add_node(g, QF_OP_BATCH_NORM, "n0", 5, in, 1)};
        expect_error("batch norm scale shape", &m, QF_ERR_SHAPE, "scale has shape [4]");
        qf_graph_free(g);
    }
    {
        /* float64 conv is refused with a clear message. */
        qf_graph *g;
        qf_graph_init(&g);
        qf_value *in[2];
        in[0] = qf_graph_add_input(g, "x", QF_DTYPE_F64, 4, x4);
        int64_t wd[] = {4, 3, 3, 3};
        qf_tensor t;
        qf_tensor_init(&t, QF_DTYPE_F64, 4, wd);
        in[1] = qf_graph_add_constant(g, "w", QF_VALUE_PARAMETER, &t);
        mini m = {g, qf_graph_add_node(g, QF_OP_CONV, "n0", 2, in, 1)};
        expect_error("float64 conv", &m, QF_ERR_UNSUPPORTED, "float64");
        qf_graph_free(g);
    }
}

int main(int argc, char **argv)
{
    test_inference();
    test_bad_inputs();
    if (argc > 1) run_manifest(argv[1]);
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("test_spatial: all checks passed\n");
    return 0;
}
