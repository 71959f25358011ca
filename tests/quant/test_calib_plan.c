/* Calibration on the planned path (src/quant/quantize.c, qf_plan_init_observed)
 * against the plain plan it replaced: on a model with Conv+Relu, a residual
 * Add, max / average / global average pools, a Concat and a Gemm, both
 * profiles, several batches (a short last one), every tensor of the result
 * (observed range, scale, zero point; weights and biases) equals the plain
 * path's up to float rounding (the convolutions run channels-last and fused
 * there), and the planned calibration plan really is channels-last and fused
 * where nothing is observed, and unfused where something is.
 *
 *   test_calib_plan
 *
 * Without the oneDNN backend (the ASan pass runs the reference kernels) both
 * paths are the same plan: the comparison is then exact and the layout
 * checks are skipped. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "exec/exec_impl.h"
#include "backend/dnnl/dnnl_lib.h"
#include "qfold/exec.h"
#include "qfold/quant.h"
#include "tools/qf_check.h"
#include "tools/qf_test_graph.h"

static uint64_t rng = 0xca1b0b5e12ull;
static bool have_dnnl;

static qf_value *conv(qf_graph *g, const char *name, qf_value *x, int64_t cout, int64_t k)
{
    char wn[64], bn[64];
    snprintf(wn, sizeof wn, "%s.w", name);
    snprintf(bn, sizeof bn, "%s.b", name);
    int64_t wd[4] = {cout, x->type.dims[1], k, k}, bd[1] = {cout};
    float s = 1.0f / sqrtf((float)(x->type.dims[1] * k * k));
    qf_value *in[3] = {x, qf_test_const(g, &rng, wn, QF_VALUE_PARAMETER, 4, wd, -2 * s, 2 * s),
                       qf_test_const(g, &rng, bn, QF_VALUE_PARAMETER, 1, bd, -0.2f, 0.2f)};
    qf_node *n = qf_graph_add_node(g, QF_OP_CONV, name, 3, in, 1);
    REQUIRE(n, "%s: %s", name, qf_error_message());
    int64_t pads[4] = {k / 2, k / 2, k / 2, k / 2};
    REQUIRE_OK(qf_node_set_attr_ints(g, n, "pads", pads, 4));
    REQUIRE_OK(qf_node_infer(g, n));
    return n->outputs[0];
}

static qf_value *op(qf_graph *g, qf_op o, const char *name, int nin, qf_value *const *in)
{
    qf_node *n = qf_graph_add_node(g, o, name, nin, in, 1);
    REQUIRE(n, "%s: %s", name, qf_error_message());
    REQUIRE_OK(qf_node_infer(g, n));
    return n->outputs[0];
}

static qf_value *pool(qf_graph *g, qf_op o, const char *name, qf_value *x, int64_t k, int64_t stride, int64_t pad)
{
    qf_node *n = qf_graph_add_node(g, o, name, 1, &x, 1);
    REQUIRE(n, "%s: %s", name, qf_error_message());
    int64_t ks[2] = {k, k}, ss[2] = {stride, stride}, ps[4] = {pad, pad, pad, pad};
    REQUIRE_OK(qf_node_set_attr_ints(g, n, "kernel_shape", ks, 2));
    REQUIRE_OK(qf_node_set_attr_ints(g, n, "strides", ss, 2));
    REQUIRE_OK(qf_node_set_attr_ints(g, n, "pads", ps, 4));
    REQUIRE_OK(qf_node_infer(g, n));
    return n->outputs[0];
}

/*   x ─conv1─relu─a─conv2─┬ Add(·, a) ─relu─ b ─maxpool─ c ┬ conv3 1x1 ─relu─┬ Concat ─conv4─ GAP ─flatten─ Gemm
 *                                                          └ avgpool 3x3 ─────┘ */
