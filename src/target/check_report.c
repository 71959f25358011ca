/* The reports of `qfold check` (qfold/target.h): JSON, Graphviz DOT, the
 * human table and the summary line. */
#include <stdio.h>
#include <string.h>

#include "core/strbuf.h"
#include "qfold/schema.h"
#include "qfold/target.h"

static const char *qf_check_flow_name(qf_neutron_flow f)
{
    return f == QF_NEUTRON_SDK2 ? "sdk2" : "sdk3";
}

static const char *qf_check_place_name(qf_placement p) { return p == QF_PLACE_NPU ? "npu" : "cpu"; }

static void qf_check_json_opt(qf_strbuf *b, const char *key, const char *s)
{
    qf_strbuf_printf(b, ", \"%s\": ", key);
    if (s)
        qf_strbuf_json_string(b, s);
    else
        qf_strbuf_puts(b, "null");
}

qf_status qf_check_report_json(const qf_check_result *r, char **json, size_t *len)
{
    qf_strbuf b = {0};
    qf_strbuf_puts(&b, "{\n  \"target\": {\"name\": ");
    qf_strbuf_json_string(&b, r->target.name);
    qf_strbuf_printf(&b, ", \"flow\": \"%s\", \"num_macs\": %d, \"num_pipes\": %d},\n",
                     qf_check_flow_name(r->target.flow), r->target.num_macs, r->target.num_pipes);
    qf_strbuf_printf(&b, "  \"from_float\": %s,\n  \"nodes\": [", r->from_float ? "true" : "false");
    for (int k = 0; k < r->nnodes; k++) {
        const qf_check_node *e = &r->nodes[k];
        qf_strbuf_puts(&b, k ? ",\n    {\"name\": " : "\n    {\"name\": ");
        qf_strbuf_json_string(&b, e->name);
        qf_strbuf_puts(&b, ", \"op\": ");
        qf_strbuf_json_string(&b, e->op);
        qf_strbuf_printf(&b, ", \"placement\": \"%s\"", qf_check_place_name(e->placement));
        qf_check_json_opt(&b, "rule", e->rule);
        qf_check_json_opt(&b, "fix", e->fix);
        qf_check_json_opt(&b, "note", e->note);
        qf_strbuf_printf(
            &b, ", \"partition\": %d, \"qdq\": %s, \"macs\": %lld, \"macs_padded\": %lld}",
            e->partition, e->qdq ? "true" : "false", (long long)e->macs, (long long)e->macs_padded);
    }
    qf_strbuf_puts(&b, r->nnodes ? "\n  ],\n  \"partitions\": [" : "],\n  \"partitions\": [");
    for (int p = 0; p < r->npartitions; p++) {
        qf_strbuf_puts(&b, p ? ",\n    [" : "\n    [");
        for (int j = 0; j < r->partition_len[p]; j++) {
            if (j) qf_strbuf_puts(&b, ", ");
            qf_strbuf_json_string(&b, r->nodes[r->partitions[p][j]].name);
        }
        qf_strbuf_puts(&b, "]");
    }
    qf_strbuf_puts(&b, r->npartitions ? "\n  ],\n" : "],\n");
    qf_strbuf_printf(
        &b,
        "  \"summary\": {\"npu_nodes\": %d, \"cpu_nodes\": %d, \"npu_mac_fraction\": %.6f, "
        "\"transitions\": %d, \"partitions\": %d, \"macs\": %lld, \"npu_macs\": %lld, "
        "\"npu_macs_padded\": %lld}\n}\n",
        r->npu_nodes, r->cpu_nodes, r->npu_mac_fraction, r->transitions, r->npartitions,
        (long long)r->macs_total, (long long)r->macs_npu, (long long)r->macs_npu_padded);
    char *text = qf_strbuf_take(&b, len);
    if (!text) return QF_ERR_NOMEM;
    *json = text;
    return QF_OK;
}

/* s as a DOT quoted string ("..." with '"' and '\' escaped, newlines as \n). */
static void qf_check_dot_string(qf_strbuf *b, const char *s)
{
    qf_strbuf_puts(b, "\"");
    for (const char *p = s ? s : ""; *p; p++) {
        if (*p == '"' || *p == '\\')
            qf_strbuf_printf(b, "\\%c", *p);
        else if (*p == '\n')
            qf_strbuf_puts(b, "\\n");
        else
            qf_strbuf_append(b, p, 1);
    }
    qf_strbuf_puts(b, "\"");
}

/* The entry of node `name`, the k-th node of the graph: r lists the nodes
 * in the graph's order, so entry k is it unless the graph is another one. */
static const qf_check_node *qf_check_find(const qf_check_result *r, int k, const char *name)
{
    if (k < r->nnodes && strcmp(r->nodes[k].name, name) == 0) return &r->nodes[k];
    for (int j = 0; j < r->nnodes; j++)
        if (strcmp(r->nodes[j].name, name) == 0) return &r->nodes[j];
    return NULL;
}

