/* Tests of the executor (plan, arena reuse, input checks, constant folding)
 * and of the layout / constant op kernels against numpy fixtures.
 *
 *   test_exec FIXTURE_DIR     (FIXTURE_DIR written by tests/exec/exec_fixtures.py)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qfold/exec.h"
#include "qfold/pass.h"
#include "qfold/graph.h"
#include "qfold/io.h"
#include "tools/qf_check.h"

/* --- a minimal .npy reader (fixtures only: C order, little-endian) ---------- */
static int load_npy(const char *path, qf_tensor *t)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    unsigned char head[12];
    if (fread(head, 1, 10, f) != 10 || memcmp(head, "\x93NUMPY", 6) != 0) goto fail;
    size_t hlen = (size_t)head[8] | (size_t)head[9] << 8;
    if (head[6] >= 2) {
        if (fread(head + 10, 1, 2, f) != 2) goto fail;
        hlen |= (size_t)head[10] << 16 | (size_t)head[11] << 24;
    }
    char hdr[1024];
    if (hlen >= sizeof hdr || fread(hdr, 1, hlen, f) != hlen) goto fail;
    hdr[hlen] = '\0';
    static const struct { const char *descr; qf_dtype dt; } types[] = {
        {"<f4", QF_DTYPE_F32}, {"<f8", QF_DTYPE_F64}, {"|i1", QF_DTYPE_I8}, {"|u1", QF_DTYPE_U8},
        {"<i4", QF_DTYPE_I32}, {"<i8", QF_DTYPE_I64}, {"|b1", QF_DTYPE_BOOL}};
    const char *d = strstr(hdr, "'descr': '");
    const char *s = strstr(hdr, "'shape': (");
    if (!d || !s || strstr(hdr, "'fortran_order': True")) goto fail;
    d += 10;
    qf_dtype dt = QF_DTYPE_UNDEFINED;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strncmp(d, types[i].descr, 3) == 0) dt = types[i].dt;
    if (dt == QF_DTYPE_UNDEFINED) goto fail;
    int64_t dims[QF_MAX_DIMS];
    int ndim = 0;
    for (s += 10; *s && *s != ')';) {
        char *end;
        long long v = strtoll(s, &end, 10);
        if (end == s) break;
        dims[ndim++] = v;
        s = end;
        while (*s == ',' || *s == ' ') s++;
    }
    if (qf_tensor_init(t, dt, ndim, dims) != QF_OK) goto fail;
    size_t nb = qf_tensor_nbytes(t);
    if (nb && fread(t->data, 1, nb, f) != nb) {
        qf_tensor_free(t);
        goto fail;
    }
    fclose(f);
    return 0;
fail:
    fclose(f);
    return -1;
}

/* --- op cases ----------------------------------------------------------------- */
typedef struct attr_spec {
    const char *name; /* NULL: unused slot */
    qf_attr_type type;
    int64_t i;
    int n;
    int64_t ints[8];
    float floats[4];
    const char *s;
} attr_spec;

typedef struct op_case {
    const char *name;
    qf_op op;
    int nin;
    unsigned const_mask; /* bit k: input k is a constant (initializer) */
    int nout;
    int64_t opset;       /* 0: 17 */
    attr_spec attrs[2];
} op_case;

#define A_INT(nm, v) {.name = nm, .type = QF_ATTR_INT, .i = v}
#define A_INTS(nm, cnt, ...) {.name = nm, .type = QF_ATTR_INTS, .n = cnt, .ints = {__VA_ARGS__}}
#define A_STR(nm, v) {.name = nm, .type = QF_ATTR_STRING, .s = v}

