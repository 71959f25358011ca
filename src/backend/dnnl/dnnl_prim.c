/* What the oneDNN kernels share (dnnl_kernels.h): building a primitive with
 * a user-managed scratchpad and post-ops, binding its memory objects, the one
 * generic forward, and which followers can be fused as post-ops. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/parallel.h"
#include "backend/dnnl/dnnl_kernels.h"
#include "ops/int8/qlinear.h"

/* Descriptor-stage failures that mean "oneDNN does not do this node":
 * unimplemented, and invalid arguments (a geometry oneDNN rejects that the
 * reference kernels take, e.g. a padding it considers inconsistent). */
static qf_status dk_try(const qf_node *n, dnnl_status_t s, const char *what)
{
    if (s == dnnl_unimplemented || s == dnnl_invalid_arguments) return QF_DK_DECLINE;
    return qf_dnnl_check(n, s, what);
}

qf_status qf_dk_begin(qf_dk_build *b, const qf_kernel_io *io, qf_dk_prim *p)
{
    memset(b, 0, sizeof *b);
    b->io = io;
    b->p = p;
    const qf_node *n = io->node;
    QF_TRY(qf_dnnl_check(n, QF_DNNL(primitive_attr_create)(&b->attr), "attributes"));
    qf_status st = qf_dnnl_check(
        n, QF_DNNL(primitive_attr_set_scratchpad_mode)(b->attr, dnnl_scratchpad_mode_user),
        "scratchpad mode");
    if (st == QF_OK) st = qf_dnnl_check(n, QF_DNNL(post_ops_create)(&b->po), "post-ops");
    if (st != QF_OK) qf_dk_abort(b);
    return st;
}

void qf_dk_abort(qf_dk_build *b)
{
    if (b->po) QF_DNNL(post_ops_destroy)(b->po);
    if (b->attr) QF_DNNL(primitive_attr_destroy)(b->attr);
    b->po = NULL;
    b->attr = NULL;
}

qf_status qf_dk_post_eltwise(qf_dk_build *b, dnnl_alg_kind_t alg, float alpha, float beta)
{
    QF_TRY(qf_dnnl_check(b->io->node,
                         QF_DNNL(post_ops_append_eltwise)(b->po, 1.0f, alg, alpha, beta),
                         "eltwise post-op"));
    b->npo++;
    return QF_OK;
}

/* A constant scalar float input of n (Clip's min / max), or the attribute
 * of older opsets, or `dflt`. False when the input is not a constant. */
static bool dk_scalar_bound(const qf_node *n, int i, const char *attr, float dflt, float *v)
{
    *v = qf_node_attr_float(n, attr, dflt);
    if (i >= n->ninputs || !n->inputs[i]) return true;
    const qf_value *c = n->inputs[i];
    if (!qf_value_is_const(c) || c->type.dtype != QF_DTYPE_F32 || qf_tensor_numel(&c->type) != 1)
        return false;
    *v = *(const float *)c->type.data;
    return true;
}

bool qf_dk_eltwise_of(const qf_node *n, dnnl_alg_kind_t *alg, float *alpha, float *beta)
{
    *alpha = *beta = 0.0f;
    switch (n->op) {
    case QF_OP_RELU: *alg = dnnl_eltwise_relu; return true;
    case QF_OP_RELU6:
        *alg = dnnl_eltwise_clip;
        *beta = 6.0f;
        return true;
    case QF_OP_CLIP:
        *alg = dnnl_eltwise_clip;
        return dk_scalar_bound(n, 1, "min", -INFINITY, alpha) &&
               dk_scalar_bound(n, 2, "max", INFINITY, beta);
    case QF_OP_LEAKY_RELU:
        *alg = dnnl_eltwise_relu;
        *alpha = qf_node_attr_float(n, "alpha", 0.01f);
        return true;
    case QF_OP_SIGMOID: *alg = dnnl_eltwise_logistic; return true;
    case QF_OP_TANH: *alg = dnnl_eltwise_tanh; return true;
    case QF_OP_HARD_SWISH: *alg = dnnl_eltwise_hardswish; return true;
    default: return false;
    }
}

