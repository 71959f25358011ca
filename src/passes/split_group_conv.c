/* split_group_conv: a grouped int8 convolution (1 < group, not depthwise)
 * as one convolution per group between a Split of its input and a Concat of
 * their outputs, for targets that have no grouped form (TFLite's CONV_2D
 * takes group 1, DEPTHWISE_CONV_2D group = channels, TRANSPOSE_CONV group 1;
 * the Neutron NPU likewise: ExecuTorch's NXP backend splits them with its
 * SplitGroupConvolution pass, before quantization).
 *
 * It runs on the integer executor's lowered graph (QLinearConv,
 * qconv_transpose: src/quant/lower.c), after quantization, so that it
 * changes no integer: each group's convolution reads the int8 input slice
 * with the input's scale and zero point, sums exactly the products the
 * grouped one sums for its output channels, adds their bias and
 * requantizes them with their own weight scales to the output's scale and
 * zero point; the concatenation (qconcat, every input at the output's
 * qparams) only copies. Splitting the float graph before quantization
 * instead would calibrate each group's output apart and requantize in the
 * Concat.
 *
 *   X -> Split(axis 1, group parts) -> QLinearConv_g (group 1) -> qconcat(axis 1) -> Y
 *
 * Weights: a conv's W [M, C/g, k...] is cut on axis 0 (output channels);
 * a ConvTranspose's W [C, M/g, k...] on axis 0 too (input channels), its
 * per-channel scales (axis 1: M/g, the same in every group) kept whole.
 * Per-channel weight scales and zero points, and the bias [M], follow their
 * output channels. */
#include <stdio.h>
#include <string.h>

#include "qfold/pass.h"
#include "qfold/schema.h"
#include "rewrite.h"

/* n's name with "<suffix>" put before a lowered node's "_int8". */
static void sg_name(char *buf, size_t size, const qf_node *n, const char *suffix)
{
    size_t len = strlen(n->name);
    bool lowered = len > 5 && strcmp(n->name + len - 5, "_int8") == 0;
    snprintf(buf, size, "%.*s%s%s",
             (int)(lowered     ? len - 5
                   : len > 400 ? 400
                               : len),
             n->name, suffix, lowered ? "_int8" : "");
}

typedef struct sg_match {
    int64_t group, m; /* groups, output channels */
} sg_match;

static bool sg_match_node(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, void *user)
{
    (void)g;
    sg_match *m = user;
    const int64_t group = qf_node_attr_int(n, "group", 1);
    if (group <= 1 || n->ninputs < 8) return false;
    const qf_tensor *x = &n->inputs[0]->type, *w = &n->inputs[3]->type, *y = &n->outputs[0]->type;
    const bool convt = n->op == QF_OP_QCONV_TRANSPOSE;
    if (x->ndim < 3 || x->dims[1] <= 0 || y->ndim < 2 || y->dims[1] <= 0) {
        qf_pass_skip(ctx, n, "channel counts unknown");
        return false;
    }
    const int64_t c = x->dims[1], mo = y->dims[1];
    if (!convt && group == c && w->dims[1] == 1) return false; /* depthwise: a form of its own */
    for (int i = 1; i < n->ninputs; i++)
        if (n->inputs[i] && !qf_value_is_const(n->inputs[i])) {
            qf_pass_skip(ctx, n, "input %d is not a constant", i);
            return false;
        }
    if (c % group || mo % group || w->dims[0] % group ||
        (n->ninputs > 8 && n->inputs[8] && qf_tensor_numel(&n->inputs[8]->type) != mo)) {
        qf_pass_skip(ctx, n, "channels do not split into %lld groups", (long long)group);
        return false;
    }
    m->group = group;
    m->m = mo;
    return true;
}