static const op_case cases[] = {
    {"flatten_axis1", QF_OP_FLATTEN, 1, 0, 1, 0, {A_INT("axis", 1)}},
    {"flatten_neg", QF_OP_FLATTEN, 1, 0, 1, 0, {A_INT("axis", -2)}},
    {"flatten_axis0", QF_OP_FLATTEN, 1, 0, 1, 0, {A_INT("axis", 0)}},
    {"reshape_zero_copy", QF_OP_RESHAPE, 2, 2, 1, 0, {{0}}},
    {"reshape_infer", QF_OP_RESHAPE, 2, 2, 1, 0, {{0}}},
    {"reshape_allowzero", QF_OP_RESHAPE, 2, 2, 1, 0, {A_INT("allowzero", 1)}},
    {"reshape_int8", QF_OP_RESHAPE, 2, 2, 1, 0, {{0}}},
    {"transpose_default", QF_OP_TRANSPOSE, 1, 0, 1, 0, {{0}}},
    {"transpose_perm", QF_OP_TRANSPOSE, 1, 0, 1, 0, {A_INTS("perm", 4, 0, 2, 3, 1)}},
    {"transpose_f64", QF_OP_TRANSPOSE, 1, 0, 1, 0, {A_INTS("perm", 2, 1, 0)}},
    {"concat_axis1", QF_OP_CONCAT, 3, 2, 1, 0, {A_INT("axis", 1)}},
    {"concat_neg", QF_OP_CONCAT, 2, 0, 1, 0, {A_INT("axis", -2)}},
    {"concat_bool", QF_OP_CONCAT, 2, 0, 1, 0, {A_INT("axis", 0)}},
    {"slice_basic", QF_OP_SLICE, 5, 0x1e, 1, 0, {{0}}},
    {"slice_neg_step", QF_OP_SLICE, 5, 0x1e, 1, 0, {{0}}},
    {"slice_default_axes", QF_OP_SLICE, 3, 0x6, 1, 0, {{0}}},
    {"slice_int32_params", QF_OP_SLICE, 5, 0x1e, 1, 0, {{0}}},
    {"slice_empty", QF_OP_SLICE, 4, 0xe, 1, 0, {{0}}},
    {"split_input", QF_OP_SPLIT, 2, 2, 2, 0, {A_INT("axis", 1)}},
    {"split_equal", QF_OP_SPLIT, 1, 0, 3, 0, {{0}}},
    {"split_attr", QF_OP_SPLIT, 1, 0, 2, 11, {A_INT("axis", -1), A_INTS("split", 2, 1, 4)}},
    {"squeeze_axes", QF_OP_SQUEEZE, 2, 2, 1, 0, {{0}}},
    {"squeeze_all", QF_OP_SQUEEZE, 1, 0, 1, 0, {{0}}},
    {"squeeze_attr", QF_OP_SQUEEZE, 1, 0, 1, 11, {A_INTS("axes", 1, 2)}},
    {"unsqueeze_axes", QF_OP_UNSQUEEZE, 2, 2, 1, 0, {{0}}},
    {"unsqueeze_attr", QF_OP_UNSQUEEZE, 1, 0, 1, 12, {A_INTS("axes", 1, 1)}},
    {"pad_constant", QF_OP_PAD, 3, 2, 1, 0, {A_STR("mode", "constant")}},
    {"pad_negative", QF_OP_PAD, 2, 2, 1, 0, {{0}}},
    {"pad_reflect", QF_OP_PAD, 2, 2, 1, 0, {A_STR("mode", "reflect")}},
    {"pad_edge", QF_OP_PAD, 2, 2, 1, 0, {A_STR("mode", "edge")}},
    {"identity", QF_OP_IDENTITY, 1, 0, 1, 0, {{0}}},
    {"dropout_mask", QF_OP_DROPOUT, 1, 0, 2, 0, {{0}}},
    {"constant_floats", QF_OP_CONSTANT, 0, 0, 1, 0,
     {{.name = "value_floats", .type = QF_ATTR_FLOATS, .n = 3, .floats = {1.5f, -2.25f, 3.0f}}}},
    {"constant_int", QF_OP_CONSTANT, 0, 0, 1, 0, {A_INT("value_int", 7)}},
    {"constant_tensor", QF_OP_CONSTANT, 0, 0, 1, 0, {{.name = "value", .type = QF_ATTR_TENSOR}}},
    {"cos_default", QF_OP_CONSTANT_OF_SHAPE, 1, 1, 1, 0, {{0}}},
    {"cos_int32", QF_OP_CONSTANT_OF_SHAPE, 1, 1, 1, 0, {{.name = "value", .type = QF_ATTR_TENSOR}}},
    {"cos_scalar", QF_OP_CONSTANT_OF_SHAPE, 1, 1, 1, 0, {{.name = "value", .type = QF_ATTR_TENSOR}}},
    {"shape_full", QF_OP_SHAPE, 1, 0, 1, 0, {{0}}},
    {"shape_start_end", QF_OP_SHAPE, 1, 0, 1, 0, {A_INT("start", 1), A_INT("end", 3)}},
    {"shape_neg_start", QF_OP_SHAPE, 1, 0, 1, 15, {A_INT("start", -2)}},
    {"gather_axis1", QF_OP_GATHER, 2, 0, 1, 0, {A_INT("axis", 1)}},
    {"gather_int32_neg", QF_OP_GATHER, 2, 2, 1, 0, {{0}}},
    {"gather_scalar_lastaxis", QF_OP_GATHER, 2, 0, 1, 0, {A_INT("axis", -1)}},
    {"cast_f32_i32", QF_OP_CAST, 1, 0, 1, 0, {A_INT("to", QF_DTYPE_I32)}},
    {"cast_f32_i8", QF_OP_CAST, 1, 0, 1, 0, {A_INT("to", QF_DTYPE_I8)}},
    {"cast_f32_bool", QF_OP_CAST, 1, 0, 1, 0, {A_INT("to", QF_DTYPE_BOOL)}},
    {"cast_f32_f64", QF_OP_CAST, 1, 0, 1, 0, {A_INT("to", QF_DTYPE_F64)}},
    {"cast_f64_f32", QF_OP_CAST, 1, 0, 1, 0, {A_INT("to", QF_DTYPE_F32)}},
    {"cast_i64_u8", QF_OP_CAST, 1, 0, 1, 0, {A_INT("to", QF_DTYPE_U8)}},
    {"cast_i64_f32", QF_OP_CAST, 1, 0, 1, 0, {A_INT("to", QF_DTYPE_F32)}},
    {"cast_i64_bool", QF_OP_CAST, 1, 0, 1, 0, {A_INT("to", QF_DTYPE_BOOL)}},
    {"cast_bool_f32", QF_OP_CAST, 1, 0, 1, 0, {A_INT("to", QF_DTYPE_F32)}},
    {"cast_u8_i8", QF_OP_CAST, 1, 0, 1, 0, {A_INT("to", QF_DTYPE_I8)}},
    {"cast_u8_i64", QF_OP_CAST, 1, 0, 1, 0, {A_INT("to", QF_DTYPE_I64)}},
};

