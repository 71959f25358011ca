/* The integer executor's kernels for ConvTranspose, MatMul, Mul,
 * AveragePool, GlobalAveragePool, ReduceMean and Concat groups (and Add's
 * broadcasting, which it shares with Mul)
 * (src/quant/lower.c; kernels src/ops/int8/qconv_transpose.c, qlinear.c, qadd.c,
 * pool.c, qconcat.c), each on a small QDQ graph built here:
 *
 *   int8 inputs -> DQ -> op -> [Relu] -> Q -> DQ -> y
 *
 * The lowering must turn the group into one integer node (and leave it alone
 * when the qparams do not fit, or with ONNX's requantization where ONNX has
 * no integer op); the lowered graph's integers must equal a direct integer
 * reference written here (TFLite's reference arithmetic: sums in int32,
 * requant.h's MultiplyByQuantizedMultiplier, the pools' division rounded half
 * away from zero) and lie within 1 LSB of the float simulation (the graph as
 * written, --simulate) on >= 99.9 % of the elements. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/math/requant.h"
#include "qfold/exec.h"
#include "qfold/quant.h"
#include "tools/qf_check.h"

/* --- graph building --------------------------------------------------------- */

static qf_value *scalar(qf_graph *g, const char *name, qf_dtype dt, const void *v)
{
    qf_tensor t;
    if (qf_tensor_init(&t, dt, 0, NULL) != QF_OK) return NULL;
    memcpy(t.data, v, qf_tensor_nbytes(&t));
    qf_value *c = qf_graph_add_constant(g, name, QF_VALUE_CONSTANT, &t);
    if (!c) qf_tensor_free(&t);
    return c;
}

static qf_value *constant(qf_graph *g, const char *name, qf_dtype dt, int ndim, const int64_t *d, const void *v)
{
    qf_tensor t;
    if (qf_tensor_init(&t, dt, ndim, d) != QF_OK) return NULL;
    memcpy(t.data, v, qf_tensor_nbytes(&t));
    qf_value *c = qf_graph_add_constant(g, name, QF_VALUE_CONSTANT, &t);
    if (!c) qf_tensor_free(&t);
    return c;
}

/* A DequantizeLinear of v (per tensor, or per channel on axis with ns scales). */
static qf_value *dq(qf_graph *g, const char *name, qf_value *v, const float *s, const int8_t *z, int64_t ns, int axis)
{
    char b1[64], b2[64];
    snprintf(b1, sizeof b1, "%s_s", name);
    snprintf(b2, sizeof b2, "%s_z", name);
    qf_value *in[3] = {v, ns == 1 ? scalar(g, b1, QF_DTYPE_F32, s) : constant(g, b1, QF_DTYPE_F32, 1, &ns, s),
                       ns == 1 ? scalar(g, b2, QF_DTYPE_I8, z) : constant(g, b2, QF_DTYPE_I8, 1, &ns, z)};
    if (!v || !in[1] || !in[2]) return NULL;
    qf_node *n = qf_graph_add_node(g, QF_OP_DEQUANTIZE, name, 3, in, 1);
    if (!n) return NULL;
    if (ns > 1) qf_node_set_attr_int(g, n, "axis", axis);
    return n->outputs[0];
}

/* An int8 graph input behind a per-tensor DQ. */
static qf_value *dq_input(qf_graph *g, const char *name, int ndim, const int64_t *d, float s, int8_t z)
{
    char b[64];
    snprintf(b, sizeof b, "%s_dq", name);
    return dq(g, b, qf_graph_add_input(g, name, QF_DTYPE_I8, ndim, d), &s, &z, 1, 0);
}

