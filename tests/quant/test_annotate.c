/* Annotation by the profiles' patterns (src/quant/annotate.c, profile.c):
 * where every Q/DQ pair goes, one small graph per rule, for neutron and
 * generic, and the --set overrides. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qfold/quant.h"
#include "tools/qf_check.h"

typedef struct gb {
    qf_graph *g;
    int k;
} gb;

static gb gb_begin(void)
{
    gb b = {0};
    if (qf_graph_init(&b.g) != QF_OK) abort();
    b.g->opset = 13;
    return b;
}

static qf_value *gb_input(gb *b, const char *name, int ndim, const int64_t *dims)
{
    return qf_graph_add_input(b->g, name, QF_DTYPE_F32, ndim, dims);
}

/* A float32 constant filled with small values (0 at index 0 for Clip mins). */
static qf_value *gb_const(gb *b, const char *name, int ndim, const int64_t *dims, float first)
{
    qf_tensor t;
    if (qf_tensor_init(&t, QF_DTYPE_F32, ndim, dims) != QF_OK) abort();
    float *d = t.data;
    for (int64_t i = 0; i < qf_tensor_numel(&t); i++) d[i] = 0.01f * (float)(i % 7) - 0.02f;
    if (qf_tensor_numel(&t) > 0) d[0] = first;
    qf_value *v = qf_graph_add_constant(b->g, name, QF_VALUE_PARAMETER, &t);
    if (!v) abort();
    return v;
}

static qf_node *gb_node(gb *b, qf_op op, const char *name, int nin, qf_value *const *in)
{
    qf_node *n = qf_graph_add_node(b->g, op, name, nin, in, 1);
    if (!n) abort();
    char out[64];
    snprintf(out, sizeof out, "%s_y", name);
    if (qf_graph_rename_value(b->g, n->outputs[0], out) != QF_OK) abort();
    return n;
}

/* Annotate with `profile` (+ one --set rule or NULL) and return the printed
 * annotation (malloc'd). */
static char *annotate(gb *b, const char *profile, const char *rule)
{
    if (qf_graph_infer_shapes(b->g) != QF_OK) {
        fprintf(stderr, "infer: %s\n", qf_error_message());
        abort();
    }
    qf_quant_profile p = *qf_quant_profile_find(profile);
    if (rule) CHECK_OK(qf_quant_profile_set(&p, rule));
    qf_quant_annotation *a = NULL;
    CHECK_OK(qf_quant_annotate(b->g, &p, &a));
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (a) qf_quant_annotation_print(a, b->g, f);
    fclose(f);
    qf_quant_annotation_free(a);
    return buf;
}

#define HAS(text, line) has_line(text, line, __FILE__, __LINE__)
#define HASNT(text, prefix) hasnt(text, prefix, __FILE__, __LINE__)

static void has_line(const char *text, const char *line, const char *file, int at)
{
    size_t n = strlen(line);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, line, n) == 0 && (p[n] == '\n' || p[n] == 0)) return;
    fprintf(stderr, "%s:%d: no line \"%s\" in:\n%s", file, at, line, text);
    qf_check_failed_now = 1;
}

static void hasnt(const char *text, const char *prefix, const char *file, int at)
{
    size_t n = strlen(prefix);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, prefix, n) == 0) {
            fprintf(stderr, "%s:%d: unexpected line starting \"%s\" in:\n%s", file, at, prefix, text);
            qf_check_failed_now = 1;
            return;
        }
}

static const int64_t X4[4] = {1, 4, 6, 6}, W4[4] = {8, 4, 3, 3}, B1[1] = {8};

/* conv -> relu: no quantization between them, the ReLU's output is. */
static gb conv_relu(qf_op act, float clip_min)
{
    gb b = gb_begin();
    qf_value *in[3] = {gb_input(&b, "x", 4, X4), gb_const(&b, "W", 4, W4, 0.3f), gb_const(&b, "b", 1, B1, 0.1f)};
    qf_node *conv = gb_node(&b, QF_OP_CONV, "conv", 3, in);
    qf_value *ain[2] = {conv->outputs[0], NULL};
    int nin = 1;
    if (act == QF_OP_CLIP) {
        int64_t one = 1;
        ain[1] = gb_const(&b, "lo", 1, &one, clip_min);
        nin = 2;
    }
    qf_node *r = gb_node(&b, act, "act", nin, ain);
    qf_graph_add_output(b.g, r->outputs[0]);
    return b;
}