/* The tensor attributes of the cases that have one. */
static qf_status set_tensor_attr(qf_graph *g, qf_node *n, const op_case *c)
{
    qf_tensor t;
    if (strcmp(c->name, "constant_tensor") == 0) {
        int64_t d[2] = {2, 2};
        QF_TRY(qf_tensor_init(&t, QF_DTYPE_I32, 2, d));
        int32_t v[4] = {1, 2, 3, 4};
        memcpy(t.data, v, sizeof v);
    } else {
        int64_t one = 1;
        QF_TRY(qf_tensor_init(&t, QF_DTYPE_I32, 1, &one));
        *(int32_t *)t.data = 5;
    }
    return qf_node_set_attr_tensor(g, n, "value", &t);
}

static qf_status set_attrs(qf_graph *g, qf_node *n, const op_case *c)
{
    for (int i = 0; i < 2 && c->attrs[i].name; i++) {
        const attr_spec *a = &c->attrs[i];
        switch (a->type) {
        case QF_ATTR_INT: QF_TRY(qf_node_set_attr_int(g, n, a->name, a->i)); break;
        case QF_ATTR_INTS: QF_TRY(qf_node_set_attr_ints(g, n, a->name, a->ints, a->n)); break;
        case QF_ATTR_FLOATS: QF_TRY(qf_node_set_attr_floats(g, n, a->name, a->floats, a->n)); break;
        case QF_ATTR_STRING: QF_TRY(qf_node_set_attr_string(g, n, a->name, a->s)); break;
        case QF_ATTR_TENSOR: QF_TRY(set_tensor_attr(g, n, c)); break;
        case QF_ATTR_FLOAT: QF_TRY(qf_node_set_attr_float(g, n, a->name, a->floats[0])); break;
        }
    }
    return QF_OK;
}

static void compare(const char *what, const qf_tensor *got, const qf_tensor *want)
{
    char a[128], b[128];
    if (got->dtype != want->dtype || !qf_shape_equal(got->ndim, got->dims, want->ndim, want->dims)) {
        FAIL("%s: got %s %s, want %s %s", what, qf_dtype_name(got->dtype),
             qf_shape_str(got->ndim, got->dims, a, sizeof a), qf_dtype_name(want->dtype),
             qf_shape_str(want->ndim, want->dims, b, sizeof b));
        return;
    }
    size_t esz = qf_dtype_size(got->dtype);
    int64_t n = qf_tensor_numel(got), bad = 0;
    for (int64_t i = 0; i < n; i++) {
        if (memcmp((const char *)got->data + i * (int64_t)esz, (const char *)want->data + i * (int64_t)esz,
                   esz) == 0)
            continue;
        if (bad++ < 5)
            fprintf(stderr, "%s: element %lld: got %g, want %g\n", what, (long long)i,
                    qf_tensor_get_f64(got, i), qf_tensor_get_f64(want, i));
    }
    if (bad) FAIL("%s: %lld of %lld elements differ", what, (long long)bad, (long long)n);
}