/* y -> [Relu] -> Q (sy, zy) -> DQ -> graph output. */
static void finish(qf_graph *g, qf_value *y, bool relu, float sy, int8_t zy)
{
    if (!y) return;
    if (relu) {
        qf_node *r = qf_graph_add_node(g, QF_OP_RELU, "relu", 1, &y, 1);
        if (!r) return;
        y = r->outputs[0];
    }
    qf_value *qin[3] = {y, scalar(g, "sy", QF_DTYPE_F32, &sy), scalar(g, "zy", QF_DTYPE_I8, &zy)};
    qf_node *q = qf_graph_add_node(g, QF_OP_QUANTIZE, "q", 3, qin, 1);
    qf_value *din[3] = {q ? q->outputs[0] : NULL, qin[1], qin[2]};
    qf_node *d = q ? qf_graph_add_node(g, QF_OP_DEQUANTIZE, "dq_out", 3, din, 1) : NULL;
    if (d) qf_graph_add_output(g, d->outputs[0]);
}

static qf_node *op_node(qf_graph *g, qf_op op, qf_value *const *in, int nin)
{
    for (int i = 0; i < nin; i++)
        if (!in[i]) return NULL;
    return qf_graph_add_node(g, op, "op", nin, in, 1);
}

/* --- running and comparing ----------------------------------------------------- */

enum { MAX_FEED = 4 };

typedef struct tcase {
    const char *name;
    int nfeed;
    int ndim[MAX_FEED];
    int64_t dims[MAX_FEED][6];
    float sy;
    int8_t zy;
    bool relu;
    qf_graph *(*build)(const struct tcase *c);
    /* The expected int8 output from the int8 inputs; returns its count. */
    int64_t (*ref)(const struct tcase *c, const int8_t *const *x, int8_t *y);
    qf_op lowered_op;  /* the integer node lowering makes */
    int variant;       /* a case's own switch */
} tcase;

static uint32_t lcg = 12345u;
static int8_t rnd8(void)
{
    lcg = lcg * 1664525u + 1013904223u;
    return (int8_t)(lcg >> 24);
}

static void run(qf_graph *g, qf_tensor *const *feed, int nfeed, qf_tensor *y)
{
    qf_plan *p = NULL;
    REQUIRE_OK(qf_plan_init(&p, g));
    REQUIRE_OK(qf_plan_run(p, (const qf_tensor *const *)feed, nfeed));
    const qf_tensor *o = qf_plan_output(p, 0);
    REQUIRE_OK(qf_tensor_init(y, o->dtype, o->ndim, o->dims));
    memcpy(y->data, o->data, qf_tensor_nbytes(o));
    qf_plan_free(p);
}

static int32_t to_int(float v, float s, int8_t z) { return (int32_t)nearbyintf(v / s) + z; }

/* Lower c's graph (rq), expect `lowered` groups of c->lowered_op, run it and
 * the float simulation on the same random inputs, compare with c->ref. */