static void test_conv_relu_fused(void)
{
    gb b = conv_relu(QF_OP_RELU, 0);
    char *t = annotate(&b, "neutron", NULL);
    HAS(t, "x: observe histogram affine [-128, 127]");
    HAS(t, "W: weight per-channel axis 0 symmetric [-127, 127]");
    HAS(t, "b: bias int32 = s(x) * s(W)");
    HASNT(t, "conv_y:");
    HAS(t, "act_y: observe histogram affine [-128, 127]");
    free(t);
    t = annotate(&b, "neutron", "fuse-activation=off");
    HAS(t, "conv_y: observe histogram affine [-128, 127]");
    HAS(t, "act_y: share conv_y");
    free(t);
    t = annotate(&b, "generic", NULL);
    HAS(t, "x: observe minmax affine [-128, 127]");
    free(t);
    qf_graph_free(b.g);
}

static void test_clip_relu_range_only(void)
{
    gb b = conv_relu(QF_OP_CLIP, 0.0f);
    char *t = annotate(&b, "neutron", NULL);
    HASNT(t, "conv_y:");
    HAS(t, "act_y: observe histogram affine [-128, 127]");
    free(t);
    qf_graph_free(b.g);
    b = conv_relu(QF_OP_CLIP, -1.0f); /* not a ReLU range: a quantized conv output, clip shares it */
    t = annotate(&b, "neutron", NULL);
    HAS(t, "conv_y: observe histogram affine [-128, 127]");
    HAS(t, "act_y: share conv_y");
    free(t);
    qf_graph_free(b.g);
}

/* A conv output read twice cannot be fused into one of its readers. */
static void test_conv_two_users(void)
{
    gb b = gb_begin();
    qf_value *in[2] = {gb_input(&b, "x", 4, X4), gb_const(&b, "W", 4, W4, 0.3f)};
    qf_node *conv = gb_node(&b, QF_OP_CONV, "conv", 2, in);
    qf_node *r = gb_node(&b, QF_OP_RELU, "relu", 1, &conv->outputs[0]);
    qf_value *ain[2] = {r->outputs[0], conv->outputs[0]};
    qf_node *add = gb_node(&b, QF_OP_ADD, "add", 2, ain);
    qf_graph_add_output(b.g, add->outputs[0]);
    char *t = annotate(&b, "neutron", NULL);
    HAS(t, "conv_y: observe histogram affine [-128, 127]");
    HAS(t, "relu_y: share conv_y");
    HAS(t, "add_y: observe histogram affine [-128, 127]");
    HASNT(t, "float ");
    free(t);
    qf_graph_free(b.g);
}

/* Pools and reshapes share; softmax / sigmoid / tanh are fixed; a pool after
 * a fixed output shares the fixed qparams. */
static void test_share_and_fixed(void)
{
    gb b = gb_begin();
    qf_value *x = gb_input(&b, "x", 4, X4);
    qf_node *sg = gb_node(&b, QF_OP_SIGMOID, "sig", 1, &x);
    qf_node *mp = gb_node(&b, QF_OP_MAX_POOL, "pool", 1, &sg->outputs[0]);
    int64_t ks[2] = {2, 2};
    qf_node_set_attr_ints(b.g, mp, "kernel_shape", ks, 2);
    qf_node *fl = gb_node(&b, QF_OP_FLATTEN, "flat", 1, &mp->outputs[0]);
    qf_node *th = gb_node(&b, QF_OP_TANH, "tanh", 1, &fl->outputs[0]);
    qf_node *sm = gb_node(&b, QF_OP_SOFTMAX, "soft", 1, &th->outputs[0]);
    qf_graph_add_output(b.g, sm->outputs[0]);
    char *t = annotate(&b, "neutron", NULL);
    HAS(t, "x: observe histogram affine [-128, 127]");
    HAS(t, "sig_y: fixed 0.00390625 -128");
    HAS(t, "pool_y: share sig_y");
    HAS(t, "flat_y: share pool_y");
    HAS(t, "tanh_y: fixed 0.0078125 0");
    HAS(t, "soft_y: fixed 0.00390625 -128");
    free(t);
    qf_graph_free(b.g);
}