static void run_case(const char *dir, const op_case *c)
{
    long before = qf_check_nfailed_checks;
    qf_graph *g;
    CHECK_OK(qf_graph_init(&g));
    g->opset = c->opset ? c->opset : 17;
    qf_value *ins[6];
    qf_tensor feeds[6];
    const qf_tensor *feed_ptrs[6];
    int nfeeds = 0;
    char path[1024];
    for (int k = 0; k < c->nin; k++) {
        qf_tensor t;
        snprintf(path, sizeof path, "%s/%s.in%d.npy", dir, c->name, k);
        if (load_npy(path, &t) != 0) {
            FAIL("%s: cannot read %s", c->name, path);
            qf_graph_free(g);
            return;
        }
        char vname[32];
        snprintf(vname, sizeof vname, "in%d", k);
        if (c->const_mask & (1u << k)) {
            ins[k] = qf_graph_add_constant(g, vname, QF_VALUE_CONSTANT, &t);
        } else {
            ins[k] = qf_graph_add_input(g, vname, t.dtype, t.ndim, t.dims);
            feeds[nfeeds] = t;
            feed_ptrs[nfeeds] = &feeds[nfeeds];
            nfeeds++;
        }
    }
    qf_node *n = qf_graph_add_node(g, c->op, c->name, c->nin, ins, c->nout);
    CHECK(n != NULL);
    CHECK_OK(set_attrs(g, n, c));
    for (int j = 0; j < c->nout; j++) CHECK_OK(qf_graph_add_output(g, n->outputs[j]));
    qf_plan *p = NULL;
    qf_status st = qf_plan_init(&p, g);
    if (st == QF_OK) st = qf_plan_run(p, feed_ptrs, nfeeds);
    if (st != QF_OK) {
        FAIL("%s: %s: %s", c->name, qf_status_name(st), qf_error_message());
    } else {
        CHECK_OK(qf_graph_verify(g));
        for (int j = 0; j < c->nout; j++) {
            qf_tensor want;
            snprintf(path, sizeof path, "%s/%s.out%d.npy", dir, c->name, j);
            if (load_npy(path, &want) != 0) {
                FAIL("%s: cannot read %s", c->name, path);
                continue;
            }
            char what[128];
            snprintf(what, sizeof what, "%s output %d", c->name, j);
            compare(what, qf_plan_output(p, j), &want);
            qf_tensor_free(&want);
        }
    }
    /* The same node folded to constants must give the same values. */
    if (st == QF_OK && nfeeds == 0 && c->op != QF_OP_CONSTANT) {
        int count = -1;
        CHECK_OK(qf_graph_fold_constants(g, &count));
        CHECK(count == 1 && g->nnodes == 0);
        for (int j = 0; j < c->nout; j++) {
            qf_tensor want;
            snprintf(path, sizeof path, "%s/%s.out%d.npy", dir, c->name, j);
            if (load_npy(path, &want) != 0) continue;
            char what[128];
            snprintf(what, sizeof what, "%s folded output %d", c->name, j);
            CHECK(qf_value_is_const(g->outputs[j]));
            compare(what, &g->outputs[j]->type, &want);
            qf_tensor_free(&want);
        }
    }
    qf_plan_free(p);
    for (int k = 0; k < nfeeds; k++) qf_tensor_free(&feeds[k]);
    qf_graph_free(g);
    if (qf_check_nfailed_checks != before) fprintf(stderr, "case %s FAILED\n", c->name);
}

/* --- planner ------------------------------------------------------------------ */
/* A chain of 10 transposes of a [64, 32] float tensor: a planned arena needs
 * two buffers (the one being read and the one being written), not ten. */