/* HardSigmoid as two post-ops: alpha * x + beta, then clip to [0, 1]. */
static bool dk_is_hard_sigmoid(const qf_node *n) { return n->op == QF_OP_HARD_SIGMOID; }

static bool dk_same_shape(const qf_tensor *a, const qf_tensor *b)
{
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i]) return false;
    return true;
}

static bool dk_producer_fuses(qf_op op)
{
    return op == QF_OP_CONV || op == QF_OP_CONV_TRANSPOSE || op == QF_OP_GEMM ||
           op == QF_OP_MATMUL || op == QF_OP_LINEAR;
}

/* The follower's input that is not `from` (an Add's residual), or NULL. */
static const qf_value *dk_other_operand(const qf_node *f, const qf_value *from)
{
    if (f->ninputs != 2 || !f->inputs[0] || !f->inputs[1]) return NULL;
    if (f->inputs[0] == from && f->inputs[1] != from) return f->inputs[1];
    if (f->inputs[1] == from && f->inputs[0] != from) return f->inputs[0];
    return NULL;
}

/* SiLU: the Sigmoid s reading `from` when mul is Mul(from, s) or Mul(s, from)
 * of from's shape, else NULL. The pair is one swish post-op,
 * from * logistic(from). */
static const qf_node *dk_swish_sigmoid(const qf_node *mul, const qf_value *from)
{
    if (mul->op != QF_OP_MUL || mul->noutputs != 1 || !mul->outputs[0]) return NULL;
    const qf_value *s = dk_other_operand(mul, from);
    const qf_node *sg = s ? s->producer : NULL;
    if (!sg || sg->op != QF_OP_SIGMOID || sg->ninputs != 1 || sg->inputs[0] != from ||
        s->type.dtype != QF_DTYPE_F32 || !dk_same_shape(&mul->outputs[0]->type, &from->type))
        return NULL;
    return sg;
}

/* Whether follower f, reading `from` (the output of the producer or of the
 * previous fused node), can be a post-op. */
static bool dk_follower_ok(const qf_node *f, const qf_value *from)
{
    if (f->noutputs != 1 || !f->outputs[0] || f->outputs[0]->type.dtype != QF_DTYPE_F32)
        return false;
    if (from->type.dtype != QF_DTYPE_F32) return false;
    if (f->op == QF_OP_MUL) return dk_swish_sigmoid(f, from) != NULL;
    if (f->op == QF_OP_ADD) {
        const qf_value *o = dk_other_operand(f, from);
        return o && o->type.dtype == QF_DTYPE_F32 && dk_same_shape(&o->type, &from->type) &&
               dk_same_shape(&f->outputs[0]->type, &from->type);
    }
    if (f->ninputs < 1 || f->inputs[0] != from) return false;
    dnnl_alg_kind_t alg;
    float a, b;
    return dk_is_hard_sigmoid(f) || qf_dk_eltwise_of(f, &alg, &a, &b);
}

/* A SiLU fused into a k x k or depthwise conv (b->silu_ok) whose output
 * holds at least this many elements runs after the primitive as qfold's own
 * in-place pass (dk_silu) instead of oneDNN 2.6's swish post-op, which costs
 * those kernels more than the pass: EfficientNet-B0 at batch 8, 2 threads,
 * the depthwise 144ch 56x56 conv 1.68 ms with the post-op against 0.61 +
 * 0.61 for the conv and the pass (bench/run.md, session 11). Smaller
 * outputs stay in cache, where the post-op is cheaper than a second pass
 * and its fork and join (every one at batch 1; at batch 8 the 1-1.5 M
 * element ones at 28x28 and 14x14 won or lost by 10 %). */
#define QF_DK_SILU_SPLIT (1 << 21)
static int64_t dk_silu_split_min = QF_DK_SILU_SPLIT;

void qf_dk_set_silu_split(int64_t elements) { dk_silu_split_min = elements < 0 ? QF_DK_SILU_SPLIT : elements; }