static void check_case(const tcase *c, qf_int8_requant_kind rq, bool lowered)
{
    qf_graph *g = c->build(c), *sim = c->build(c);
    REQUIRE(g && sim && g->noutputs == 1 && sim->noutputs == 1, "%s: graph: %s", c->name, qf_error_message());
    REQUIRE_OK(qf_graph_infer_shapes(g));
    REQUIRE_OK(qf_graph_infer_shapes(sim));
    int k = -1, ops = 0;
    REQUIRE_OK(qf_quant_lower_int8(g, NULL, rq, &k));
    for (const qf_node *n = g->first; n; n = n->next) ops += n->op == c->lowered_op;
    CHECKF(k == (lowered ? 1 : 0) && ops == (lowered ? 1 : 0), "%s: lowered %d groups, %d %s nodes (want %d)",
           c->name, k, ops, qf_op_name(c->lowered_op), lowered ? 1 : 0);
    qf_tensor xs[MAX_FEED] = {0}, yl = {0}, ys = {0};
    qf_tensor *feed[MAX_FEED];
    const int8_t *xd[MAX_FEED];
    for (int i = 0; i < c->nfeed; i++) {
        REQUIRE_OK(qf_tensor_init(&xs[i], QF_DTYPE_I8, c->ndim[i], c->dims[i]));
        int8_t *d = xs[i].data;
        for (int64_t j = 0; j < qf_tensor_numel(&xs[i]); j++) d[j] = rnd8();
        feed[i] = &xs[i];
        xd[i] = d;
    }
    run(g, feed, c->nfeed, &yl);
    run(sim, feed, c->nfeed, &ys);
    int64_t count = qf_tensor_numel(&yl);
    int8_t *ref = malloc((size_t)count + 1);
    REQUIRE(ref != NULL, "out of memory");
    int64_t nref = c->ref(c, xd, ref);
    CHECKF(nref == count && qf_tensor_numel(&ys) == count, "%s: %lld outputs, reference %lld, simulation %lld",
           c->name, (long long)count, (long long)nref, (long long)qf_tensor_numel(&ys));
    int64_t wrong = 0, off1 = 0, worse = 0;
    for (int64_t i = 0; i < count && nref == count; i++) {
        int32_t a = to_int(((const float *)yl.data)[i], c->sy, c->zy);
        int32_t b = to_int(((const float *)ys.data)[i], c->sy, c->zy);
        if (lowered && a != ref[i]) {
            if (wrong < 5) printf("  %s: output %lld = %d, reference %d\n", c->name, (long long)i, a, ref[i]);
            wrong++;
        }
        off1 += abs(a - b) == 1;
        worse += abs(a - b) > 1;
    }
    double within = count ? 1.0 - (double)worse / (double)count : 1.0;
    printf("  %s (%s): %lld outputs, %lld 1 LSB from the simulation, %lld more\n", c->name,
           lowered ? "lowered" : "not lowered", (long long)count, (long long)off1, (long long)worse);
    CHECKF(wrong == 0, "%s: %lld of %lld outputs differ from the integer reference", c->name, (long long)wrong,
           (long long)count);
    CHECKF(within >= 0.999, "%s: %.4f%% within 1 LSB of the simulation", c->name, 100.0 * within);
    if (!lowered) CHECKF(off1 == 0 && worse == 0, "%s: not lowered, yet it differs from the simulation", c->name);
    free(ref);
    for (int i = 0; i < c->nfeed; i++) qf_tensor_free(&xs[i]);
    qf_tensor_free(&yl);
    qf_tensor_free(&ys);
    qf_graph_free(g);
    qf_graph_free(sim);
}

static qf_graph *new_graph(void)
{
    qf_graph *g = NULL;
    if (qf_graph_init(&g) != QF_OK) return NULL;
    g->opset = 13;
    return g;
}

static int32_t clamp8(int64_t v, bool relu, int8_t zy)
{
    int64_t lo = relu ? zy : -128;
    return (int32_t)(v < lo ? lo : v > 127 ? 127 : v);
}

/* MultiplyByQuantizedMultiplier(acc, m) with m from QuantizeMultiplier. */
static int32_t mbqm(int32_t acc, double m)
{
    int32_t qm;
    int shift;
    qf_quantize_multiplier(m, &qm, &shift);
    return qf_multiply_by_quantized_multiplier(acc, qm, shift);
}

static int64_t div_away(int64_t a, int64_t n) { return a > 0 ? (a + n / 2) / n : (a - n / 2) / n; }

/* --- Mul ----------------------------------------------------------------------- */

static const float mul_s[2] = {0.031f, 0.047f};
static const int8_t mul_z[2] = {-5, 3};

static qf_graph *build_mul(const tcase *c)
{
    qf_graph *g = new_graph();
    if (!g) return NULL;
    qf_value *in[2] = {dq_input(g, "a", c->ndim[0], c->dims[0], mul_s[0], mul_z[0]),
                       dq_input(g, "b", c->ndim[1], c->dims[1], mul_s[1], mul_z[1])};
    qf_node *n = op_node(g, c->lowered_op == QF_OP_QADD ? QF_OP_ADD : QF_OP_MUL, in, 2);
    if (n) finish(g, n->outputs[0], c->relu, c->sy, c->zy);
    return g;
}