static void test_arena_reuse(void)
{
    qf_graph *g;
    CHECK_OK(qf_graph_init(&g));
    int64_t d[2] = {64, 32};
    qf_value *v = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, d);
    for (int i = 0; i < 10; i++) {
        qf_node *n = qf_graph_add_node(g, QF_OP_TRANSPOSE, NULL, 1, &v, 1);
        v = n->outputs[0];
    }
    CHECK_OK(qf_graph_add_output(g, v));
    qf_plan *p;
    CHECK_OK(qf_plan_init(&p, g));
    if (!p) {
        qf_graph_free(g);
        return;
    }
    size_t one = 64 * 32 * sizeof(float);
    CHECK(qf_plan_naive_bytes(p) == 10 * one);
    CHECK(qf_plan_arena_bytes(p) == 2 * one);
    CHECK(qf_plan_arena_bytes(p) < qf_plan_naive_bytes(p));
    qf_tensor x;
    CHECK_OK(qf_tensor_init(&x, QF_DTYPE_F32, 2, d));
    float *xd = x.data;
    for (int i = 0; i < 64 * 32; i++) xd[i] = (float)i;
    const qf_tensor *in[] = {&x};
    for (int rep = 0; rep < 2; rep++) {
        CHECK_OK(qf_plan_run(p, in, 1));
        const qf_tensor *y = qf_plan_output(p, 0);
        CHECK(y && y->dims[0] == 64 && y->dims[1] == 32);
        CHECK(y && memcmp(y->data, x.data, one) == 0);
        CHECK(y && ((uintptr_t)y->data % 64) == 0);
    }
    qf_tensor_free(&x);
    qf_plan_free(p);
    qf_graph_free(g);
}

/* Branches: a value read by a later node stays live across the nodes between. */
static void test_arena_liveness(void)
{
    qf_graph *g;
    CHECK_OK(qf_graph_init(&g));
    int64_t d[2] = {2, 3};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_I64, 2, d);
    qf_value *a = qf_graph_add_node(g, QF_OP_IDENTITY, "a", 1, &x, 1)->outputs[0];
    qf_value *b = qf_graph_add_node(g, QF_OP_TRANSPOSE, "b", 1, &a, 1)->outputs[0];
    qf_value *c = qf_graph_add_node(g, QF_OP_TRANSPOSE, "c", 1, &b, 1)->outputs[0];
    qf_value *e = qf_graph_add_node(g, QF_OP_IDENTITY, "e", 1, &c, 1)->outputs[0];
    qf_value *cat[2] = {a, e};
    qf_node *cn = qf_graph_add_node(g, QF_OP_CONCAT, "cat", 2, cat, 1);
    CHECK_OK(qf_node_set_attr_int(g, cn, "axis", 0));
    CHECK_OK(qf_graph_add_output(g, cn->outputs[0]));
    CHECK_OK(qf_graph_add_output(g, x)); /* an input as an output */
    qf_plan *p;
    CHECK_OK(qf_plan_init(&p, g));
    if (!p) {
        qf_graph_free(g);
        return;
    }
    qf_tensor t;
    CHECK_OK(qf_tensor_init(&t, QF_DTYPE_I64, 2, d));
    for (int i = 0; i < 6; i++) ((int64_t *)t.data)[i] = 10 + i;
    const qf_tensor *in[] = {&t};
    CHECK_OK(qf_plan_run(p, in, 1));
    const qf_tensor *y = qf_plan_output(p, 0);
    CHECK(y->ndim == 2 && y->dims[0] == 4 && y->dims[1] == 3);
    for (int i = 0; i < 12; i++) CHECK(((int64_t *)y->data)[i] == 10 + i % 6);
    CHECK(qf_plan_output(p, 1)->data == t.data);
    CHECK(qf_plan_output(p, 2) == NULL);
    CHECK(qf_plan_num_outputs(p) == 2);
    qf_tensor_free(&t);
    qf_plan_free(p);
    qf_graph_free(g);
}