static bool dk_silu_split(const qf_dk_build *b, const qf_value *from)
{
    /* The pass covers numel elements: not a blocked output with pad
     * channels (its data spans more). */
    const qf_tensor *y = b->io->nout == 1 ? b->io->out[0] : NULL;
    if (y && b->io->blocked && (b->io->out_nhwc & 1u) && y->ndim == 4 && y->dims[1] % QF_LAYOUT_BLOCK) return false;
    return b->silu_ok && b->io->nout == 1 && qf_tensor_numel(b->io->out[0]) >= dk_silu_split_min &&
           qf_tensor_numel(&from->type) == qf_tensor_numel(b->io->out[0]);
}

qf_status qf_dk_post_fused(qf_dk_build *b, const dnnl_memory_desc_t *dst_md)
{
    const qf_kernel_io *io = b->io;
    const qf_node *n = io->node;
    const qf_value *from = n->noutputs > 0 ? n->outputs[0] : NULL;
    for (int i = 0; i < io->nfused; i++) {
        const qf_node *f = io->fused[i];
        if (!from || !dk_follower_ok(f, from)) return QF_DK_DECLINE;
        /* SiLU, fused as the pair Sigmoid(from), Mul(from, that): one swish
         * post-op (a Mul on its own is none). */
        if (f->op == QF_OP_SIGMOID && i + 1 < io->nfused && dk_swish_sigmoid(io->fused[i + 1], from) == f) {
            if (i + 2 == io->nfused && dk_silu_split(b, from))
                b->p->silu_after = true;
            else
                QF_TRY(qf_dk_post_eltwise(b, dnnl_eltwise_swish, 1.0f, 0.0f));
            from = io->fused[++i]->outputs[0];
            continue;
        }
        if (f->op == QF_OP_MUL) return QF_DK_DECLINE;
        if (f->op == QF_OP_ADD) {
            const qf_tensor *t = io->post_in ? io->post_in[i] : NULL;
            if (!t || t->dtype != QF_DTYPE_F32) return QF_DK_DECLINE;
            if (b->sum_ok && !b->p->sum_post) {
                /* Y = ... + Y, Y holding the operand when the kernel starts
                 * (same shape and layout as Y: dk_follower_ok, the plan). */
                QF_TRY(qf_dnnl_check(n, QF_DNNL(post_ops_append_sum)(b->po, 1.0f), "sum post-op"));
                b->p->sum_post = i + 1;
                b->npo++;
                from = f->outputs[0];
                continue;
            }
            QF_TRY(qf_dnnl_check(n, QF_DNNL(post_ops_append_binary)(b->po, dnnl_binary_add, dst_md),
                                 "binary post-op"));
            /* Bound once the primitive exists (qf_dk_finish): remember which. */
            b->p->args[b->p->nargs++] =
                (qf_dk_arg){.arg = DNNL_ARG_ATTR_MULTIPLE_POST_OP(b->npo) | DNNL_ARG_SRC_1,
                            .source = QF_DK_POST,
                            .index = i};
            b->npo++;
        } else if (dk_is_hard_sigmoid(f)) {
            QF_TRY(qf_dk_post_eltwise(b, dnnl_eltwise_linear, qf_node_attr_float(f, "alpha", 0.2f),
                                      qf_node_attr_float(f, "beta", 0.5f)));
            QF_TRY(qf_dk_post_eltwise(b, dnnl_eltwise_clip, 0.0f, 1.0f));
        } else {
            dnnl_alg_kind_t alg;
            float alpha, beta;
            if (!qf_dk_eltwise_of(f, &alg, &alpha, &beta)) return QF_DK_DECLINE;
            QF_TRY(qf_dk_post_eltwise(b, alg, alpha, beta));
        }
        from = f->outputs[0];
    }
    return QF_OK;
}