static qf_status sg_apply(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, void *user)
{
    const sg_match *m = user;
    const bool convt = n->op == QF_OP_QCONV_TRANSPOSE;
    const int64_t group = m->group;
    char name[512];
    sg_name(name, sizeof name, n, "_split");
    qf_node *sp =
        qf_graph_insert_node(g, n, false, QF_OP_SPLIT, name, 1, &n->inputs[0], (int)group);
    if (!sp) return QF_ERR_NOMEM;
    QF_TRY(qf_node_set_attr_int(g, sp, "axis", 1));
    QF_TRY(qf_node_infer(g, sp));
    /* qconcat: s_y, zp_y, then (x, s, zp) per group, all at the output's qparams */
    qf_value **cin = qf_graph_alloc(g, sizeof *cin * (size_t)(2 + 3 * group));
    if (!cin) return QF_ERR_NOMEM;
    cin[0] = n->inputs[6];
    cin[1] = n->inputs[7];
    for (int64_t i = 0; i < group; i++) {
        qf_value *in[9];
        for (int k = 0; k < n->ninputs && k < 9; k++) in[k] = n->inputs[k];
        in[0] = sp->outputs[i];
        /* the weight's axis 0: a conv's output channels, a ConvTranspose's input channels */
        QF_TRY(qf_rewrite_const_part(g, n->inputs[3], i, group, &in[3]));
        if (!convt) {
            QF_TRY(qf_rewrite_const_part(g, n->inputs[4], i, group, &in[4]));
            QF_TRY(qf_rewrite_const_part(g, n->inputs[5], i, group, &in[5]));
        }
        if (n->ninputs > 8 && n->inputs[8]) QF_TRY(qf_rewrite_const_part(g, n->inputs[8], i, group, &in[8]));
        char suffix[32];
        snprintf(suffix, sizeof suffix, "_g%lld", (long long)i);
        sg_name(name, sizeof name, n, suffix);
        qf_node *k = qf_graph_insert_node(g, n, false, n->op, name, n->ninputs, in, 1);
        if (!k) return QF_ERR_NOMEM;
        QF_TRY(qf_node_copy_attrs(g, k, n));
        QF_TRY(qf_node_set_attr_int(g, k, "group", 1));
        QF_TRY(qf_node_infer(g, k));
        cin[2 + 3 * i] = k->outputs[0];
        cin[3 + 3 * i] = n->inputs[6];
        cin[4 + 3 * i] = n->inputs[7];
    }
    sg_name(name, sizeof name, n, "_concat");
    qf_node *cc =
        qf_graph_insert_node(g, n, false, QF_OP_QCONCAT, name, (int)(2 + 3 * group), cin, 1);
    if (!cc) return QF_ERR_NOMEM;
    QF_TRY(qf_node_set_attr_int(g, cc, "axis", 1));
    QF_TRY(qf_node_infer(g, cc));
    qf_pass_rewrite_as(ctx, n, QF_PASS_DECOMPOSED, NULL,
                       "%lld groups: Split -> %lld %s (group 1) -> Concat", (long long)group,
                       (long long)group, convt ? "int8 ConvTransposes" : "int8 convolutions");
    const char *keep = qf_graph_strdup(g, n->name),
               *vkeep = qf_graph_strdup(g, n->outputs[0]->name);
    if (!keep || !vkeep) return QF_ERR_NOMEM;
    const bool out = n->outputs[0]->is_output; /* then replace_uses swaps the names */
    QF_TRY(qf_graph_replace_uses(g, n->outputs[0], cc->outputs[0]));
    qf_graph_remove_node(g, n);
    /* the concatenation takes the grouped node's name and its output's
     * (messages, reports, a value looked up by name) */
    if (!out) QF_TRY(qf_graph_rename_value(g, cc->outputs[0], vkeep));
    return qf_graph_rename_node(g, cc, keep);
}

static qf_status sg_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    sg_match m;
    *changed = false;
    QF_TRY(qf_pass_for_each_op(g, ctx, QF_OP_QLINEAR_CONV, sg_match_node, sg_apply, &m, changed));
    return qf_pass_for_each_op(g, ctx, QF_OP_QCONV_TRANSPOSE, sg_match_node, sg_apply, &m, changed);
}

const qf_pass qf_pass_split_group_conv = {
    .name = "split_group_conv",
    .summary = "an int8 grouped conv / ConvTranspose (1 < group, not depthwise) as Split -> one "
               "per group -> Concat",
    .run = sg_run,
};