static void test_input_errors(void)
{
    qf_graph *g;
    CHECK_OK(qf_graph_init(&g));
    int64_t d[2] = {2, 3};
    qf_value *x = qf_graph_add_input(g, "image", QF_DTYPE_F32, 2, d);
    qf_node *n = qf_graph_add_node(g, QF_OP_IDENTITY, "id", 1, &x, 1);
    CHECK_OK(qf_graph_add_output(g, n->outputs[0]));
    qf_plan *p;
    CHECK_OK(qf_plan_init(&p, g));
    if (!p) {
        qf_graph_free(g);
        return;
    }
    qf_tensor good, wrong_shape, wrong_dtype;
    int64_t d2[2] = {3, 2};
    CHECK_OK(qf_tensor_init(&good, QF_DTYPE_F32, 2, d));
    CHECK_OK(qf_tensor_init(&wrong_shape, QF_DTYPE_F32, 2, d2));
    CHECK_OK(qf_tensor_init(&wrong_dtype, QF_DTYPE_I32, 2, d));
    const qf_tensor *in1[] = {&wrong_shape};
    CHECK_ERR(qf_plan_run(p, in1, 1), QF_ERR_SHAPE, "'image'");
    CHECK_MSG("expects shape [2, 3], got [3, 2]");
    const qf_tensor *in2[] = {&wrong_dtype};
    CHECK_ERR(qf_plan_run(p, in2, 1), QF_ERR_INVALID, "'image'");
    CHECK_MSG("expects float32, got int32");
    const qf_tensor *in3[] = {&good, &good};
    CHECK_ERR(qf_plan_run(p, in3, 2), QF_ERR_INVALID, "1 input");
    CHECK_MSG("got 2");
    CHECK_OK(qf_plan_run(p, in3, 1));
    qf_tensor_free(&good);
    qf_tensor_free(&wrong_shape);
    qf_tensor_free(&wrong_dtype);
    qf_plan_free(p);
    qf_graph_free(g);

    /* An input with an unknown dimension cannot be planned. */
    CHECK_OK(qf_graph_init(&g));
    int64_t du[2] = {-1, 3};
    x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, du);
    n = qf_graph_add_node(g, QF_OP_IDENTITY, "id", 1, &x, 1);
    CHECK_OK(qf_graph_add_output(g, n->outputs[0]));
    CHECK_ERR(qf_plan_init(&p, g), QF_ERR_SHAPE, "input 'x' has unknown dimension 0");
    CHECK_MSG("give its shape");
    CHECK(p == NULL);
    /* ... and works once the shape is given. */
    CHECK_OK(qf_graph_set_input_shape(g, 0, 2, d));
    CHECK_OK(qf_plan_init(&p, g));
    qf_plan_free(p);
    qf_graph_free(g);
}

/* Kernel and inference errors name the node. */
static void test_op_errors(void)
{
    qf_graph *g;
    qf_plan *p = NULL;
    int64_t d[2] = {3, 4}, di = 2;

    CHECK_OK(qf_graph_init(&g));
    qf_value *ins[2];
    ins[0] = qf_graph_add_input(g, "data", QF_DTYPE_F32, 2, d);
    ins[1] = qf_graph_add_input(g, "idx", QF_DTYPE_I64, 1, &di);
    qf_node *n = qf_graph_add_node(g, QF_OP_GATHER, "my_gather", 2, ins, 1);
    CHECK_OK(qf_graph_add_output(g, n->outputs[0]));
    CHECK_OK(qf_plan_init(&p, g));
    qf_tensor x, ix;
    CHECK_OK(qf_tensor_init(&x, QF_DTYPE_F32, 2, d));
    CHECK_OK(qf_tensor_init(&ix, QF_DTYPE_I64, 1, &di));
    ((int64_t *)ix.data)[1] = 3;
    const qf_tensor *in[] = {&x, &ix};
    CHECK_ERR(qf_plan_run(p, in, 2), QF_ERR_INVALID, "'my_gather'");
    CHECK_MSG("index 3 out of range");
    ((int64_t *)ix.data)[1] = -3;
    CHECK_OK(qf_plan_run(p, in, 2));
    qf_tensor_free(&x);
    qf_tensor_free(&ix);
    qf_plan_free(p);
    qf_graph_free(g);

    /* Cast to a dtype qfold does not have (float16 / bfloat16 it holds as
     * float32: see tests/io/half_test.py). */
    CHECK_OK(qf_graph_init(&g));
    ins[0] = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, d);
    n = qf_graph_add_node(g, QF_OP_CAST, "to_int16", 1, ins, 1);
    CHECK_OK(qf_node_set_attr_int(g, n, "to", 5));
    CHECK_OK(qf_graph_add_output(g, n->outputs[0]));
    CHECK_ERR(qf_plan_init(&p, g), QF_ERR_UNSUPPORTED, "'to_int16'");
    CHECK_MSG("int16");
    qf_graph_free(g);

    /* Pad with an unknown mode; Reshape to a wrong element count. */
    CHECK_OK(qf_graph_init(&g));
    ins[0] = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, d);
    qf_tensor pads;
    int64_t four = 4;
    CHECK_OK(qf_tensor_init(&pads, QF_DTYPE_I64, 1, &four));
    ins[1] = qf_graph_add_constant(g, "pads", QF_VALUE_CONSTANT, &pads);
    n = qf_graph_add_node(g, QF_OP_PAD, "my_pad", 2, ins, 1);
    CHECK_OK(qf_node_set_attr_string(g, n, "mode", "wrap"));
    CHECK_OK(qf_graph_add_output(g, n->outputs[0]));
    CHECK_ERR(qf_plan_init(&p, g), QF_ERR_UNSUPPORTED, "'my_pad'");
    CHECK_MSG("'wrap'");
    qf_graph_free(g);

    CHECK_OK(qf_graph_init(&g));
    ins[0] = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, d);
    qf_tensor shape;
    CHECK_OK(qf_tensor_init(&shape, QF_DTYPE_I64, 1, &di));
    ((int64_t *)shape.data)[0] = 5;
    ((int64_t *)shape.data)[1] = -1;
    ins[1] = qf_graph_add_constant(g, "shape", QF_VALUE_CONSTANT, &shape);
    n = qf_graph_add_node(g, QF_OP_RESHAPE, "my_reshape", 2, ins, 1);
    CHECK_OK(qf_graph_add_output(g, n->outputs[0]));
    CHECK_ERR(qf_plan_init(&p, g), QF_ERR_SHAPE, "'my_reshape'");
    CHECK_MSG("[3, 4]");
    qf_graph_free(g);

    /* A Reshape whose shape is computed at run time is a dynamic shape. */
    CHECK_OK(qf_graph_init(&g));
    ins[0] = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, d);
    ins[1] = qf_graph_add_input(g, "s", QF_DTYPE_I64, 1, &di);
    n = qf_graph_add_node(g, QF_OP_RESHAPE, "dyn", 2, ins, 1);
    CHECK_OK(qf_graph_add_output(g, n->outputs[0]));
    CHECK_ERR(qf_plan_init(&p, g), QF_ERR_UNSUPPORTED, "'dyn'");
    CHECK_MSG("dynamic shapes");
    qf_graph_free(g);

    /* Dropout in training mode. */
    CHECK_OK(qf_graph_init(&g));
    ins[0] = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, d);
    qf_tensor tm;
    CHECK_OK(qf_tensor_init(&tm, QF_DTYPE_BOOL, 0, NULL));
    *(uint8_t *)tm.data = 1;
    qf_value *din[3] = {ins[0], NULL, qf_graph_add_constant(g, "tm", QF_VALUE_CONSTANT, &tm)};
    n = qf_graph_add_node(g, QF_OP_DROPOUT, "drop", 3, din, 1);
    CHECK_OK(qf_graph_add_output(g, n->outputs[0]));
    /* The graph is valid (passes may see it); running it is refused. */
    CHECK_OK(qf_plan_init(&p, g));
    float xv[6] = {0};
    qf_tensor xt;
    qf_tensor_view(&xt, QF_DTYPE_F32, 2, d, xv);
    const qf_tensor *xin[] = {&xt};
    CHECK_ERR(qf_plan_run(p, xin, 1), QF_ERR_UNSUPPORTED, "'drop'");
    CHECK_MSG("training_mode");
    qf_plan_free(p);
    qf_graph_free(g);
}