/* A node whose tensors (first input, weights, output) hold at most this
 * many elements together runs its primitive on the calling thread alone
 * (squeeze-excite's 1x1 convs and the pools before them at batch 1): its
 * work is a few microseconds, the fork and join of oneDNN's OpenMP team
 * about as much, and on a busy machine a team thread that is not running
 * makes the join wait a time slice.
 *
 * With libgomp's short wait (qf_dnnl_lib.short_wait: the spin qfold sets on
 * a busy machine, or OMP_WAIT_POLICY=passive) the team's threads sleep
 * between two primitives and every threaded one pays their futex wake-up
 * and the wait for a core, so the bound is 4x larger: at batch 1 on 2
 * cores, load average 7-10, mobilenet_v2's threaded primitives per run went
 * from 53 to 17 and its fastest run from 5.1-6.0 to 4.3-4.7 ms (medians
 * 5.7-22 to 4.7-5.7 ms), efficientnet_b0's from 9.5-10.7 to 8.3-9.7 ms
 * (bench/run.md, session 12). A bound of 1Mi elements gained little more
 * and left efficientnet_b0 mostly a one-thread process, which the scheduler
 * gives half the CPU share of two (medians up to 33-48 ms). */
#define QF_DK_SERIAL_MAX            65536
#define QF_DK_SERIAL_MAX_SHORT_WAIT 262144
static int64_t dk_serial_max = -1; /* -1: by libgomp's wait */

void qf_dk_set_serial_max(int64_t elements) { dk_serial_max = elements < 0 ? -1 : elements; }

static bool dk_tiny(const qf_kernel_io *io)
{
    const int64_t max = dk_serial_max >= 0        ? dk_serial_max
                        : qf_dnnl_lib_.short_wait ? QF_DK_SERIAL_MAX_SHORT_WAIT
                                                  : QF_DK_SERIAL_MAX;
    int64_t e = 0;
    for (int i = 0; i < io->nin && i < 2; i++)
        if (io->in[i]) e += qf_tensor_numel(io->in[i]);
    for (int i = 0; i < io->nout; i++) e += qf_tensor_numel(io->out[i]);
    return e <= max;
}

/* oneDNN reads the OpenMP thread count when it creates a primitive (its
 * kernels split the work for that many) and when it runs one: one thread
 * for a serial node (returns the count to restore), then that count back. */
static int dk_serial_begin(void)
{
    const qf_dnnl_lib *d = &qf_dnnl_lib_;
    if (!d->omp_set_threads) return 0;
    int was = d->omp_max_threads();
    if (was > 1) d->omp_set_threads(1);
    return was;
}

static void dk_serial_end(int was)
{
    const qf_dnnl_lib *d = &qf_dnnl_lib_;
    if (d->omp_set_threads && was > 1) d->omp_set_threads(was);
}

qf_status qf_dk_finish(qf_dk_build *b, const void *op_desc)
{
    const qf_node *n = b->io->node;
    qf_dk_prim *p = b->p;
    qf_status st = QF_OK;
    p->serial = dk_tiny(b->io);
    if (b->npo)
        st = qf_dnnl_check(n, QF_DNNL(primitive_attr_set_post_ops)(b->attr, b->po), "post-ops");
    const int was = p->serial ? dk_serial_begin() : 0;
    if (st == QF_OK)
        st = dk_try(
            n, QF_DNNL(primitive_desc_create)(&p->pd, op_desc, b->attr, qf_dnnl()->engine, NULL),
            "primitive descriptor");
    qf_dk_abort(b);
    /* Blocked operands where oneDNN 2.6 has only its reference kernel (a
     * blocked input of a few channels into a k x k conv: 600x slower than
     * its jit one): declined, and the plan goes NHWC. */
    const char *impl = NULL;
    if (st == QF_OK && b->io->blocked && (b->io->in_nhwc || b->io->out_nhwc) &&
        QF_DNNL(primitive_desc_query)(p->pd, dnnl_query_impl_info_str, 0, (void *)&impl) == dnnl_success && impl &&
        !strncmp(impl, "ref", 3))
        st = QF_DK_DECLINE;
    if (st == QF_OK) st = qf_dnnl_primitive_create(n, &p->prim, p->pd, "primitive");
    dk_serial_end(was);
    QF_TRY(st);
    /* The memory objects of the binary post-op operands, recorded by
     * qf_dk_post_fused before the primitive descriptor existed. */
    for (int i = 0; i < p->nargs; i++) {
        qf_dk_arg *a = &p->args[i];
        if (a->mem) continue;
        const dnnl_memory_desc_t *md =
            QF_DNNL(primitive_desc_query_md)(p->pd, dnnl_query_exec_arg_md, a->arg);
        if (!md)
            return qf_error(QF_ERR_INTERNAL, "node '%s' (%s): oneDNN has no post-op operand",
                            n->name, qf_op_label(n));
        QF_TRY(qf_dnnl_check(
            n, QF_DNNL(memory_create)(&a->mem, md, qf_dnnl()->engine, DNNL_MEMORY_NONE), "memory"));
    }
    const dnnl_memory_desc_t *smd =
        QF_DNNL(primitive_desc_query_md)(p->pd, dnnl_query_scratchpad_md, 0);
    p->scratch = smd ? QF_DNNL(memory_desc_get_size)(smd) : 0;
    if (p->scratch) QF_TRY(qf_dk_bind(p, DNNL_ARG_SCRATCHPAD, QF_DK_SCRATCH, 0, smd, NULL));
    return QF_OK;
}