/* Max / Min: every input and the output in one group (two observed
 * branches joined; a fixed one joins a fresh input, two different fixed ones
 * stay float); Abs shares its input's; PRelu's slope a per-tensor weight. */
static void test_prelu_max_min_abs(void)
{
    for (int p = 0; p < 2; p++) {
        const char *prof = p ? "generic" : "neutron";
        gb b = gb_begin();
        qf_value *x = gb_input(&b, "x", 4, X4), *y = gb_input(&b, "y", 4, X4);
        const int64_t c3[3] = {4, 1, 1};
        qf_value *pin[2] = {x, gb_const(&b, "slope", 3, c3, 0.25f)};
        qf_node *pr = gb_node(&b, QF_OP_PRELU, "prelu", 2, pin);
        qf_value *min[2] = {pr->outputs[0], y};
        qf_node *mx = gb_node(&b, QF_OP_MAX, "max", 2, min);
        qf_node *ab = gb_node(&b, QF_OP_ABS, "abs", 1, &mx->outputs[0]);
        qf_node *sg = gb_node(&b, QF_OP_SIGMOID, "sig", 1, &ab->outputs[0]);
        qf_node *th = gb_node(&b, QF_OP_TANH, "tanh", 1, &ab->outputs[0]);
        qf_value *fin[2] = {sg->outputs[0], th->outputs[0]};
        qf_node *mn = gb_node(&b, QF_OP_MIN, "min", 2, fin); /* 1/256 and 1/128: stays float */
        qf_value *sin[2] = {sg->outputs[0], ab->outputs[0]};
        qf_node *mx2 = gb_node(&b, QF_OP_MAX, "max2", 2, sin); /* fixed and observed: float */
        qf_graph_add_output(b.g, mn->outputs[0]);
        qf_graph_add_output(b.g, mx2->outputs[0]);
        char *t = annotate(&b, prof, NULL);
        HAS(t, "slope: weight per-tensor symmetric [-127, 127]");
        HAS(t, "max_y: share prelu_y");
        HAS(t, "abs_y: share max_y");
        HAS(t, "float min (min): inputs have different fixed qparams");
        HAS(t, "float max2 (max): an input with fixed qparams and one observed");
        free(t);
        qf_quant_annotation *a = NULL;
        CHECK_OK(qf_quant_annotate(b.g, qf_quant_profile_find(prof), &a));
        if (a) {
            const uint32_t r = qf_quant_group(a, pr->outputs[0]->id);
            CHECKF(qf_quant_group(a, y->id) == r && qf_quant_group(a, ab->outputs[0]->id) == r,
                   "%s: Max's inputs and output, Abs's output in one group", prof);
            CHECKF(qf_quant_group(a, x->id) != r, "%s: PRelu's input in its own group", prof);
        }
        qf_quant_annotation_free(a);
        qf_graph_free(b.g);
    }
}

/* Linear weights: per tensor in neutron, per channel in generic, the axis
 * following transB. */
static void test_gemm_weights(void)
{
    for (int transb = 0; transb <= 1; transb++) {
        gb b = gb_begin();
        int64_t xd[2] = {2, 16}, wd[2] = {transb ? 10 : 16, transb ? 16 : 10}, bd[1] = {10};
        qf_value *in[3] = {gb_input(&b, "x", 2, xd), gb_const(&b, "W", 2, wd, 0.2f), gb_const(&b, "b", 1, bd, 0.0f)};
        qf_node *n = gb_node(&b, QF_OP_GEMM, "fc", 3, in);
        qf_node_set_attr_int(b.g, n, "transB", transb);
        qf_graph_add_output(b.g, n->outputs[0]);
        char *t = annotate(&b, "neutron", NULL);
        HAS(t, "W: weight per-tensor symmetric [-127, 127]");
        HAS(t, "b: bias int32 = s(x) * s(W)");
        HAS(t, "fc_y: observe histogram affine [-128, 127]");
        free(t);
        t = annotate(&b, "generic", NULL);
        HAS(t, transb ? "W: weight per-channel axis 0 symmetric [-127, 127]"
                      : "W: weight per-channel axis 1 symmetric [-127, 127]");
        free(t);
        t = annotate(&b, "neutron", "linear-weights=per-channel");
        HAS(t, transb ? "W: weight per-channel axis 0 symmetric [-127, 127]"
                      : "W: weight per-channel axis 1 symmetric [-127, 127]");
        free(t);
        qf_node_set_attr_float(b.g, n, "alpha", 2.0f);
        t = annotate(&b, "neutron", NULL);
        HAS(t, "float fc (gemm): Gemm with transA, alpha or beta is not a linear layer");
        HASNT(t, "W:");
        free(t);
        qf_graph_free(b.g);
    }
}

