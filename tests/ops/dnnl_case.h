/* The case harness of test_dnnl_kernels.c: a small graph (the node under
 * test, then the nodes fused after it), its reference run (qf_node_eval, the
 * reference kernels) and the check of the node's .dnnl column against it in
 * a given layout (dc_check), or that the backend declines it (dc_declines).
 *
 *   dcase c;
 *   dc_init(&c, seed);
 *   qf_value *in[2] = {dc_val(&c, false, 0, 2, ad), dc_val(&c, true, 0, 2, bd)};
 *   dc_node(&c, QF_OP_MATMUL, 2, in);
 *   dc_check(&c, "matmul", 0, 0);
 *   dc_free(&c);
 *
 * Tolerance: |dnnl - ref| <= 1e-5 * max(|ref|, rms(ref)).
 * Both sides are float32 sums in different orders (oneDNN blocks the
 * reduction and uses FMA); for sums of up to ~600 products of O(1) values
 * that differs by a few 1e-7 of the result's scale, while an element near 0
 * after cancellation can only be judged against the tensor's scale (rms).
 * A wrong index, pad, group or post-op is off by O(1).
 *
 * Header-only (static functions): included once, by test_dnnl_kernels.c, in
 * its oneDNN part (QF_HAVE_DNNL).
 */
#ifndef QF_TEST_DNNL_CASE_H
#define QF_TEST_DNNL_CASE_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/dnnl/dnnl_lib.h"
#include "backend/dnnl/dnnl_kernels.h"
#include "ops/op_table.h"
#include "qfold/exec.h"
#include "tools/qf_check.h"

#define MAXV 32

/* A case: the graph, its node under test, the fused followers, and the
 * data of every graph input. */
typedef struct dcase {
    qf_graph *g;
    qf_node *n;
    qf_node *fused[4];
    int nfused;
    qf_value *vals[MAXV];
    qf_tensor data[MAXV]; /* data of vals[i] (inputs fed, activations computed) */
    int nvals;
    uint32_t seed;
} dcase;