/* Allocation failures come back as QF_ERR_NOMEM, never as a crash or leak. */
static int fail_after = -1;
static void *failing_alloc(void *ud, void *ptr, size_t nsize)
{
    (void)ud;
    if (nsize == 0) {
        free(ptr);
        return NULL;
    }
    if (fail_after == 0) return NULL;
    if (fail_after > 0) fail_after--;
    return realloc(ptr, nsize);
}

static void test_alloc_failures(void)
{
    int64_t d[2] = {2, 3};
    for (int k = 0; k < 200; k++) {
        qf_graph *g;
        CHECK_OK(qf_graph_init(&g));
        qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, d);
        qf_node *s = qf_graph_add_node(g, QF_OP_SHAPE, "s", 1, &x, 1);
        qf_node *t = qf_graph_add_node(g, QF_OP_TRANSPOSE, "t", 1, &x, 1);
        CHECK_OK(qf_graph_add_output(g, s->outputs[0]));
        CHECK_OK(qf_graph_add_output(g, t->outputs[0]));
        qf_set_allocator(failing_alloc, NULL);
        fail_after = k;
        int count;
        qf_status st = qf_graph_fold_constants(g, &count);
        qf_plan *p = NULL;
        if (st == QF_OK) st = qf_plan_init(&p, g);
        fail_after = -1;
        CHECK(st == QF_OK || st == QF_ERR_NOMEM);
        CHECK(st != QF_OK || p != NULL);
        qf_plan_free(p);
        qf_graph_free(g);
        qf_set_allocator(NULL, NULL);
        if (st == QF_OK) break;
    }
}

/* The largest single request the allocation hook saw (test_file_read_size). */
static size_t largest_request;