static void test_conv_transpose_axis(void)
{
    gb b = gb_begin();
    int64_t wd[4] = {4, 6, 3, 3};
    qf_value *in[2] = {gb_input(&b, "x", 4, X4), gb_const(&b, "W", 4, wd, 0.2f)};
    qf_node *n = gb_node(&b, QF_OP_CONV_TRANSPOSE, "up", 2, in);
    qf_graph_add_output(b.g, n->outputs[0]);
    char *t = annotate(&b, "neutron", NULL);
    HAS(t, "W: weight per-channel axis 1 symmetric [-127, 127]");
    HAS(t, "up_y: observe histogram affine [-128, 127]");
    free(t);
    qf_graph_free(b.g);
}

/* Reductions share their input's qparams in neutron, have their own in
 * generic, and one --set changes neutron's. */
static void test_reduction(void)
{
    gb b = gb_begin();
    qf_value *x = gb_input(&b, "x", 4, X4);
    qf_node *gap = gb_node(&b, QF_OP_GLOBAL_AVG_POOL, "gap", 1, &x);
    qf_graph_add_output(b.g, gap->outputs[0]);
    char *t = annotate(&b, "neutron", NULL);
    HAS(t, "gap_y: share x");
    free(t);
    t = annotate(&b, "generic", NULL);
    HAS(t, "gap_y: observe minmax affine [-128, 127]");
    free(t);
    t = annotate(&b, "neutron", "reduction-scale=own");
    HAS(t, "gap_y: observe histogram affine [-128, 127]");
    free(t);
    qf_graph_free(b.g);
}

/* Concat: every input quantized, the output shares the first one's. */
static void test_concat_and_binary(void)
{
    gb b = gb_begin();
    qf_value *x = gb_input(&b, "x", 4, X4), *z = gb_input(&b, "z", 4, X4);
    qf_value *cin[2] = {x, z};
    qf_node *cat = gb_node(&b, QF_OP_CONCAT, "cat", 2, cin);
    qf_node_set_attr_int(b.g, cat, "axis", 1);
    qf_value *min[2] = {x, z};
    qf_node *mul = gb_node(&b, QF_OP_MUL, "mul", 2, min);
    qf_graph_add_output(b.g, cat->outputs[0]);
    qf_graph_add_output(b.g, mul->outputs[0]);
    char *t = annotate(&b, "neutron", NULL);
    HAS(t, "x: observe histogram affine [-128, 127]");
    HAS(t, "z: observe histogram affine [-128, 127]");
    HAS(t, "cat_y: share x");
    HAS(t, "mul_y: observe histogram affine [-128, 127]");
    free(t);
    qf_graph_free(b.g);
}

/* An op without an int8 form stays float, with the reason; what follows it
 * quantizes its own input again. */
static void test_float_left(void)
{
    gb b = gb_begin();
    qf_value *x = gb_input(&b, "x", 4, X4);
    qf_node *e = gb_node(&b, QF_OP_ERF, "erf", 1, &x);
    qf_node *r = gb_node(&b, QF_OP_MAX_POOL, "pool", 1, &e->outputs[0]);
    int64_t ks[2] = {2, 2};
    qf_node_set_attr_ints(b.g, r, "kernel_shape", ks, 2);
    qf_graph_add_output(b.g, r->outputs[0]);
    char *t = annotate(&b, "neutron", NULL);
    HAS(t, "float erf (erf): the profile has no int8 form for this op");
    HASNT(t, "x:");
    HAS(t, "erf_y: observe histogram affine [-128, 127]");
    HAS(t, "pool_y: share erf_y");
    free(t);
    qf_graph_free(b.g);
}

