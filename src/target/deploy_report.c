/* The deployment report of `export --target`: the TFLite export's report
 * (qf_tflite_report_json) with each TFLite op's placement from `check`.
 *
 * Why here: the export (tflite layer) knows the ops, the check (this layer)
 * knows the placements, and tflite sits below target; so the export's report
 * takes extra JSON members per op (qf_tflite_report_json_extra) and this
 * file writes them. A TFLite op names the ONNX node of the exported graph it
 * comes from (a TRANSPOSE / PAD / QUANTIZE the export adds names the node it
 * serves); the check ran on that same graph, so the op takes that node's
 * placement, rule and fix. MACs are the export's per-op MACs (the report's
 * totals.macs is their sum), split by placement; an NPU op's padded MACs are
 * its MACs scaled by its node's macs_padded / macs (channels rounded up to
 * num_macs), so the utilisation lost to padding is per op too. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/strbuf.h"
#include "qfold/target.h"

/* One TFLite op as placed. */
typedef struct deploy_op {
    const qf_check_node *node; /* NULL: the check has no node of that name */
    qf_placement placement;
    int64_t macs_padded; /* NPU: the MACs the NPU spends; CPU: its MACs */
} deploy_op;

typedef struct deploy_sum {
    int ops, npu_ops;
    int64_t macs, npu_macs, cpu_macs, npu_macs_padded;
} deploy_sum;

static int by_name(const void *a, const void *b)
{
    const qf_check_node *x = *(const qf_check_node *const *)a,
                        *y = *(const qf_check_node *const *)b;
    return strcmp(x->name, y->name);
}

/* The node named `name` in c (sorted: c's nodes by name), NULL if none. */
static const qf_check_node *find_node(const qf_check_node *const *sorted, int n, const char *name)
{
    qf_check_node key = {.name = name};
    const qf_check_node *k = &key;
    const qf_check_node *const *hit = bsearch(&k, sorted, (size_t)n, sizeof *sorted, by_name);
    return hit ? *hit : NULL;
}

/* Place every op of tr (ops: tr->nops of them) and sum them. */
static qf_status place_ops(const qf_tflite_result *tr, const qf_check_result *c, deploy_op *ops,
                           deploy_sum *s)
{
    const qf_check_node **sorted = qf_malloc(sizeof *sorted * (size_t)(c->nnodes ? c->nnodes : 1));
    if (!sorted) return qf_error(QF_ERR_NOMEM, "out of memory placing the exported ops");
    for (int i = 0; i < c->nnodes; i++) sorted[i] = &c->nodes[i];
    qsort(sorted, (size_t)c->nnodes, sizeof *sorted, by_name);
    memset(s, 0, sizeof *s);
    for (int i = 0; i < tr->nops; i++) {
        const qf_tflite_op_info *f = &tr->ops[i];
        deploy_op *o = &ops[i];
        o->node = find_node(sorted, c->nnodes, f->node);
        o->placement = o->node ? o->node->placement : QF_PLACE_CPU;
        o->macs_padded = f->macs;
        /* The node's padding ratio applied to the op's own MACs: a node the
         * export writes as several ops (a grouped conv: one CONV_2D per
         * group) pads each of them alike. */
        if (o->placement == QF_PLACE_NPU && o->node->macs > 0 &&
            o->node->macs_padded > o->node->macs)
            o->macs_padded = (int64_t)llround((double)f->macs * (double)o->node->macs_padded /
                                              (double)o->node->macs);
        s->ops++;
        s->macs += f->macs;
        if (o->placement == QF_PLACE_NPU) {
            s->npu_ops++;
            s->npu_macs += f->macs;
            s->npu_macs_padded += o->macs_padded;
        } else {
            s->cpu_macs += f->macs;
        }
    }
    qf_free(sorted);
    return QF_OK;
}

/* The NPU's share of the MACs; with no MACs at all, 1 when every op is on
 * the NPU (as qf_check_result's npu_mac_fraction). */
static double mac_fraction(const deploy_sum *s)
{
    if (s->macs > 0) return (double)s->npu_macs / (double)s->macs;
    return s->npu_ops == s->ops ? 1.0 : 0.0;
}

/* The share of the NPU's MAC work that is useful (not padding). */
static double mac_utilisation(const deploy_sum *s)
{
    return s->npu_macs_padded > 0 ? (double)s->npu_macs / (double)s->npu_macs_padded : 1.0;
}

static const char *flow_name(qf_neutron_flow f) { return f == QF_NEUTRON_SDK2 ? "sdk2" : "sdk3"; }

static void json_string_or_null(qf_strbuf *b, const char *s)
{
    if (s)
        qf_strbuf_json_string(b, s);
    else
        qf_strbuf_puts(b, "null");
}