/* Variant 1: B is [2, 3, 1, 1] (one value per (n, c) plane), broadcast. */
static int64_t ref_mul(const tcase *c, const int8_t *const *x, int8_t *y)
{
    int64_t count = qf_shape_numel(c->ndim[0], c->dims[0]), plane = c->dims[0][2] * c->dims[0][3];
    double m = (double)mul_s[0] * mul_s[1] / c->sy;
    for (int64_t i = 0; i < count; i++) {
        int8_t b = x[1][c->variant ? i / plane : i];
        y[i] = (int8_t)clamp8(mbqm((x[0][i] - mul_z[0]) * (b - mul_z[1]), m) + c->zy, c->relu, c->zy);
    }
    return count;
}

/* --- Concat (axis 1; input 0 shares the output's qparams) ------------------------ */

static const float cat_s[3] = {0.05f, 0.021f, 0.13f};
static const int8_t cat_z[3] = {7, -30, 0};

static qf_graph *build_concat(const tcase *c)
{
    qf_graph *g = new_graph();
    if (!g) return NULL;
    qf_value *in[3];
    for (int i = 0; i < 3; i++) {
        char nm[8] = {(char)('a' + i), 0};
        in[i] = dq_input(g, nm, c->ndim[i], c->dims[i], i == 0 ? c->sy : cat_s[i], i == 0 ? c->zy : cat_z[i]);
    }
    qf_node *n = op_node(g, QF_OP_CONCAT, in, 3);
    if (!n) return g;
    qf_node_set_attr_int(g, n, "axis", 1);
    finish(g, n->outputs[0], c->relu, c->sy, c->zy);
    return g;
}

static int64_t ref_concat(const tcase *c, const int8_t *const *x, int8_t *y)
{
    int64_t at = 0;
    const int64_t outer = c->dims[0][0], inner = c->dims[0][2] * c->dims[0][3];
    for (int64_t o = 0; o < outer; o++)
        for (int i = 0; i < 3; i++) {
            int64_t chunk = c->dims[i][1] * inner;
            for (int64_t k = 0; k < chunk; k++) {
                int8_t q = x[i][o * chunk + k];
                y[at++] = i == 0 ? q
                                 : (int8_t)clamp8(mbqm(q - cat_z[i], (double)cat_s[i] / c->sy) + c->zy, false, 0);
            }
        }
    return at;
}

/* --- AveragePool 3x3 / 2, pads 1 (variant: count_include_pad) ------------------- */

static qf_graph *build_avg_pool(const tcase *c)
{
    qf_graph *g = new_graph();
    if (!g) return NULL;
    /* The same qparams as the output, unless variant 2 (not lowered). */
    qf_value *x = dq_input(g, "x", c->ndim[0], c->dims[0], c->variant == 2 ? 0.07f : c->sy, c->zy);
    qf_node *n = op_node(g, QF_OP_AVG_POOL, &x, 1);
    if (!n) return g;
    const int64_t k[2] = {3, 3}, st[2] = {2, 2}, pads[4] = {1, 1, 1, 1};
    qf_node_set_attr_ints(g, n, "kernel_shape", k, 2);
    qf_node_set_attr_ints(g, n, "strides", st, 2);
    qf_node_set_attr_ints(g, n, "pads", pads, 4);
    qf_node_set_attr_int(g, n, "count_include_pad", c->variant == 1);
    finish(g, n->outputs[0], c->relu, c->sy, c->zy);
    return g;
}

static int64_t ref_avg_pool(const tcase *c, const int8_t *const *x, int8_t *y)
{
    const int64_t planes = c->dims[0][0] * c->dims[0][1], H = c->dims[0][2], W = c->dims[0][3];
    const int64_t OH = (H + 2 - 3) / 2 + 1, OW = (W + 2 - 3) / 2 + 1;
    int64_t at = 0;
    for (int64_t p = 0; p < planes; p++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t acc = 0, inside = 0, cnt = 0;
                for (int64_t kh = 0; kh < 3; kh++)
                    for (int64_t kw = 0; kw < 3; kw++) {
                        int64_t ih = oh * 2 - 1 + kh, iw = ow * 2 - 1 + kw;
                        bool in = ih >= 0 && ih < H && iw >= 0 && iw < W;
                        bool padded = ih >= -1 && ih <= H && iw >= -1 && iw <= W;
                        if (in) {
                            acc += x[0][(p * H + ih) * W + iw];
                            inside++;
                        } else if (padded && c->variant == 1) {
                            acc += c->zy; /* a counted pad holds the zero point */
                        }
                        cnt += in || (padded && c->variant == 1);
                    }
                (void)inside;
                y[at++] = (int8_t)clamp8(div_away(acc, cnt), c->relu, c->zy);
            }
    return at;
}

