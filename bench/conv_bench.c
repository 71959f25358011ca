/* One oneDNN float convolution alone, timed: the standalone figure that
 * bench/run's in-plan convolutions are compared with (issue 12).
 *
 *   conv_bench MB IC OC IH IW K STRIDE PAD [LAYOUT [POST [ITERS [GROUPS]]]]
 *
 * GROUPS (default 1): grouped conv; GROUPS = IC = OC is a depthwise one.
 * LAYOUT: nhwc (the plan's), blocked (nChw16c activations), any (oneDNN's
 * choice), nchw_nhwc (NCHW source, NHWC destination); POST: none, relu, add_relu (a residual as a binary add post-op,
 * then relu: the plan's residual convs), sum_relu (the residual as a sum
 * post-op over dst, then relu), swish (SiLU, EfficientNet's), swish_sep (no
 * post-op, then a separate oneDNN swish eltwise in place over dst, timed
 * with the conv). Weights are always format any, reordered
 * once, as the plan does. Threads: OMP_NUM_THREADS. Prints the
 * implementation oneDNN picked, the median and fastest wall time over ITERS
 * (default 200) calls and their GFLOP/s.
 *
 * Not a test and not part of the library: built by hand,
 *   cc -O2 -std=c11 bench/conv_bench.c -ldnnl -o conv_bench
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <oneapi/dnnl/dnnl.h>

#define CHECK(x)                                                                    \
    do {                                                                            \
        dnnl_status_t s_ = (x);                                                     \
        if (s_ != dnnl_success) {                                                   \
            fprintf(stderr, "conv_bench: %s: status %d\n", #x, (int)s_);            \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void *buffer(const dnnl_memory_desc_t *md, float v)
{
    size_t n = dnnl_memory_desc_get_size(md);
    float *p = aligned_alloc(64, (n + 63) & ~(size_t)63);
    if (!p) exit(1);
    for (size_t i = 0; i < n / sizeof *p; i++) p[i] = v * (float)((i % 13) + 1) / 13.0f;
    return p;
}

int main(int argc, char **argv)
{
    if (argc < 9) {
        fprintf(stderr, "usage: conv_bench MB IC OC IH IW K STRIDE PAD [nhwc|blocked|any|nchw_nhwc [none|relu|swish|swish_sep|add_relu|sum_relu [ITERS [GROUPS]]]]\n");
        return 2;
    }
    int64_t mb = atoll(argv[1]), ic = atoll(argv[2]), oc = atoll(argv[3]), ih = atoll(argv[4]), iw = atoll(argv[5]);
    int64_t k = atoll(argv[6]), st = atoll(argv[7]), pad = atoll(argv[8]);
    const char *layout = argc > 9 ? argv[9] : "nhwc", *post = argc > 10 ? argv[10] : "relu";
    int iters = argc > 11 ? atoi(argv[11]) : 200;
    int64_t groups = argc > 12 ? atoll(argv[12]) : 1;
    if (groups < 1 || ic % groups || oc % groups) {
        fprintf(stderr, "conv_bench: GROUPS must divide IC and OC\n");
        return 2;
    }
    int64_t oh = (ih + 2 * pad - k) / st + 1, ow = (iw + 2 * pad - k) / st + 1;
    dnnl_format_tag_t tag = !strcmp(layout, "nhwc")      ? dnnl_nhwc
                            : !strcmp(layout, "blocked") ? dnnl_nChw16c
                                                         : dnnl_format_tag_any;
    dnnl_engine_t eng;
    dnnl_stream_t strm;
    CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CHECK(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags));
    dnnl_dims_t sd = {mb, ic, ih, iw}, dd = {mb, oc, oh, ow}, wd = {oc, ic, k, k}, bd = {oc};
    dnnl_dims_t gwd = {groups, oc / groups, ic / groups, k, k};
    const int wnd = groups > 1 ? 5 : 4;
    dnnl_dims_t strides = {st, st}, dil = {0, 0}, pads = {pad, pad};
    dnnl_memory_desc_t src_md, dst_md, w_md, w_user, b_md;
    /* nchw_nhwc: NCHW source, NHWC destination (a stem conv reading the
     * graph's NCHW input without a reorder before it). */
    const int plain_src = !strcmp(layout, "nchw_nhwc");
    if (plain_src) tag = dnnl_nhwc;
    CHECK(dnnl_memory_desc_init_by_tag(&src_md, 4, sd, dnnl_f32, plain_src ? dnnl_nchw : tag));
    CHECK(dnnl_memory_desc_init_by_tag(&dst_md, 4, dd, dnnl_f32, tag));
    CHECK(dnnl_memory_desc_init_by_tag(&w_md, wnd, groups > 1 ? gwd : wd, dnnl_f32, dnnl_format_tag_any));
    CHECK(dnnl_memory_desc_init_by_tag(&w_user, wnd, groups > 1 ? gwd : wd, dnnl_f32, groups > 1 ? dnnl_goihw : dnnl_oihw));
    CHECK(dnnl_memory_desc_init_by_tag(&b_md, 1, bd, dnnl_f32, dnnl_a));
    dnnl_convolution_desc_t cd;
    CHECK(dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct, &src_md,
                                                     &w_md, &b_md, &dst_md, strides, dil, pads, pads));
    dnnl_primitive_attr_t attr;
    dnnl_post_ops_t po;
    CHECK(dnnl_primitive_attr_create(&attr));
    CHECK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    CHECK(dnnl_post_ops_create(&po));
    int binary = !strcmp(post, "add_relu");
    if (!strcmp(post, "sum_relu")) CHECK(dnnl_post_ops_append_sum(po, 1.0f));
    if (binary) CHECK(dnnl_post_ops_append_binary(po, dnnl_binary_add, &dst_md));
    if (!strcmp(post, "swish"))
        CHECK(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_swish, 1.0f, 0.0f));
    else if (strcmp(post, "none") && strcmp(post, "swish_sep"))
        CHECK(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f));
    CHECK(dnnl_primitive_attr_set_post_ops(attr, po));
    dnnl_primitive_desc_t pd;
    CHECK(dnnl_primitive_desc_create(&pd, &cd, attr, eng, NULL));
    const char *impl = NULL;
    CHECK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl));
    dnnl_primitive_t prim;
    CHECK(dnnl_primitive_create(&prim, pd));
    const dnnl_memory_desc_t *src_q = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
    const dnnl_memory_desc_t *dst_q = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
    const dnnl_memory_desc_t *w_q = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    const dnnl_memory_desc_t *pad_q = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    dnnl_memory_t src, dst, w, b, sp, res = NULL;
    CHECK(dnnl_memory_create(&src, src_q, eng, buffer(src_q, 0.5f)));
    CHECK(dnnl_memory_create(&dst, dst_q, eng, buffer(dst_q, 0.0f)));
    CHECK(dnnl_memory_create(&w, w_q, eng, buffer(w_q, 0.01f)));
    CHECK(dnnl_memory_create(&b, &b_md, eng, buffer(&b_md, 0.1f)));
    CHECK(dnnl_memory_create(&sp, pad_q, eng, buffer(pad_q, 0.0f)));
    dnnl_exec_arg_t args[6] = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, b},
                               {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, sp}};
    int nargs = 5;
    if (binary) {
        CHECK(dnnl_memory_create(&res, dst_q, eng, buffer(dst_q, 0.2f)));
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, res};
    }
    /* swish_sep: the SiLU as its own in-place eltwise primitive after the conv. */
    dnnl_primitive_t elt = NULL;
    dnnl_exec_arg_t eargs[2] = {{DNNL_ARG_SRC, dst}, {DNNL_ARG_DST, dst}};
    if (!strcmp(post, "swish_sep")) {
        dnnl_eltwise_desc_t ed;
        dnnl_primitive_desc_t epd;
        CHECK(dnnl_eltwise_forward_desc_init(&ed, dnnl_forward_inference, dnnl_eltwise_swish, dst_q, 1.0f, 0.0f));
        CHECK(dnnl_primitive_desc_create(&epd, &ed, NULL, eng, NULL));
        CHECK(dnnl_primitive_create(&elt, epd));
    }
    double *t = malloc(sizeof *t * (size_t)iters);
    for (int i = 0; i < 10; i++) CHECK(dnnl_primitive_execute(prim, strm, nargs, args));
    CHECK(dnnl_stream_wait(strm));
    for (int i = 0; i < iters; i++) {
        double t0 = now_ms();
        CHECK(dnnl_primitive_execute(prim, strm, nargs, args));
        if (elt) CHECK(dnnl_primitive_execute(elt, strm, 2, eargs));
        CHECK(dnnl_stream_wait(strm));
        t[i] = now_ms() - t0;
    }
    qsort(t, (size_t)iters, sizeof *t, cmp);
    double gflop = 2.0 * (double)(mb * oc * oh * ow * (ic / groups) * k * k) / 1e9;
    printf("%-24s %s %-8s g%lld mb%lld ic%lld oc%lld %lldx%lld k%lld s%lld: median %.3f ms (%.0f GFLOP/s), fastest %.3f ms (%.0f GFLOP/s)\n",
           impl, layout, post, (long long)groups, (long long)mb, (long long)ic, (long long)oc, (long long)ih, (long long)iw, (long long)k,
           (long long)st, t[iters / 2], gflop / t[iters / 2] * 1e3, t[0], gflop / t[0] * 1e3);
    return 0;
}