/* The annotation itself, to read its groups. */
static qf_quant_annotation *annotate_raw(gb *b, const char *profile)
{
    if (qf_graph_infer_shapes(b->g) != QF_OK) abort();
    qf_quant_annotation *a = NULL;
    CHECK_OK(qf_quant_annotate(b->g, qf_quant_profile_find(profile), &a));
    return a;
}

/* neutron, as the Neutron quantizer's cat (one observer shared by every
 * input and the output): two observed inputs and the output in one group,
 * a Sigmoid's fixed output in its own (requantized by the concat), also as
 * the first input; generic: the output the first input's, the other input
 * its own. */
static void test_concat_shared(void)
{
    for (int prof = 0; prof < 2; prof++) {
        gb b = gb_begin();
        qf_value *x = gb_input(&b, "x", 4, X4), *z = gb_input(&b, "z", 4, X4);
        qf_node *sg = gb_node(&b, QF_OP_SIGMOID, "sig", 1, &x);
        qf_value *cin[3] = {sg->outputs[0], x, z};
        qf_node *cat = gb_node(&b, QF_OP_CONCAT, "cat", 3, cin);
        qf_node_set_attr_int(b.g, cat, "axis", 1);
        qf_graph_add_output(b.g, cat->outputs[0]);
        qf_quant_annotation *a = annotate_raw(&b, prof ? "generic" : "neutron");
        REQUIRE(a, "no annotation");
        const uint32_t gx = qf_quant_group(a, x->id), gz = qf_quant_group(a, z->id),
                       gy = qf_quant_group(a, cat->outputs[0]->id), gs = qf_quant_group(a, sg->outputs[0]->id);
        CHECK(a->spec[sg->outputs[0]->id].kind == QF_QSPEC_FIXED && gs != gx && gs != gz);
        if (prof == 0) CHECKF(gx == gz && gz == gy, "neutron: groups x %u z %u cat %u", gx, gz, gy);
        else CHECKF(gy == gs && gx != gz, "generic: groups sig %u x %u z %u cat %u", gs, gx, gz, gy);
        qf_quant_annotation_free(a);
        qf_graph_free(b.g);
    }
}

/* A MatMul of two activations: in neutron both inputs' groups per-tensor
 * symmetric [-127, 127] on a min/max observer (the BMM converter wants zero
 * points 0), and a value sharing with one of them too; generic observes them
 * as any activation. */
static void test_matmul_symmetric(void)
{
    static const int64_t A3[3] = {1, 4, 6}, B3[3] = {1, 6, 5};
    gb b = gb_begin();
    qf_value *x = gb_input(&b, "x", 3, A3), *z = gb_input(&b, "z", 3, B3);
    qf_node *r = gb_node(&b, QF_OP_RELU, "relu", 1, &x);
    qf_value *min[2] = {r->outputs[0], z};
    qf_node *mm = gb_node(&b, QF_OP_MATMUL, "mm", 2, min);
    qf_graph_add_output(b.g, mm->outputs[0]);
    char *t = annotate(&b, "neutron", NULL);
    HAS(t, "x: observe minmax symmetric [-127, 127]");
    HAS(t, "relu_y: share x");
    HAS(t, "z: observe minmax symmetric [-127, 127]");
    HAS(t, "mm_y: observe histogram affine [-128, 127]");
    free(t);
    qf_quant_annotation *a = annotate_raw(&b, "neutron");
    REQUIRE(a, "no annotation");
    CHECK(a->spec[r->outputs[0]->id].format.scheme == QF_QSCHEME_SYMMETRIC);
    qf_quant_annotation_free(a);
    t = annotate(&b, "neutron", "matmul-inputs=activation");
    HAS(t, "x: observe histogram affine [-128, 127]");
    free(t);
    t = annotate(&b, "generic", NULL);
    HAS(t, "x: observe minmax affine [-128, 127]");
    HAS(t, "z: observe minmax affine [-128, 127]");
    free(t);
    qf_graph_free(b.g);
}