/* --- GlobalAveragePool / ReduceMean over H, W (own output qparams) ------------- */

static const float mean_sx = 0.04f;
static const int8_t mean_zx = -9;

static qf_graph *build_mean(const tcase *c)
{
    qf_graph *g = new_graph();
    if (!g) return NULL;
    qf_value *x = dq_input(g, "x", c->ndim[0], c->dims[0], mean_sx, mean_zx);
    qf_node *n = op_node(g, c->variant ? QF_OP_REDUCE_MEAN : QF_OP_GLOBAL_AVG_POOL, &x, 1);
    if (!n) return g;
    if (c->variant) {
        const int64_t axes[2] = {-1, 2};
        qf_node_set_attr_ints(g, n, "axes", axes, 2);
        qf_node_set_attr_int(g, n, "keepdims", 0);
    }
    finish(g, n->outputs[0], c->relu, c->sy, c->zy);
    return g;
}

static int64_t ref_mean(const tcase *c, const int8_t *const *x, int8_t *y)
{
    const int64_t planes = c->dims[0][0] * c->dims[0][1], inner = c->dims[0][2] * c->dims[0][3];
    for (int64_t p = 0; p < planes; p++) {
        int32_t acc = 0;
        for (int64_t i = 0; i < inner; i++) acc += x[0][p * inner + i] - mean_zx;
        acc = mbqm(acc, (double)mean_sx / c->sy);
        y[p] = (int8_t)clamp8(div_away(acc, inner) + c->zy, c->relu, c->zy);
    }
    return planes;
}

/* --- MatMul: two activations [2, 3, 4, 6] x [2, 3, 6, 5] (variant 0), or by a
 * constant [6, 5] per column (variant 1) ---------------------------------------- */

static const float mm_s[2] = {0.03f, 0.02f};
static const int8_t mm_z[2] = {4, -2};

static float mm_wscale(int64_t j) { return 0.01f + 0.002f * (float)j; }
static int8_t mm_w(int64_t i) { return (int8_t)((i * 37 + 11) % 255 - 127); }

static qf_graph *build_matmul(const tcase *c)
{
    qf_graph *g = new_graph();
    if (!g) return NULL;
    qf_value *in[2] = {dq_input(g, "a", c->ndim[0], c->dims[0], mm_s[0], mm_z[0]), NULL};
    if (c->variant == 0) {
        in[1] = dq_input(g, "b", c->ndim[1], c->dims[1], mm_s[1], mm_z[1]);
    } else {
        const int64_t wd[2] = {6, 5};
        int8_t w[30], zw[5] = {0};
        float sw[5];
        for (int i = 0; i < 30; i++) w[i] = mm_w(i);
        for (int j = 0; j < 5; j++) sw[j] = mm_wscale(j);
        in[1] = dq(g, "w_dq", constant(g, "w", QF_DTYPE_I8, 2, wd, w), sw, zw, 5, 1);
    }
    qf_node *n = op_node(g, QF_OP_MATMUL, in, 2);
    if (n) finish(g, n->outputs[0], c->relu, c->sy, c->zy);
    return g;
}

