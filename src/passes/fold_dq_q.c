/* fold_dq_q: a QuantizeLinear that reads a DequantizeLinear of the same
 * qparams is the identity on the integers, so its readers read the
 * DequantizeLinear's integer input instead and it goes (ExecuTorch's NXP
 * edge pass FoldRedundantDequantizeQuantize, pytorch/executorch#21016): the
 * island between two quantized clusters disappears and the NPU partition is
 * not cut there.
 *
 *   q ─DQ(s, z)─▶ f ─Q(s, z)─▶ q'      ->      q (read where q' was)
 *
 * Exact in int8: Q(DQ(q)) = round((q − z)·s / s) + z = q for every int8 or
 * uint8 q and any normal scale (the two float32 roundings move (q − z)·s / s
 * by far less than 1/2 from the integer q − z). "Same qparams": the same
 * integer type (the DQ's input, the Q's output), scale and zero point equal
 * element for element (one value object or equal constants; an omitted zero
 * point is 0) and, per channel, the same axis. The DQ stays when it has
 * other readers (dce removes it otherwise). Skips, with the reason: a
 * DQ -> Q that requantizes (other qparams), a Q whose output is a graph
 * output (the model's interface keeps its names), non-constant qparams.
 * `finalize` removes the same pairs in PyTorch's QAT exports already
 * (qat_fold_exported's DQ -> Q -> DQ rule); this pass is the general form,
 * for any QDQ model `export --target neutron` reads and for what the
 * Neutron passes before it leave. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "qfold/pass.h"
#include "rewrite.h"

/* Constants a and b hold the same values (or are the same value; both NULL
 * = both omitted zero points). An omitted zero point equals a constant of
 * zeros. */
static bool fq_same(const qf_value *a, const qf_value *b)
{
    if (a == b) return true;
    const qf_value *v = a ? a : b;
    if (!a || !b) {
        if (!qf_value_is_const(v)) return false;
        const int64_t n = qf_tensor_numel(&v->type);
        const size_t sz = qf_dtype_size(v->type.dtype);
        const unsigned char *p = v->type.data;
        for (size_t i = 0; i < (size_t)n * sz; i++)
            if (p[i]) return false;
        return true;
    }
    if (!qf_value_is_const(a) || !qf_value_is_const(b) || a->type.dtype != b->type.dtype)
        return false;
    const int64_t n = qf_tensor_numel(&a->type);
    if (n != qf_tensor_numel(&b->type)) return false;
    if (a->type.dtype ==
        QF_DTYPE_F32) { /* compare values: -0 == 0 is no matter here, NaN never equal */
        const float *p = a->type.data, *q = b->type.data;
        for (int64_t i = 0; i < n; i++)
            if (!(p[i] == q[i])) return false;
        return true;
    }
    return memcmp(a->type.data, b->type.data, (size_t)n * qf_dtype_size(a->type.dtype)) == 0;
}

static bool fq_reject(const qf_node *q, char *why, size_t size)
{
    const qf_node *d = q->inputs[0]->producer;
    const qf_value *ds = d->inputs[1], *qs = q->inputs[1];
    const qf_value *dz = d->ninputs > 2 ? d->inputs[2] : NULL,
                   *qz = q->ninputs > 2 ? q->inputs[2] : NULL;
    if (!qf_value_is_const(ds) || !qf_value_is_const(qs) || (dz && !qf_value_is_const(dz)) ||
        (qz && !qf_value_is_const(qz)))
        return qf_rewrite_why(why, size, "qparams are not constants");
    const qf_dtype din = d->inputs[0]->type.dtype, qout = q->outputs[0]->type.dtype;
    if (din != qout)
        return qf_rewrite_why(why, size, "DequantizeLinear '%s' reads %s, this writes %s", d->name,
                              qf_dtype_name(din), qf_dtype_name(qout));
    const bool per_channel = qf_tensor_numel(&ds->type) > 1 || qf_tensor_numel(&qs->type) > 1;
    if (!fq_same(ds, qs) || !fq_same(dz, qz) ||
        (per_channel && qf_node_attr_int(d, "axis", 1) != qf_node_attr_int(q, "axis", 1)))
        return qf_rewrite_why(why, size, "requantizes: DequantizeLinear '%s' has other qparams",
                              d->name);
    if (ds->type.dtype == QF_DTYPE_F32) {
        const float *s = ds->type.data;
        for (int64_t i = 0; i < qf_tensor_numel(&ds->type); i++)
            if (!(fpclassify(s[i]) == FP_NORMAL && s[i] > 0.0f))
                return qf_rewrite_why(why, size, "scale %g is not a positive normal number",
                                      (double)s[i]);
    }
    if (q->outputs[0]->is_output) return qf_rewrite_why(why, size, "output is a graph output");
    return false;
}

static bool fq_want(qf_graph *g, qf_pass_ctx *ctx, qf_node *q, void *user)
{
    (void)g;
    (void)user;
    const qf_value *x = q->inputs[0];
    if (!x || !x->producer || x->producer->op != QF_OP_DEQUANTIZE)
        return false; /* not a candidate */
    char why[320];
    if (!fq_reject(q, why, sizeof why)) return true;
    qf_pass_skip(ctx, q, "%s", why);
    return false;
}

static qf_status fq_apply(qf_graph *g, qf_pass_ctx *ctx, qf_node *q, void *user)
{
    (void)user;
    const qf_node *d = q->inputs[0]->producer;
    qf_pass_rewrite_as(ctx, q, QF_PASS_FOLDED, NULL,
                       "DequantizeLinear '%s' -> this: same qparams, identity", d->name);
    return qf_rewrite_splice_out(g, q, d->inputs[0]);
}

static qf_status fold_dq_q_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    return qf_pass_for_each_op(g, ctx, QF_OP_QUANTIZE, fq_want, fq_apply, NULL, changed);
}

const qf_pass qf_pass_fold_dq_q = {
    .name = "fold_dq_q",
    .summary = "DequantizeLinear -> QuantizeLinear of the same qparams (identity on the integers) "
               "-> the integers",
    .run = fold_dq_q_run,
};