qf_status qf_dk_bind(qf_dk_prim *p, int arg, qf_dk_source source, int index,
                     const dnnl_memory_desc_t *md, void *data)
{
    if (p->nargs >= QF_DK_MAX_ARGS)
        return qf_error(QF_ERR_INTERNAL, "oneDNN kernel: too many arguments");
    qf_dk_arg *a = &p->args[p->nargs];
    *a = (qf_dk_arg){.arg = arg, .source = source, .index = index};
    QF_TRY(qf_dnnl_check(NULL,
                         QF_DNNL(memory_create)(&a->mem, md, qf_dnnl()->engine,
                                                source == QF_DK_FIXED ? data : DNNL_MEMORY_NONE),
                         "memory"));
    p->nargs++;
    return QF_OK;
}

const dnnl_memory_desc_t *qf_dk_query(const qf_dk_prim *p, dnnl_query_t what, int index)
{
    return QF_DNNL(primitive_desc_query_md)(p->pd, what, index);
}

/* Run a reorder of src (src_md) into dst (dst_md) now, on the stream. */
static qf_status dk_reorder_now(const dnnl_memory_desc_t *src_md, const void *src,
                                const dnnl_memory_desc_t *dst_md, void *dst)
{
    const qf_dnnl_lib *d = qf_dnnl();
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_primitive_t r = NULL;
    dnnl_memory_t ms = NULL, md = NULL;
    qf_status st = qf_dnnl_check(
        NULL,
        QF_DNNL(reorder_primitive_desc_create)(&rpd, src_md, d->engine, dst_md, d->engine, NULL),
        "weights reorder");
    if (st == QF_OK)
        st = qf_dnnl_primitive_create(NULL, &r, rpd, "weights reorder");
    if (st == QF_OK)
        st = qf_dnnl_check(NULL, QF_DNNL(memory_create)(&ms, src_md, d->engine, (void *)src),
                           "memory");
    if (st == QF_OK)
        st = qf_dnnl_check(NULL, QF_DNNL(memory_create)(&md, dst_md, d->engine, dst), "memory");
    if (st == QF_OK) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, ms}, {DNNL_ARG_TO, md}};
        st = qf_dnnl_check(NULL, QF_DNNL(primitive_execute)(r, d->stream, 2, args),
                           "weights reorder");
        if (st == QF_OK)
            st = qf_dnnl_check(NULL, QF_DNNL(stream_wait)(d->stream), "weights reorder");
    }
    if (md) QF_DNNL(memory_destroy)(md);
    if (ms) QF_DNNL(memory_destroy)(ms);
    if (r) QF_DNNL(primitive_destroy)(r);
    if (rpd) QF_DNNL(primitive_desc_destroy)(rpd);
    return st;
}