/* Clip(0, 3) after a conv: the Neutron converter's (and TFLite's) fused
 * activations are RELU and RELU6 only, so neutron quantizes the conv's
 * output and the clip shares it; generic fuses any [0, x]. Clip(0, 6) is
 * fused in both. */
static void test_clip_fused_range(void)
{
    for (int k = 0; k < 2; k++) {
        gb b = gb_begin();
        qf_value *in[3] = {gb_input(&b, "x", 4, X4), gb_const(&b, "W", 4, W4, 0.3f), gb_const(&b, "b", 1, B1, 0.1f)};
        qf_node *conv = gb_node(&b, QF_OP_CONV, "conv", 3, in);
        int64_t one = 1;
        qf_value *ain[3] = {conv->outputs[0], gb_const(&b, "lo", 1, &one, 0.0f),
                            gb_const(&b, "hi", 1, &one, k ? 6.0f : 3.0f)};
        qf_node *c = gb_node(&b, QF_OP_CLIP, "act", 3, ain);
        qf_graph_add_output(b.g, c->outputs[0]);
        char *t = annotate(&b, "neutron", NULL);
        if (k) {
            HASNT(t, "conv_y:");
        } else {
            HAS(t, "conv_y: observe histogram affine [-128, 127]");
            HAS(t, "act_y: share conv_y");
        }
        free(t);
        t = annotate(&b, "generic", NULL);
        HASNT(t, "conv_y:");
        HAS(t, "act_y: observe minmax affine [-128, 127]");
        free(t);
        qf_graph_free(b.g);
    }
}

static void test_profile_set(void)
{
    qf_quant_profile p = *qf_quant_profile_find("neutron");
    CHECK(qf_quant_profile_find("nope") == NULL);
    CHECK(strcmp(qf_quant_profile_names()[1], "generic") == 0);
    /* The list is the profiles' own .name fields (one source of truth). */
    int nprofiles = 0;
    for (const char *const *nm = qf_quant_profile_names(); *nm; nm++, nprofiles++) {
        const qf_quant_profile *q = qf_quant_profile_find(*nm);
        CHECKF(q && q->name == *nm, "profile '%s': not the name of the profile it finds", *nm);
    }
    CHECKF(nprofiles == 2, "%d profiles listed", nprofiles);
    CHECK_STATUS(qf_quant_profile_set(&p, "reduction-scale"), QF_ERR_INVALID);
    CHECK_MSG("expected KEY=VALUE");
    CHECK_STATUS(qf_quant_profile_set(&p, "reduction-scale=maybe"), QF_ERR_INVALID);
    CHECK_MSG("reduction-scale takes own|shared");
    CHECK_STATUS(qf_quant_profile_set(&p, "colour=blue"), QF_ERR_INVALID);
    CHECK_MSG("unknown key 'colour'");
    CHECK_STATUS(qf_quant_profile_set(&p, "min-scale=-1"), QF_ERR_INVALID);
    CHECK_OK(qf_quant_profile_set(&p, "min-scale=0.001"));
    CHECK(p.min_scale == 0.001f);
    CHECK_OK(qf_quant_profile_set(&p, "activation-observer=minmax"));
    CHECK(p.activation.observer == QF_OBSERVER_MIN_MAX);
    CHECK_OK(qf_quant_profile_set(&p, "concat-scale=first"));
    CHECK(!p.concat_shares);
    CHECK_STATUS(qf_quant_profile_set(&p, "matmul-inputs=zero"), QF_ERR_INVALID);
    CHECK_MSG("matmul-inputs takes symmetric|activation");
    /* the built-in table is untouched */
    CHECK(qf_quant_profile_find("neutron")->activation.observer == QF_OBSERVER_HISTOGRAM);
}

int main(void)
{
    RUN(test_conv_relu_fused);
    RUN(test_clip_relu_range_only);
    RUN(test_conv_two_users);
    RUN(test_share_and_fixed);
    RUN(test_gemm_weights);
    RUN(test_conv_transpose_axis);
    RUN(test_reduction);
    RUN(test_concat_and_binary);
    RUN(test_concat_shared);
    RUN(test_matmul_symmetric);
    RUN(test_clip_fused_range);
    RUN(test_float_left);
    RUN(test_profile_set);
    RUN(test_prelu_max_min_abs);
    return qf_check_report();
}