static qf_graph *model(void)
{
    qf_graph *g = NULL;
    REQUIRE_OK(qf_graph_init(&g));
    g->opset = 13;
    int64_t xd[4] = {-1, 6, 12, 12};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, xd);
    xd[0] = 1;
    REQUIRE_OK(qf_graph_set_input_shape(g, 0, 4, xd));
    qf_value *a = op(g, QF_OP_RELU, "relu1", 1, (qf_value *[]){conv(g, "conv1", x, 16, 3)});
    qf_value *s = op(g, QF_OP_ADD, "add", 2, (qf_value *[]){conv(g, "conv2", a, 16, 3), a});
    qf_value *b = op(g, QF_OP_RELU, "relu2", 1, &s);
    qf_value *c = pool(g, QF_OP_MAX_POOL, "maxpool", b, 2, 2, 0);
    qf_value *d = op(g, QF_OP_RELU, "relu3", 1, (qf_value *[]){conv(g, "conv3", c, 8, 1)});
    qf_value *e = pool(g, QF_OP_AVG_POOL, "avgpool", c, 3, 1, 1);
    qf_node *cat = qf_graph_add_node(g, QF_OP_CONCAT, "concat", 2, (qf_value *[]){d, e}, 1);
    REQUIRE(cat, "concat: %s", qf_error_message());
    REQUIRE_OK(qf_node_set_attr_int(g, cat, "axis", 1));
    REQUIRE_OK(qf_node_infer(g, cat));
    qf_value *h = op(g, QF_OP_GLOBAL_AVG_POOL, "gap", 1, (qf_value *[]){conv(g, "conv4", cat->outputs[0], 8, 1)});
    qf_value *f = op(g, QF_OP_FLATTEN, "flatten", 1, &h);
    int64_t wd[2] = {5, 8}, bd[1] = {5};
    qf_value *gin[3] = {f, qf_test_const(g, &rng, "fc.w", QF_VALUE_PARAMETER, 2, wd, -0.5f, 0.5f),
                        qf_test_const(g, &rng, "fc.b", QF_VALUE_PARAMETER, 1, bd, -0.1f, 0.1f)};
    qf_node *fc = qf_graph_add_node(g, QF_OP_GEMM, "fc", 3, gin, 1);
    REQUIRE(fc, "fc: %s", qf_error_message());
    REQUIRE_OK(qf_node_set_attr_int(g, fc, "transB", 1));
    REQUIRE_OK(qf_graph_add_output(g, fc->outputs[0]));
    x->type.dims[0] = -1; /* a dynamic batch, as qf_run_source leaves it */
    REQUIRE_OK(qf_graph_infer_shapes(g));
    return g;
}

static qf_quantize_result quantize(const qf_graph *src, const qf_quant_profile *p, const qf_data_source *data,
                                   bool plain)
{
    qf_graph *g = NULL;
    qf_quantize_result r = {0};
    REQUIRE_OK(qf_graph_clone(src, &g));
    qf_quantize_options o = {.profile = p, .batch = 16, .plain_calibration = plain};
    REQUIRE_OK(qf_quantize(g, data, &o, &r));
    qf_graph_free(g);
    return r;
}

static bool close_to(double a, double b, double tol) { return fabs(a - b) <= tol; }

static void compare(const char *profile, const qf_quantize_result *fast, const qf_quantize_result *plain)
{
    REQUIRE(fast->ntensors == plain->ntensors && fast->ntensors > 10, "%s: %d tensors vs %d", profile,
            fast->ntensors, plain->ntensors);
    CHECKF(fast->samples == plain->samples && fast->samples == 40, "%s: samples %lld / %lld", profile,
           (long long)fast->samples, (long long)plain->samples);
    int activations = 0;
    for (int i = 0; i < fast->ntensors; i++) {
        const qf_quant_tensor *f = &fast->tensors[i], *q = &plain->tensors[i];
        REQUIRE(!strcmp(f->name, q->name) && f->kind == q->kind && f->nch == q->nch, "%s: tensor %d: %s vs %s",
                profile, i, f->name, q->name);
        /* Range: within float rounding of the convolutions (channels-last,
         * fused, other blocking). The histogram's range search picks bin
         * edges: a count moved across an edge may move it by one bin. */
        double span = fmax(fabs(q->min), fabs(q->max)), tol = have_dnnl ? 1e-5 * span + 1e-7 : 0.0;
        if (have_dnnl && !strcmp(profile, "neutron")) tol += (q->max - q->min) / 2048.0;
        if (f->kind == QF_QSPEC_OBSERVE || f->kind == QF_QSPEC_SHARE) {
            activations++;
            CHECKF(close_to(f->min, q->min, tol) && close_to(f->max, q->max, tol),
                   "%s: '%s' range [%.9g, %.9g], plain path [%.9g, %.9g]", profile, f->name, f->min, f->max, q->min,
                   q->max);
            CHECKF(abs((int)f->zero_point - (int)q->zero_point) <= (have_dnnl ? 1 : 0),
                   "%s: '%s' zero point %d, plain path %d", profile, f->name, (int)f->zero_point,
                   (int)q->zero_point);
        }
        for (int k = 0; k < f->nch; k++) {
            /* Weights: the same constants, exactly; activations and biases
             * (s_x s_W) follow the ranges. */
            double rel = !have_dnnl || f->kind == QF_QSPEC_WEIGHT ? 0.0 : !strcmp(profile, "neutron") ? 2e-3 : 2e-5;
            double st = rel * q->scale[k];
            CHECKF(close_to(f->scale[k], q->scale[k], st), "%s: '%s' scale[%d] %.9g, plain path %.9g", profile,
                   f->name, k, f->scale[k], q->scale[k]);
        }
    }
    CHECKF(activations >= 8, "%s: %d activations compared", profile, activations);
}

/* The planned calibration plan of profile p at batch 16: fused and
 * channels-last where nothing is observed, every observed value written. */
typedef struct seen {
    qf_quant_calib *c;
    int calls;
    bool nhwc;
} seen;

static bool wants(void *ud, const qf_value *v) { return qf_quant_calib_wants(((seen *)ud)->c, v->id); }