qf_status qf_dk_bind_const(qf_dk_prim *p, int arg, const dnnl_memory_desc_t *user_md,
                           const void *data, const dnnl_memory_desc_t *want, int slot)
{
    if (QF_DNNL(memory_desc_equal)(user_md, want))
        return qf_dk_bind(p, arg, QF_DK_FIXED, 0, user_md, (void *)data);
    /* 64-byte aligned inside the allocation: the blocked kernels load whole
     * cache lines of weights. */
    size_t size = QF_DNNL(memory_desc_get_size)(want);
    void *raw = qf_malloc(size + 64);
    if (!raw) return QF_ERR_NOMEM;
    p->owned[slot] = raw;
    void *buf = (void *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
    QF_TRY(dk_reorder_now(user_md, data, want, buf));
    return qf_dk_bind(p, arg, QF_DK_FIXED, 0, want, buf);
}

static qf_status dk_md(dnnl_memory_desc_t *md, int ndim, const int64_t *dims, dnnl_format_tag_t tag,
                       const int64_t *strides)
{
    dnnl_dims_t d, s;
    if (ndim < 1 || ndim > DNNL_MAX_NDIMS) return QF_DK_DECLINE;
    for (int i = 0; i < ndim; i++) {
        d[i] = dims[i];
        if (strides) s[i] = strides[i];
    }
    dnnl_status_t r = strides ? QF_DNNL(memory_desc_init_by_strides)(md, ndim, d, dnnl_f32, s)
                              : QF_DNNL(memory_desc_init_by_tag)(md, ndim, d, dnnl_f32, tag);
    return dk_try(NULL, r, "memory descriptor");
}

qf_status qf_dk_md_plain(dnnl_memory_desc_t *md, int ndim, const int64_t *dims)
{
    int64_t s[DNNL_MAX_NDIMS];
    if (ndim < 1 || ndim > DNNL_MAX_NDIMS) return QF_DK_DECLINE;
    s[ndim - 1] = 1;
    for (int i = ndim - 2; i >= 0; i--) s[i] = s[i + 1] * dims[i + 1];
    return dk_md(md, ndim, dims, dnnl_format_tag_undef, s);
}

qf_status qf_dk_md_strided(dnnl_memory_desc_t *md, int ndim, const int64_t *dims,
                           const int64_t *strides)
{
    return dk_md(md, ndim, dims, dnnl_format_tag_undef, strides);
}

qf_status qf_dk_md_any(dnnl_memory_desc_t *md, int ndim, const int64_t *dims)
{
    return dk_md(md, ndim, dims, dnnl_format_tag_any, NULL);
}

static bool dk_tensor_ok(const qf_tensor *t)
{
    if (t->dtype != QF_DTYPE_F32 || t->ndim < 0 || t->ndim > 5) return false;
    for (int i = 0; i < t->ndim; i++)
        if (t->dims[i] < 1) return false;
    return true;
}

bool qf_dk_all_f32(const qf_kernel_io *io)
{
    for (int i = 0; i < io->nin; i++)
        if (io->in[i] && !dk_tensor_ok(io->in[i])) return false;
    for (int i = 0; i < io->nout; i++)
        if (!dk_tensor_ok(io->out[i])) return false;
    for (int i = 0; i < io->nfused; i++)
        if (io->post_in && io->post_in[i] && !dk_tensor_ok(io->post_in[i])) return false;
    return true;
}

/* y = SiLU(y) in place after the primitive, serial nodes on this thread;
 * qf_parallel_for runs it on oneDNN's OpenMP team, whose threads are still
 * spinning from the primitive (qf_parallel_set_runner). */
static void dk_silu(float *y, int64_t n, bool serial)
{
    if (serial)
        qf_silu_f32_inplace_slice(y, 0, n);
    else
        qf_parallel_for(n, 32768, qf_silu_f32_inplace_slice, y);
}

qf_status qf_dk_forward(const qf_kernel_io *io)
{
    const qf_dk_prim *p = io->state;
    const qf_node *n = io->node;
    if (io->scratch_size < p->scratch)
        return qf_error(QF_ERR_INTERNAL, "node '%s' (%s): scratch of %zu bytes, oneDNN needs %zu",
                        n->name, qf_op_label(n), io->scratch_size, p->scratch);
    if (p->sum_post) {
        /* The sum post-op adds what Y holds: the residual, unless the plan
         * placed Y over it (qf_dk_dst_post). */
        const void *r = io->post_in[p->sum_post - 1]->data;
        if (r != io->out[0]->data) {
            /* Y's bytes as the primitive lays them out (a blocked Y's pad
             * channels too). */
            const dnnl_memory_desc_t *md = QF_DNNL(primitive_desc_query_md)(p->pd, dnnl_query_dst_md, 0);
            memcpy(io->out[0]->data, r, md ? QF_DNNL(memory_desc_get_size)(md) : qf_tensor_nbytes(io->out[0]));
        }
    }
    dnnl_exec_arg_t args[QF_DK_MAX_ARGS];
    for (int i = 0; i < p->nargs; i++) {
        const qf_dk_arg *a = &p->args[i];
        void *data = NULL;
        switch (a->source) {
        case QF_DK_IN: data = io->in[a->index]->data; break;
        case QF_DK_OUT: data = io->out[a->index]->data; break;
        case QF_DK_POST: data = io->post_in[a->index]->data; break;
        case QF_DK_SCRATCH: data = io->scratch; break;
        case QF_DK_FIXED: break;
        }
        if (a->source != QF_DK_FIXED)
            QF_TRY(qf_dnnl_check(n, QF_DNNL(memory_set_data_handle)(a->mem, data), "memory"));
        args[i] = (dnnl_exec_arg_t){a->arg, a->mem};
    }
    const qf_dnnl_lib *d = &qf_dnnl_lib_;
    const int was = p->serial ? dk_serial_begin() : 0;
    qf_status st = qf_dnnl_check(n, QF_DNNL(primitive_execute)(p->prim, d->stream, p->nargs, args), "execute");
    if (st == QF_OK) st = qf_dnnl_check(n, QF_DNNL(stream_wait)(d->stream), "execute");
    dk_serial_end(was);
    if (st == QF_OK && p->silu_after) dk_silu(io->out[0]->data, qf_tensor_numel(io->out[0]), p->serial);
    return st;
}

void qf_dk_release(void *state)
{
    qf_dk_prim *p = state;
    for (int i = 0; i < p->nargs; i++)
        if (p->args[i].mem) QF_DNNL(memory_destroy)(p->args[i].mem);
    if (p->prim) QF_DNNL(primitive_destroy)(p->prim);
    if (p->pd) QF_DNNL(primitive_desc_destroy)(p->pd);
    qf_free(p->owned[0]);
    qf_free(p->owned[1]);
    memset(p, 0, sizeof *p);
}

int qf_dk_dst_post(const void *state)
{
    return state ? ((const qf_dk_prim *)state)->sum_post - 1 : -1;
}

size_t qf_dk_scratch(const qf_node *n, const void *state)
{
    (void)n;
    return state ? ((const qf_dk_prim *)state)->scratch : 0;
}

/* A node that could itself have been fused as a post-op (the chain
 * producer -> Relu -> ... ): eltwise-able unary activations, Add, and the Mul
 * of a SiLU. */
static bool dk_post_op_kind(const qf_node *q)
{
    dnnl_alg_kind_t alg;
    float a, b;
    if (q->op == QF_OP_MUL)
        return q->ninputs == 2 && ((q->inputs[0] && dk_swish_sigmoid(q, q->inputs[0])) ||
                                   (q->inputs[1] && dk_swish_sigmoid(q, q->inputs[1])));
    return q->op == QF_OP_ADD || dk_is_hard_sigmoid(q) || qf_dk_eltwise_of(q, &alg, &a, &b);
}

bool qf_dnnl_can_fuse(const qf_node *producer, const qf_node *follower)
{
    if (producer && follower && producer->op == QF_OP_QLINEAR_CONV) return qf_qdnnl_can_fuse(producer, follower);
    if (!producer || !follower || !dk_producer_fuses(producer->op) || producer->noutputs != 1)
        return false;
    /* The follower reads the producer's output, or (the plan asks in chain
     * order) the output of a node already fused after it. */
    for (int i = 0; i < follower->ninputs; i++) {
        const qf_value *v = follower->inputs[i];
        if (!v || !dk_follower_ok(follower, v)) continue;
        if (v == producer->outputs[0]) return true;
        if (v->producer && v->producer != producer && dk_post_op_kind(v->producer)) return true;
    }
    return false;
}