static void *largest_alloc(void *ud, void *ptr, size_t nsize)
{
    (void)ud;
    if (nsize == 0) {
        free(ptr);
        return NULL;
    }
    if (nsize > largest_request) largest_request = nsize;
    return realloc(ptr, nsize);
}

/* qf_file_read of a regular file allocates about its size once; it used to
 * double the buffer just to see EOF (review-a). */
static const char *fixture_dir; /* FIXTURE_DIR of the command line */

static void test_file_read_size(void)
{
    const char *dir = fixture_dir;
    char path[4096];
    snprintf(path, sizeof path, "%s/read_size.bin", dir);
    enum { N = 300000 };
    unsigned char *data = malloc(N);
    if (!data) return;
    for (int i = 0; i < N; i++) data[i] = (unsigned char)(i * 7);
    CHECK_OK(qf_file_write_atomic(path, data, N));
    void *got = NULL;
    size_t size = 0;
    largest_request = 0;
    qf_set_allocator(largest_alloc, NULL);
    CHECK_OK(qf_file_read(path, &got, &size));
    qf_set_allocator(NULL, NULL);
    CHECK(size == N && got && memcmp(got, data, N) == 0);
    CHECK(largest_request <= (size_t)N + 2);
    free(got); /* allocated by largest_alloc, i.e. realloc */
    free(data);
    remove(path);
}

/* A .npy read a range of rows at a time, and a data source over it: the
 * rows equal the whole file's; reads past the end fail. */
static void test_npy_rows(void)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/rows.npy", fixture_dir);
    int64_t dims[3] = {5, 2, 3};
    qf_tensor t;
    CHECK_OK(qf_tensor_init(&t, QF_DTYPE_F32, 3, dims));
    float *x = t.data;
    for (int i = 0; i < 30; i++) x[i] = (float)i * 0.5f - 3.0f;
    CHECK_OK(qf_npy_save(path, &t));
    qf_npy_file *f = NULL;
    CHECK_OK(qf_npy_open(path, &f));
    if (!f) {
        qf_tensor_free(&t);
        return;
    }
    const qf_tensor *info = qf_npy_info(f);
    CHECK(info->dtype == QF_DTYPE_F32 && info->ndim == 3 && info->dims[0] == 5 && info->dims[2] == 3);
    CHECK(info->data == NULL && qf_npy_row_bytes(f) == 6 * sizeof(float));
    float rows[18];
    CHECK_OK(qf_npy_read_rows(f, 1, 3, rows));
    CHECK(memcmp(rows, x + 6, sizeof rows) == 0);
    CHECK_OK(qf_npy_read_rows(f, 5, 0, rows));
    CHECK(qf_npy_read_rows(f, 4, 2, rows) == QF_ERR_INVALID);
    CHECK(qf_npy_read_rows(f, -1, 1, rows) == QF_ERR_INVALID);
    qf_npy_source *src = NULL;
    CHECK_OK(qf_npy_source_init(&src, &f, 1));
    if (src) {
        const qf_data_source *ds = qf_npy_source_get(src);
        const void *p[1] = {NULL};
        CHECK(ds->ninputs == 1 && ds->inputs[0] == info);
        CHECK_OK(ds->read(ds, 3, 2, p));
        CHECK(p[0] && memcmp(p[0], x + 18, 12 * sizeof(float)) == 0);
        qf_npy_source_free(src);
    }
    /* The in-memory source points into the tensor. */
    const qf_tensor *tp = &t;
    qf_data_source mem = qf_data_source_tensors(&tp, 1);
    const void *q[1] = {NULL};
    CHECK_OK(mem.read(&mem, 2, 1, q));
    CHECK(q[0] == (const void *)(x + 12));
    qf_npy_close(f);
    CHECK(qf_npy_open("/nonexistent/rows.npy", &f) == QF_ERR_IO && f == NULL);
    qf_tensor_free(&t);
    remove(path);
}

/* Every op case against its numpy fixture (and folded, where it can be). */
static void test_op_cases(void)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(fixture_dir, &cases[i]);
    printf("test_exec: %zu op cases run\n", sizeof cases / sizeof cases[0]);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_exec FIXTURE_DIR\n");
        return 2;
    }
    fixture_dir = argv[1];
    RUN(test_arena_reuse);
    RUN(test_arena_liveness);
    RUN(test_input_errors);
    RUN(test_op_errors);
    RUN(test_alloc_failures);
    RUN(test_file_read_size);
    RUN(test_npy_rows);
    RUN(test_op_cases);
    return qf_check_report();
}