/* Op i's members: placement, rule, fix, note, partition, macs_padded. */
static void op_members(qf_strbuf *b, const qf_tflite_op_info *f, const deploy_op *o)
{
    qf_strbuf_printf(
        b, "\"placement\": \"%s\", \"rule\": ", o->placement == QF_PLACE_NPU ? "npu" : "cpu");
    if (!o->node) {
        /* Cannot happen when the check ran on the exported graph; said
         * rather than hidden if it does. */
        char why[512];
        snprintf(why, sizeof why, "not in the checked model (`check` has no node '%s')", f->node);
        qf_strbuf_json_string(b, why);
        qf_strbuf_puts(
            b, ", \"fix\": null, \"note\": null, \"partition\": null, \"macs_padded\": null");
        return;
    }
    json_string_or_null(b, o->placement == QF_PLACE_CPU ? o->node->rule : NULL);
    qf_strbuf_puts(b, ", \"fix\": ");
    json_string_or_null(
        b, o->placement == QF_PLACE_CPU && o->node->fix && *o->node->fix ? o->node->fix : NULL);
    qf_strbuf_puts(b, ", \"note\": ");
    json_string_or_null(b, o->node->note && *o->node->note ? o->node->note : NULL);
    if (o->placement == QF_PLACE_NPU && o->node->partition >= 0)
        qf_strbuf_printf(b, ", \"partition\": %d", o->node->partition);
    else
        qf_strbuf_puts(b, ", \"partition\": null");
    if (o->placement == QF_PLACE_NPU)
        qf_strbuf_printf(b, ", \"macs_padded\": %lld", (long long)o->macs_padded);
    else
        qf_strbuf_puts(b, ", \"macs_padded\": null");
}

static void top_members(qf_strbuf *b, const qf_check_result *c, const deploy_sum *s)
{
    qf_strbuf_puts(b, "\"placement\": {\"target\": {\"name\": ");
    qf_strbuf_json_string(b, c->target.name ? c->target.name : "");
    qf_strbuf_printf(b, ", \"flow\": \"%s\", \"num_macs\": %d, \"num_pipes\": %d},\n    ",
                     flow_name(c->target.flow), c->target.num_macs, c->target.num_pipes);
    qf_strbuf_printf(
        b,
        "\"ops\": %d, \"npu_ops\": %d, \"cpu_ops\": %d, \"macs\": %lld, \"npu_macs\": %lld, "
        "\"cpu_macs\": %lld, \"npu_mac_fraction\": %.17g,\n    \"npu_macs_padded\": %lld, "
        "\"padding_macs\": %lld, \"npu_mac_utilisation\": %.17g,\n    ",
        s->ops, s->npu_ops, s->ops - s->npu_ops, (long long)s->macs, (long long)s->npu_macs,
        (long long)s->cpu_macs, mac_fraction(s), (long long)s->npu_macs_padded,
        (long long)(s->npu_macs_padded - s->npu_macs), mac_utilisation(s));
    qf_strbuf_printf(
        b,
        "\"check\": {\"from_float\": %s, \"npu_nodes\": %d, \"cpu_nodes\": %d, \"partitions\": %d, "
        "\"transitions\": %d}}",
        c->from_float ? "true" : "false", c->npu_nodes, c->cpu_nodes, c->npartitions,
        c->transitions);
}

qf_status qf_target_report_json(const qf_tflite_result *tr, const double *max_lsb,
                                const qf_check_result *c, char **json, size_t *len)
{
    *json = NULL;
    deploy_op *ops = qf_calloc((size_t)(tr->nops ? tr->nops : 1), sizeof *ops);
    char **text = qf_calloc((size_t)(tr->nops ? tr->nops : 1), sizeof *text);
    qf_strbuf top = {0};
    qf_status st =
        ops && text ? QF_OK : qf_error(QF_ERR_NOMEM, "out of memory writing the deployment report");
    deploy_sum s;
    if (st == QF_OK) st = place_ops(tr, c, ops, &s);
    for (int i = 0; st == QF_OK && i < tr->nops; i++) {
        qf_strbuf b = {0};
        op_members(&b, &tr->ops[i], &ops[i]);
        if (!(text[i] = qf_strbuf_take(&b, NULL)))
            st = qf_error(QF_ERR_NOMEM, "out of memory writing the deployment report");
    }
    if (st == QF_OK) {
        top_members(&top, c, &s);
        if (top.oom) st = qf_error(QF_ERR_NOMEM, "out of memory writing the deployment report");
    }
    if (st == QF_OK) {
        qf_tflite_report_extra x = {.op = (const char *const *)text, .top = top.p};
        st = qf_tflite_report_json_extra(tr, max_lsb, &x, json, len);
    }
    for (int i = 0; text && i < tr->nops; i++) qf_free(text[i]);
    qf_free(text);
    qf_free(top.p);
    qf_free(ops);
    return st;
}

qf_status qf_target_report_print(const qf_tflite_result *tr, const qf_check_result *c, FILE *f)
{
    deploy_op *ops = qf_calloc((size_t)(tr->nops ? tr->nops : 1), sizeof *ops);
    if (!ops) return qf_error(QF_ERR_NOMEM, "out of memory placing the exported ops");
    deploy_sum s;
    qf_status st = place_ops(tr, c, ops, &s);
    if (st == QF_OK) {
        fprintf(f, "%s: NPU: %d of %d ops, %.1f %% of MACs",
                c->target.name ? c->target.name : "target", s.npu_ops, s.ops,
                100.0 * mac_fraction(&s));
        /* What the padding costs: the NPU computes whole groups of num_macs
         * channels, the rest of a group is wasted work. */
        if (s.npu_macs_padded > 0)
            fprintf(f, ", MAC utilisation %.1f %% (channels padded to multiples of %d)",
                    100.0 * mac_utilisation(&s), c->target.num_macs);
        fprintf(f, "; %d partition%s, %d transition%s\n", c->npartitions,
                c->npartitions == 1 ? "" : "s", c->transitions, c->transitions == 1 ? "" : "s");
    }
    qf_free(ops);
    return st;
}