static float frand(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static void dc_init(dcase *c, uint32_t seed)
{
    memset(c, 0, sizeof *c);
    c->seed = seed;
    REQUIRE_OK(qf_graph_init(&c->g));
    c->g->opset = 17;
}

static void dc_free(dcase *c)
{
    for (int i = 0; i < c->nvals; i++) qf_tensor_free(&c->data[i]);
    qf_graph_free(c->g);
    c->g = NULL;
}

static qf_tensor *dc_data(dcase *c, const qf_value *v)
{
    for (int i = 0; i < c->nvals; i++)
        if (c->vals[i] == v) return &c->data[i];
    return NULL;
}

/* A float tensor in [-1, 1] (lo..lo+2 shifted by `offset`): a constant when
 * `constant`, else a graph input fed at run time. */
static qf_value *dc_val(dcase *c, bool constant, float offset, int ndim, const int64_t *dims)
{
    qf_tensor t;
    REQUIRE_OK(qf_tensor_init(&t, QF_DTYPE_F32, ndim, dims));
    float *p = t.data;
    for (int64_t i = 0; i < qf_tensor_numel(&t); i++) p[i] = frand(&c->seed) + offset;
    char name[16];
    snprintf(name, sizeof name, "v%d", c->nvals);
    qf_value *v;
    if (constant) {
        qf_tensor copy;
        REQUIRE_OK(qf_tensor_init(&copy, QF_DTYPE_F32, ndim, dims));
        memcpy(copy.data, t.data, qf_tensor_nbytes(&t));
        v = qf_graph_add_constant(c->g, name, QF_VALUE_CONSTANT, &copy);
    } else {
        v = qf_graph_add_input(c->g, name, QF_DTYPE_F32, ndim, dims);
    }
    REQUIRE(v != NULL, "value: %s", qf_error_message());
    REQUIRE(c->nvals < MAXV, "too many values");
    c->vals[c->nvals] = v;
    c->data[c->nvals++] = t;
    return v;
}

static qf_value *dc_scalar(dcase *c, float x)
{
    qf_tensor t;
    REQUIRE_OK(qf_tensor_init(&t, QF_DTYPE_F32, 0, NULL));
    *(float *)t.data = x;
    char name[16];
    snprintf(name, sizeof name, "s%d", c->nvals);
    qf_value *v = qf_graph_add_constant(c->g, name, QF_VALUE_CONSTANT, &t);
    REQUIRE(v != NULL, "scalar: %s", qf_error_message());
    return v;
}

static qf_node *dc_node(dcase *c, qf_op op, int nin, qf_value *const *in)
{
    char name[16];
    snprintf(name, sizeof name, "n%d", c->nfused + (c->n ? 1 : 0));
    qf_node *n = qf_graph_add_node(c->g, op, name, nin, in, 1);
    REQUIRE(n != NULL, "node: %s", qf_error_message());
    if (!c->n)
        c->n = n;
    else
        c->fused[c->nfused++] = n;
    return n;
}

/* A follower reading the previous node's output. */
static qf_node *dc_follow(dcase *c, qf_op op)
{
    qf_node *last = c->nfused ? c->fused[c->nfused - 1] : c->n;
    qf_value *in[1] = {last->outputs[0]};
    return dc_node(c, op, 1, in);
}

/* An Add of the previous output and a fresh residual input (first or second). */
static void dc_follow_add(dcase *c, bool residual_first)
{
    qf_node *last = c->nfused ? c->fused[c->nfused - 1] : c->n;
    qf_value *y = last->outputs[0];
    REQUIRE_OK(qf_graph_infer_shapes(c->g));
    qf_value *r = dc_val(c, false, 0.0f, y->type.ndim, y->type.dims);
    qf_value *in[2] = {residual_first ? r : y, residual_first ? y : r};
    dc_node(c, QF_OP_ADD, 2, in);
}

static void set_ints(dcase *c, qf_node *n, const char *name, int count, const int64_t *v)
{
    REQUIRE_OK(qf_node_set_attr_ints(c->g, n, name, v, count));
}

/* NCHW <-> NHWC copies of a rank 3..5 float tensor with logical dims. */
static void to_nhwc(const qf_tensor *t, float *dst, bool back)
{
    const int64_t n = t->dims[0], ch = t->dims[1];
    int64_t sp = 1;
    for (int i = 2; i < t->ndim; i++) sp *= t->dims[i];
    float *src = t->data;
    for (int64_t b = 0; b < n; b++)
        for (int64_t k = 0; k < ch; k++)
            for (int64_t s = 0; s < sp; s++) {
                int64_t nchw = (b * ch + k) * sp + s, nhwc = (b * sp + s) * ch + k;
                if (back)
                    src[nchw] = dst[nhwc];
                else
                    dst[nhwc] = src[nchw];
            }
}

/* nChw16c (qf_kernel_io.blocked): floats of a 4-D tensor of logical dims d,
 * its channels padded to whole blocks, and the index of element (n, c, hw). */
static int64_t blk_numel(const int64_t *d)
{
    return d[0] * ((d[1] + QF_LAYOUT_BLOCK - 1) / QF_LAYOUT_BLOCK * QF_LAYOUT_BLOCK) * d[2] * d[3];
}

static int64_t blk_index(const int64_t *d, int64_t n, int64_t ch, int64_t hw)
{
    const int64_t B = QF_LAYOUT_BLOCK, nb = (d[1] + B - 1) / B, sp = d[2] * d[3];
    return ((n * nb + ch / B) * sp + hw) * B + ch % B;
}

/* A copy of NCHW tensor t in the layout a set layout bit means: NHWC, or
 * with `blocked` nChw16c, its pad channels 0 (as the plan's reorder and
 * every oneDNN kernel leave them). */
static float *dc_stored(const qf_tensor *t, bool blocked)
{
    if (!blocked) {
        float *b = malloc(qf_tensor_nbytes(t));
        to_nhwc(t, b, false);
        return b;
    }
    const int64_t *d = t->dims, sp = d[2] * d[3];
    float *b = calloc((size_t)blk_numel(d), sizeof *b);
    const float *x = t->data;
    for (int64_t n = 0; n < d[0]; n++)
        for (int64_t ch = 0; ch < d[1]; ch++)
            for (int64_t p = 0; p < sp; p++) b[blk_index(d, n, ch, p)] = x[(n * d[1] + ch) * sp + p];
    return b;
}

/* The NCHW copy of `stored`, a tensor of ref's dims in the layout of
 * dc_stored; for nChw16c, *pad_bad counts pad elements that are not 0 (the
 * next kernel reads them: a NaN there would spread through a 1x1 conv's
 * zero weights). */
static float *dc_logical(const qf_tensor *ref, float *stored, bool blocked, int64_t *pad_bad)
{
    float *nchw = malloc(qf_tensor_nbytes(ref));
    if (!blocked) {
        qf_tensor tmp = *ref;
        tmp.data = nchw;
        to_nhwc(&tmp, stored, true);
        return nchw;
    }
    const int64_t *d = ref->dims, sp = d[2] * d[3];
    for (int64_t n = 0; n < d[0]; n++) {
        for (int64_t ch = 0; ch < d[1]; ch++)
            for (int64_t p = 0; p < sp; p++) nchw[(n * d[1] + ch) * sp + p] = stored[blk_index(d, n, ch, p)];
        for (int64_t ch = d[1]; ch % QF_LAYOUT_BLOCK; ch++)
            for (int64_t p = 0; p < sp; p++) *pad_bad += stored[blk_index(d, n, ch, p)] != 0.0f;
    }
    return nchw;
}

/* Run the reference: the node, then every follower, on c->data. */
static void dc_run_ref(dcase *c)
{
    qf_node *all[5] = {c->n};
    for (int i = 0; i < c->nfused; i++) all[1 + i] = c->fused[i];
    for (int k = 0; k <= c->nfused; k++) {
        const qf_node *n = all[k];
        const qf_tensor *in[8] = {0};
        for (int i = 0; i < n->ninputs; i++) {
            const qf_value *v = n->inputs[i];
            if (!v) continue;
            in[i] = qf_value_is_const(v) ? &v->type : dc_data(c, v);
            REQUIRE(in[i] != NULL, "no data for input %d of %s", i, n->name);
        }
        qf_value *y = n->outputs[0];
        REQUIRE(c->nvals < MAXV, "too many values");
        REQUIRE_OK(qf_tensor_init(&c->data[c->nvals], y->type.dtype, y->type.ndim, y->type.dims));
        c->vals[c->nvals] = y;
        qf_tensor *out[1] = {&c->data[c->nvals++]};
        REQUIRE_OK(qf_node_eval(n, c->g->opset, in, out));
    }
}

/* The backend's prepare on the value types (as the plan calls it). */
typedef struct dk_run {
    const qf_backend_kernels *k;
    void *state_raw, *state;
    const qf_tensor *in_t[8], *post_t[4];
    qf_tensor *out_t[1];
    qf_kernel_io io;
} dk_run;

/* Set by the blocked tests (test_blocked): set bits mean nChw16c. */
static bool dk_blocked;

static qf_status dk_prepare(dcase *c, dk_run *r, uint32_t in_nhwc, uint32_t out_nhwc)
{
    memset(r, 0, sizeof *r);
    const qf_node *n = c->n;
    r->k = qf_backend_kernels_get(n->op);
    if (!r->k) return QF_ERR_INTERNAL;
    for (int i = 0; i < n->ninputs; i++) r->in_t[i] = n->inputs[i] ? &n->inputs[i]->type : NULL;
    const qf_node *last = c->nfused ? c->fused[c->nfused - 1] : n;
    r->out_t[0] = &last->outputs[0]->type;
    for (int i = 0; i < c->nfused; i++) {
        const qf_node *f = c->fused[i];
        r->post_t[i] = NULL;
        if (f->op == QF_OP_ADD) {
            const qf_value *prev = (i ? c->fused[i - 1] : n)->outputs[0];
            r->post_t[i] = &(f->inputs[0] == prev ? f->inputs[1] : f->inputs[0])->type;
        }
    }
    r->io = (qf_kernel_io){.node = n,
                           .opset = c->g->opset,
                           .nin = n->ninputs,
                           .nout = 1,
                           .in = r->in_t,
                           .out = r->out_t,
                           .in_nhwc = in_nhwc,
                           .out_nhwc = out_nhwc,
                           .blocked = dk_blocked,
                           .nfused = c->nfused,
                           .fused = (const qf_node *const *)c->fused,
                           .post_in = r->post_t};
    r->state_raw = calloc(1, r->k->state_size + 64);
    r->state = (void *)(((uintptr_t)r->state_raw + 63) & ~(uintptr_t)63);
    qf_status st = r->k->prepare(&r->io, r->state);
    if (st != QF_OK) {
        free(r->state_raw);
        r->state_raw = NULL;
    }
    return st;
}

/* The prepared kernel's forward with its scratch, twice (the state is
 * reused as the plan reuses it), then its state released. */
static qf_status dk_forward_twice(dk_run *r, const char *what)
{
    size_t scratch = r->k->scratch ? r->k->scratch(r->io.node, r->state) : 0;
    void *sraw = malloc(scratch + 64);
    r->io.state = r->state;
    r->io.scratch = (void *)(((uintptr_t)sraw + 63) & ~(uintptr_t)63);
    r->io.scratch_size = scratch;
    qf_status st = r->k->forward_f32(&r->io);
    CHECKF(st == QF_OK, "%s: forward: %s", what, qf_error_message());
    if (st == QF_OK) st = r->k->forward_f32(&r->io);
    if (r->k->release) r->k->release(r->state);
    free(r->state_raw);
    free(sraw);
    return st;
}

/* Prepare, run on the case's data in the given layouts (a set bit: NHWC, or
 * nChw16c with `blocked`), compare with the reference output (the last
 * node's). The output buffer starts as 0x7f bytes (3.4e38): the kernel must
 * write every element, and a blocked output's pad channels as 0. */
static void dc_check_layout(dcase *c, const char *what, uint32_t in_nhwc, uint32_t out_nhwc, bool blocked)
{
    REQUIRE_OK(qf_graph_infer_shapes(c->g));
    const qf_backend_kernels *bk = qf_backend_kernels_get(c->n->op);
    const char *lay = blocked ? "blocked" : "nhwc";
    dk_run r;
    dk_blocked = blocked;
    if (bk && bk->accepts && !bk->accepts(c->n)) {
        /* A node the backend does not take (a Conv whose W is computed at
         * run time) must not be half-taken either: prepare declines it,
         * and the plan runs it on the reference kernel (engine_parity). */
        qf_error_clear();
        qf_status st = dk_prepare(c, &r, in_nhwc, out_nhwc);
        dk_blocked = false;
        REQUIRE(st == QF_ERR_UNSUPPORTED, "%s: not accepted, yet prepare returned %d", what, (int)st);
        return;
    }
    dc_run_ref(c);
    qf_error_clear();
    qf_status st = dk_prepare(c, &r, in_nhwc, out_nhwc);
    dk_blocked = false;
    REQUIRE(st == QF_OK, "%s (%s): the backend declined or failed (%d: %s)", what, lay, (int)st,
            qf_error_message());
    const qf_node *n = c->n;
    /* Run-time tensors: data, copies in the other layout where asked. */
    qf_tensor in_run[8], post_run[4], out_run;
    float *bufs[12] = {0};
    int nbufs = 0;
    for (int i = 0; i < n->ninputs; i++) {
        r.in_t[i] = NULL;
        if (!n->inputs[i]) continue;
        const qf_value *v = n->inputs[i];
        const qf_tensor *t = qf_value_is_const(v) ? &v->type : dc_data(c, v);
        in_run[i] = *t;
        if (in_nhwc >> i & 1u) in_run[i].data = bufs[nbufs++] = dc_stored(t, blocked);
        r.in_t[i] = &in_run[i];
    }
    for (int i = 0; i < c->nfused; i++) {
        if (!r.post_t[i]) continue;
        const qf_value *prev = (i ? c->fused[i - 1] : n)->outputs[0];
        const qf_node *f = c->fused[i];
        const qf_tensor *t = dc_data(c, f->inputs[0] == prev ? f->inputs[1] : f->inputs[0]);
        post_run[i] = *t;
        if (out_nhwc & 1u) post_run[i].data = bufs[nbufs++] = dc_stored(t, blocked);
        r.post_t[i] = &post_run[i];
    }
    const qf_tensor *ref = &c->data[c->nvals - 1];
    const size_t ybytes =
        (out_nhwc & 1u) && blocked ? (size_t)blk_numel(ref->dims) * sizeof(float) : qf_tensor_nbytes(ref);
    qf_tensor_view(&out_run, QF_DTYPE_F32, ref->ndim, ref->dims, NULL);
    float *yb = malloc(ybytes);
    memset(yb, 0x7f, ybytes);
    out_run.data = yb;
    r.out_t[0] = &out_run;
    st = dk_forward_twice(&r, what);
    float *got = yb, *nchw = NULL;
    int64_t pad_bad = 0;
    if (out_nhwc & 1u) got = nchw = dc_logical(ref, yb, blocked, &pad_bad);
    const float *want = ref->data;
    const int64_t count = qf_tensor_numel(ref);
    double ss = 0;
    for (int64_t i = 0; i < count; i++)
        if (!isnan(want[i])) ss += (double)want[i] * want[i];
    const double rms = count ? sqrt(ss / (double)count) : 0;
    /* A Winograd conv (blocked in and out, qf_dnnl_conv_winograd) is held to
     * 2e-5: its F(4x4, 3x3) transforms (points 0, +-1, +-2, +-1/2) round more
     * than a direct sum; measured worst 1.1e-5 of max(|ref|, rms) over the
     * cases of test_blocked, against 1.4e-6 for the direct kernel. The plan
     * around it is still held to 1e-5 of the largest output
     * (tests/exec/test_plan_layout.c). */
    const double tol = blocked && (in_nhwc & 1u) && (out_nhwc & 1u) && qf_dnnl_conv_winograd(n) ? 2e-5 : 1e-5;
    int64_t bad = 0;
    double worst = 0;
    for (int64_t i = 0; i < count; i++) {
        double d = fabs((double)got[i] - want[i]), scale = fmax(fabs(want[i]), rms);
        bool ok = d <= tol * scale || (isnan(got[i]) && isnan(want[i]));
        if (!ok && bad++ < 3)
            fprintf(stderr, "  %s: [%lld] dnnl %.9g, ref %.9g\n", what, (long long)i, got[i],
                    want[i]);
        if (d / (scale > 0 ? scale : 1) > worst) worst = d / (scale > 0 ? scale : 1);
    }
    CHECKF(st == QF_OK && bad == 0 && pad_bad == 0,
           "%s (%s, in %u, out %u): %lld of %lld elements off, worst %.3g; %lld pad elements not 0", what, lay,
           in_nhwc, out_nhwc, (long long)bad, (long long)count, worst, (long long)pad_bad);
    for (int i = 0; i < nbufs; i++) free(bufs[i]);
    free(yb);
    free(nchw);
}

static void dc_check(dcase *c, const char *what, uint32_t in_nhwc, uint32_t out_nhwc)
{
    dc_check_layout(c, what, in_nhwc, out_nhwc, false);
}

/* Set bits mean nChw16c (qf_kernel_io.blocked). */
static void dc_check_blocked(dcase *c, const char *what, uint32_t in_bits, uint32_t out_bit)
{
    dc_check_layout(c, what, in_bits, out_bit, true);
}

/* The layouts a spatial case runs in: NCHW, NHWC, and the two mixed ones. */
static const uint32_t layouts[4][2] = {{0, 0}, {1, 1}, {1, 0}, {0, 1}};

/* The backend must decline (QF_ERR_UNSUPPORTED, no message). */
static void dc_declines(dcase *c, const char *what)
{
    REQUIRE_OK(qf_graph_infer_shapes(c->g));
    dk_run r;
    qf_error_clear();
    qf_status st = dk_prepare(c, &r, 0, 0);
    CHECKF(st == QF_ERR_UNSUPPORTED && strcmp(qf_error_message(), "no error") == 0,
           "%s: prepare gave %d (%s), want a decline", what, (int)st, qf_error_message());
    if (st == QF_OK) {
        r.k->release(r.state);
        free(r.state_raw);
    }
}

#endif /* QF_TEST_DNNL_CASE_H */