static qf_status observe(void *ud, const qf_value *v, const qf_tensor *t, bool nhwc)
{
    seen *s = ud;
    s->calls++;
    s->nhwc |= nhwc;
    return qf_quant_calib_observe(s->c, v->id, t);
}

static void check_plan(const qf_graph *src, const qf_quant_profile *p)
{
    qf_graph *g = NULL;
    REQUIRE_OK(qf_graph_clone(src, &g));
    int64_t xd[4] = {16, 6, 12, 12};
    REQUIRE_OK(qf_graph_set_input_shape(g, 0, 4, xd));
    REQUIRE_OK(qf_graph_infer_shapes(g));
    qf_quant_annotation *a = NULL;
    REQUIRE_OK(qf_quant_annotate(g, p, &a));
    seen s = {0};
    REQUIRE_OK(qf_quant_calib_init(&s.c, g, a, p));
    qf_plan_observer ob = {.wants = wants, .observe = observe, .ud = &s};
    qf_plan *plan = NULL;
    REQUIRE_OK(qf_plan_init_observed(&plan, g, &ob));
    int fused = 0, nhwc = 0, observed = 0;
    for (int i = 0; i < qf_plan_step_count(plan); i++) {
        qf_plan_step_info si;
        qf_plan_step_get(plan, i, &si);
        if (si.reorder) continue;
        nhwc += (si.out_nhwc & 1u) != 0;
        for (int k = 0; k < si.nfused; k++) {
            fused++;
            /* Never fused past an observed value. */
            const qf_value *in = k ? si.fused[k - 1]->outputs[0] : si.node->outputs[0];
            CHECKF(!qf_quant_calib_wants(s.c, in->id), "%s: '%s' is observed but fused into '%s'", p->name,
                   in->name, si.node->name);
        }
        if (!strcmp(si.node->name, "conv2"))
            CHECKF(si.nfused == 0, "%s: conv2 fused its Add (its output is observed)", p->name);
    }
    for (int i = 0; i < g->nvalues; i++)
        if (g->values[i] && g->values[i]->producer && qf_quant_calib_wants(s.c, (uint32_t)i)) observed++;
    if (have_dnnl) {
        CHECKF(fused >= 2, "%s: %d nodes fused (conv1 and conv3 take their Relu)", p->name, fused);
        CHECKF(nhwc >= 4, "%s: %d steps write channels-last", p->name, nhwc);
    }
    float *x = qf_malloc(sizeof *x * 16 * 6 * 12 * 12);
    REQUIRE(x, "alloc");
    for (int i = 0; i < 16 * 6 * 12 * 12; i++) x[i] = qf_test_rnd(&rng);
    qf_tensor xt;
    qf_tensor_view(&xt, QF_DTYPE_F32, 4, xd, x);
    const qf_tensor *in[1] = {&xt};
    CHECK_OK(qf_plan_run(plan, in, 1));
    CHECKF(s.calls == observed, "%s: %d values observed, %d wanted", p->name, s.calls, observed);
    CHECKF(s.nhwc == have_dnnl, "%s: observer saw channels-last tensors: %d", p->name, s.nhwc);
    qf_free(x);
    qf_plan_free(plan);
    qf_quant_calib_free(s.c);
    qf_quant_annotation_free(a);
    qf_graph_free(g);
}

static void test_calib_plan(void)
{
    qf_graph *g = model();
    enum { N = 40 }; /* batches of 16, 16, 8: two plans */
    int64_t dd[4] = {N, 6, 12, 12};
    qf_tensor d;
    REQUIRE_OK(qf_tensor_init(&d, QF_DTYPE_F32, 4, dd));
    float *p = d.data;
    for (int64_t i = 0; i < qf_tensor_numel(&d); i++) p[i] = 1.5f * qf_test_rnd(&rng) + 0.2f;
    const qf_tensor *dp[1] = {&d};
    qf_data_source src = qf_data_source_tensors(dp, 1);
    const char *profiles[2] = {"neutron", "generic"};
    for (int k = 0; k < 2; k++) {
        qf_quant_profile prof = *qf_quant_profile_find(profiles[k]);
        prof.equalize = QF_QEQ_OFF; /* one calibration each */
        qf_quantize_result fast = quantize(g, &prof, &src, false), plain = quantize(g, &prof, &src, true);
        compare(profiles[k], &fast, &plain);
        qf_quantize_result_free(&fast);
        qf_quantize_result_free(&plain);
        check_plan(g, &prof);
    }
    qf_tensor_free(&d);
    qf_graph_free(g);
}

int main(void)
{
    have_dnnl = qf_set_engine(QF_ENGINE_DNNL) == QF_OK && qf_backend_kernels_get(QF_OP_CONV) &&
                qf_backend_engine() == QF_BACKEND_DNNL;
    if (!have_dnnl) fprintf(stderr, "test_calib_plan: no oneDNN backend: both paths run the same plan\n");
    RUN(test_calib_plan);
    return qf_check_report();
}