static int64_t ref_matmul(const tcase *c, const int8_t *const *x, int8_t *y)
{
    const int64_t batch = c->dims[0][0] * c->dims[0][1], M = 4, K = 6, N = 5;
    int64_t at = 0;
    for (int64_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                int32_t acc = 0;
                for (int64_t l = 0; l < K; l++) {
                    int32_t bv = c->variant == 0 ? x[1][(b * K + l) * N + j] - mm_z[1] : mm_w(l * N + j);
                    acc += (x[0][(b * M + i) * K + l] - mm_z[0]) * bv;
                }
                double m = (double)mm_s[0] * (c->variant == 0 ? mm_s[1] : mm_wscale(j)) / c->sy;
                y[at++] = (int8_t)clamp8(mbqm(acc, m) + c->zy, c->relu, c->zy);
            }
    return at;
}

/* --- ConvTranspose: x [1, 4, 5, 5], W [4, 3, 3, 3], stride 2, pads 1,
 * output_padding 1, per channel on axis 1, int32 bias (variant 0); group 2,
 * W [4, 2, 2, 2], per tensor, no bias (variant 1) ------------------------------- */

static const float ct_sx = 0.02f;
static const int8_t ct_zx = -6;

static int8_t ct_w(int64_t i) { return (int8_t)((i * 53 + 5) % 255 - 127); }
static float ct_ws(int64_t m) { return 0.004f + 0.001f * (float)m; }

static void ct_geom(const tcase *c, int64_t *group, int64_t *mg, int64_t *k)
{
    *group = c->variant ? 2 : 1;
    *mg = c->variant ? 2 : 3;
    *k = c->variant ? 2 : 3;
}

static qf_graph *build_conv_transpose(const tcase *c)
{
    qf_graph *g = new_graph();
    if (!g) return NULL;
    int64_t group, mg, k;
    ct_geom(c, &group, &mg, &k);
    qf_value *in[3] = {dq_input(g, "x", c->ndim[0], c->dims[0], ct_sx, ct_zx), NULL, NULL};
    const int64_t wd[4] = {4, mg, k, k}, nw = 4 * mg * k * k;
    int8_t w[128], zw[3] = {0};
    float sw[3], sb[3];
    int32_t bias[3];
    for (int64_t i = 0; i < nw; i++) w[i] = ct_w(i);
    for (int64_t m = 0; m < mg; m++) {
        sw[m] = ct_ws(m);
        sb[m] = ct_sx * sw[m];
        bias[m] = (int32_t)(m * 700 - 500);
    }
    in[1] = dq(g, "w_dq", constant(g, "w", QF_DTYPE_I8, 4, wd, w), sw, zw, c->variant ? 1 : mg, 1);
    int nin = 2;
    if (!c->variant) {
        int32_t zb[3] = {0};
        qf_value *bq = constant(g, "b", QF_DTYPE_I32, 1, &mg, bias);
        qf_value *bin[3] = {bq, constant(g, "b_s", QF_DTYPE_F32, 1, &mg, sb), constant(g, "b_z", QF_DTYPE_I32, 1, &mg, zb)};
        qf_node *dqb = bq && bin[1] && bin[2] ? qf_graph_add_node(g, QF_OP_DEQUANTIZE, "b_dq", 3, bin, 1) : NULL;
        if (dqb) qf_node_set_attr_int(g, dqb, "axis", 0);
        in[2] = dqb ? dqb->outputs[0] : NULL;
        nin = 3;
    }
    qf_node *n = op_node(g, QF_OP_CONV_TRANSPOSE, in, nin);
    if (!n) return g;
    const int64_t st[2] = {2, 2}, pads[4] = {1, 1, 1, 1}, op[2] = {1, 1};
    qf_node_set_attr_ints(g, n, "strides", st, 2);
    qf_node_set_attr_ints(g, n, "pads", pads, 4);
    qf_node_set_attr_ints(g, n, "output_padding", op, 2);
    qf_node_set_attr_int(g, n, "group", group);
    finish(g, n->outputs[0], c->relu, c->sy, c->zy);
    return g;
}