qf_status qf_check_report_dot(const qf_check_result *r, const qf_graph *g, char **dot, size_t *len)
{
    qf_strbuf b = {0};
    qf_strbuf_printf(&b,
                     "digraph qfold_check {\n  rankdir=TB;\n  node [shape=box, style=filled, "
                     "fontname=\"Helvetica\"];\n"
                     "  label=\"%s (%s): green NPU, red CPU, grey quantize / dequantize\";\n",
                     r->target.name, qf_check_flow_name(r->target.flow));
    int k = 0;
    qf_graph_for_each_node(g, n)
    {
        const qf_check_node *e = qf_check_find(r, k++, n->name);
        bool npu = !e || e->placement == QF_PLACE_NPU;
        const char *fill = e && e->qdq ? (npu ? "#d8ecd8" : "#ecd8d8")
                           : npu       ? "#8fd18f"
                                       : "#f08a8a";
        char label[1024];
        snprintf(label, sizeof label, "%s\n%s%s%s", n->name, qf_op_label(n),
                 e && !npu && !e->qdq && e->rule ? "\n" : "",
                 e && !npu && !e->qdq && e->rule ? e->rule : "");
        qf_strbuf_printf(&b, "  n%u [label=", n->id);
        qf_check_dot_string(&b, label);
        qf_strbuf_printf(&b, ", fillcolor=\"%s\"", fill);
        if (e && (e->rule || e->note)) {
            qf_strbuf_puts(&b, ", tooltip=");
            qf_check_dot_string(&b, e->rule ? e->rule : e->note);
        }
        if (e && e->partition >= 0) qf_strbuf_printf(&b, ", group=\"p%d\"", e->partition);
        qf_strbuf_puts(&b, "];\n");
    }
    /* each NPU partition a box around its nodes */
    for (int p = 0; p < r->npartitions; p++) {
        qf_strbuf_printf(&b,
                         "  subgraph cluster_p%d {\n    label=\"NPU partition %d\"; style=rounded; "
                         "color=\"#2e8b2e\";\n",
                         p, p);
        k = 0;
        qf_graph_for_each_node(g, n)
        {
            const qf_check_node *e = qf_check_find(r, k++, n->name);
            if (e && e->partition == p) qf_strbuf_printf(&b, "    n%u;\n", n->id);
        }
        qf_strbuf_puts(&b, "  }\n");
    }
    for (int i = 0; i < g->ninputs; i++) {
        qf_strbuf_printf(&b, "  v%u [shape=ellipse, style=\"\", label=", g->inputs[i]->id);
        qf_check_dot_string(&b, g->inputs[i]->name);
        qf_strbuf_puts(&b, "];\n");
    }
    qf_graph_for_each_node(g, n)
    {
        for (int s = 0; s < n->ninputs; s++) {
            const qf_value *v = n->inputs[s];
            if (!v) continue;
            if (v->producer)
                qf_strbuf_printf(&b, "  n%u -> n%u;\n", v->producer->id, n->id);
            else if (v->kind == QF_VALUE_INPUT)
                qf_strbuf_printf(&b, "  v%u -> n%u;\n", v->id, n->id);
        }
    }
    qf_strbuf_puts(&b, "}\n");
    char *text = qf_strbuf_take(&b, len);
    if (!text) return QF_ERR_NOMEM;
    *dot = text;
    return QF_OK;
}

void qf_check_print_summary(const qf_check_result *r, FILE *f)
{
    fprintf(f, "NPU: %d of %d ops, %.1f %% of MACs, %d partition%s, %d transition%s\n",
            r->npu_nodes, r->npu_nodes + r->cpu_nodes, r->npu_mac_fraction * 100.0, r->npartitions,
            r->npartitions == 1 ? "" : "s", r->transitions, r->transitions == 1 ? "" : "s");
}

static void qf_check_print_macs(int64_t m, char *buf, size_t n)
{
    if (m >= 1000000000)
        snprintf(buf, n, "%.2f G", (double)m / 1e9);
    else if (m >= 1000000)
        snprintf(buf, n, "%.2f M", (double)m / 1e6);
    else if (m >= 1000)
        snprintf(buf, n, "%.1f k", (double)m / 1e3);
    else
        snprintf(buf, n, "%lld", (long long)m);
}

void qf_check_print(const qf_check_result *r, FILE *f)
{
    fprintf(f, "target %s (%s flow, %d MACs x %d pipes)%s\n", r->target.name,
            r->target.flow == QF_NEUTRON_SDK2 ? "SDK 2.x" : "SDK 3.x", r->target.num_macs,
            r->target.num_pipes,
            r->from_float ? ", float model checked as `quantize --target` quantizes it" : "");
    char m[32];
    for (int p = 0; p < r->npartitions; p++) {
        int ops = 0, qdq = 0;
        int64_t macs = 0;
        for (int j = 0; j < r->partition_len[p]; j++) {
            const qf_check_node *e = &r->nodes[r->partitions[p][j]];
            if (e->qdq)
                qdq++;
            else {
                ops++;
                macs += e->macs;
            }
        }
        qf_check_print_macs(macs, m, sizeof m);
        fprintf(f, "\nNPU partition %d: %d op%s, %s MACs (+ %d quantize / dequantize)\n", p, ops,
                ops == 1 ? "" : "s", m, qdq);
        for (int j = 0; j < r->partition_len[p]; j++) {
            const qf_check_node *e = &r->nodes[r->partitions[p][j]];
            if (e->qdq) continue;
            qf_check_print_macs(e->macs, m, sizeof m);
            fprintf(f, "  %-32s %-18s %10s%s%s\n", e->name, e->op, e->macs ? m : "",
                    e->note ? "  " : "", e->note ? e->note : "");
        }
    }
    int cpu = 0;
    for (int k = 0; k < r->nnodes; k++)
        cpu += r->nodes[k].placement == QF_PLACE_CPU && !r->nodes[k].qdq;
    if (cpu) fprintf(f, "\nCPU: %d op%s\n", cpu, cpu == 1 ? "" : "s");
    for (int k = 0; k < r->nnodes; k++) {
        const qf_check_node *e = &r->nodes[k];
        if (e->placement != QF_PLACE_CPU || e->qdq) continue;
        fprintf(f, "  %-32s %-18s %s\n", e->name, e->op, e->rule ? e->rule : "");
        if (e->fix) fprintf(f, "  %-32s %-18s fix: %s\n", "", "", e->fix);
    }
    fprintf(f, "\n");
    qf_check_print_summary(r, f);
}