static int64_t ref_conv_transpose(const tcase *c, const int8_t *const *x, int8_t *y)
{
    int64_t group, mg, k;
    ct_geom(c, &group, &mg, &k);
    const int64_t C = 4, H = 5, W = 5, cg = C / group, M = group * mg;
    const int64_t OH = (H - 1) * 2 - 2 + k + 1, OW = (W - 1) * 2 - 2 + k + 1;
    int32_t acc[4 * 3 * 16 * 16];
    for (int64_t o = 0; o < M; o++)
        for (int64_t p = 0; p < OH * OW; p++) acc[o * OH * OW + p] = c->variant ? 0 : (int32_t)((o % mg) * 700 - 500);
    for (int64_t ci = 0; ci < C; ci++)
        for (int64_t ih = 0; ih < H; ih++)
            for (int64_t iw = 0; iw < W; iw++) {
                int32_t xv = x[0][(ci * H + ih) * W + iw] - ct_zx;
                int64_t gi = ci / cg;
                for (int64_t m = 0; m < mg; m++)
                    for (int64_t kh = 0; kh < k; kh++)
                        for (int64_t kw = 0; kw < k; kw++) {
                            int64_t oh = ih * 2 - 1 + kh, ow = iw * 2 - 1 + kw;
                            if (oh < 0 || oh >= OH || ow < 0 || ow >= OW) continue;
                            acc[((gi * mg + m) * OH + oh) * OW + ow] += xv * ct_w(((ci * mg + m) * k + kh) * k + kw);
                        }
            }
    for (int64_t o = 0; o < M; o++) {
        double m = (double)ct_sx * ct_ws(c->variant ? 0 : o % mg) / c->sy;
        for (int64_t p = 0; p < OH * OW; p++)
            y[o * OH * OW + p] = (int8_t)clamp8(mbqm(acc[o * OH * OW + p], m) + c->zy, c->relu, c->zy);
    }
    return M * OH * OW;
}

/* --- cases ------------------------------------------------------------------------ */

static const tcase mul_case = {"mul", 2, {4, 4}, {{2, 3, 5, 7}, {2, 3, 5, 7}}, 0.0021f, -3, false, build_mul,
                               ref_mul, QF_OP_QMUL, 0};
/* TFLite's int8 Add (add.h): both inputs << 20, rescaled to twice the
 * larger scale, summed, requantized; B broadcast per (n, c) plane. */
static int64_t ref_add(const tcase *c, const int8_t *const *x, int8_t *y)
{
    int64_t count = qf_shape_numel(c->ndim[0], c->dims[0]), plane = c->dims[0][2] * c->dims[0][3];
    const double twice = 2.0 * (mul_s[0] > mul_s[1] ? mul_s[0] : mul_s[1]);
    for (int64_t i = 0; i < count; i++) {
        int32_t a = mbqm((x[0][i] - mul_z[0]) * (1 << 20), mul_s[0] / twice);
        int32_t b = mbqm((x[1][i / plane] - mul_z[1]) * (1 << 20), mul_s[1] / twice);
        y[i] = (int8_t)clamp8(mbqm(a + b, twice / ((double)(1 << 20) * c->sy)) + c->zy, c->relu, c->zy);
    }
    return count;
}

static const tcase add_case = {"add (broadcast)", 2, {4, 4}, {{2, 3, 5, 7}, {2, 3, 1, 1}}, 0.06f, -20, false,
                               build_mul, ref_add, QF_OP_QADD, 1};
static const tcase concat_case = {"concat", 3, {4, 4, 4}, {{2, 3, 4, 5}, {2, 2, 4, 5}, {2, 4, 4, 5}}, 0.05f, 7,
                                  false, build_concat, ref_concat, QF_OP_QCONCAT, 0};
static const tcase avg_case = {"average pool", 1, {4}, {{2, 3, 9, 8}}, 0.05f, -3, false, build_avg_pool,
                               ref_avg_pool, QF_OP_QAVG_POOL, 0};
static const tcase gap_case = {"global average pool", 1, {4}, {{2, 8, 5, 6}}, 0.011f, 5, false, build_mean,
                               ref_mean, QF_OP_QMEAN, 0};
static const tcase mm_case = {"matmul", 2, {4, 4}, {{2, 3, 4, 6}, {2, 3, 6, 5}}, 0.05f, 2, false, build_matmul,
                              ref_matmul, QF_OP_QLINEAR_MATMUL, 0};
static const tcase ct_case = {"conv transpose", 1, {4}, {{1, 4, 5, 5}}, 0.02f, -1, false, build_conv_transpose,
                              ref_conv_transpose, QF_OP_QCONV_TRANSPOSE, 0};

static tcase with(tcase c, bool relu, int variant)
{
    c.relu = relu;
    c.variant = variant;
    return c;
}

static void test_mul(void)
{
    check_case(&mul_case, QF_REQUANT_FIXED_POINT, true);
    tcase r = with(mul_case, true, 0), se = with(mul_case, false, 1);
    check_case(&r, QF_REQUANT_FIXED_POINT, true);
    se.dims[1][2] = se.dims[1][3] = 1; /* an SE block's per-channel scale */
    check_case(&se, QF_REQUANT_FIXED_POINT, true);
    check_case(&mul_case, QF_REQUANT_ONNX, false);
    /* s_a * s_b / s_y = 2^20: the product's left shift would overflow. */
    tcase tiny = mul_case;
    tiny.sy = 1.4e-9f;
    check_case(&tiny, QF_REQUANT_FIXED_POINT, false);
}

static void test_add_broadcast(void) { check_case(&add_case, QF_REQUANT_FIXED_POINT, true); }

static void test_concat(void)
{
    check_case(&concat_case, QF_REQUANT_FIXED_POINT, true);
    check_case(&concat_case, QF_REQUANT_ONNX, false);
}

static void test_avg_pool(void)
{
    check_case(&avg_case, QF_REQUANT_FIXED_POINT, true);
    tcase inc = with(avg_case, false, 1), relu = with(avg_case, true, 0), other = with(avg_case, false, 2);
    check_case(&inc, QF_REQUANT_FIXED_POINT, true);
    check_case(&relu, QF_REQUANT_FIXED_POINT, true);
    check_case(&other, QF_REQUANT_FIXED_POINT, false); /* qparams differ */
    check_case(&avg_case, QF_REQUANT_ONNX, false);
}

static void test_mean(void)
{
    check_case(&gap_case, QF_REQUANT_FIXED_POINT, true);
    tcase rm = with(gap_case, false, 1), relu = with(gap_case, true, 0), shared = gap_case;
    check_case(&rm, QF_REQUANT_FIXED_POINT, true);
    check_case(&relu, QF_REQUANT_FIXED_POINT, true);
    shared.sy = mean_sx; /* neutron: the input's qparams */
    shared.zy = mean_zx;
    check_case(&shared, QF_REQUANT_FIXED_POINT, true);
    check_case(&gap_case, QF_REQUANT_ONNX, false);
}

static void test_matmul(void)
{
    check_case(&mm_case, QF_REQUANT_FIXED_POINT, true);
    tcase w = with(mm_case, false, 1), relu = with(mm_case, true, 0);
    w.nfeed = 1;
    check_case(&w, QF_REQUANT_FIXED_POINT, true);
    check_case(&relu, QF_REQUANT_FIXED_POINT, true);
}

static void test_conv_transpose(void)
{
    check_case(&ct_case, QF_REQUANT_FIXED_POINT, true);
    tcase grouped = with(ct_case, false, 1), relu = with(ct_case, true, 0);
    check_case(&grouped, QF_REQUANT_FIXED_POINT, true);
    check_case(&relu, QF_REQUANT_FIXED_POINT, true);
    check_case(&ct_case, QF_REQUANT_ONNX, false);
}

int main(void)
{
    RUN(test_mul);
    RUN(test_add_broadcast);
    RUN(test_concat);
    RUN(test_avg_pool);
    RUN(test_mean);
    RUN(test_matmul);
    RUN(test_conv_transpose);
    return qf_check_report();
}
