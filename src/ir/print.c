/* Printers: a readable text dump of the graph and Graphviz DOT.
 *
 * Both only read the graph and write to a caller's FILE; nothing is
 * allocated (labels are built in fixed buffers, truncated if huge). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "qfold/graph.h"

/* Attributes with long arrays (a Constant's payload, a Pad's pads) are cut
 * after this many elements: the dump is for reading, not for round trips. */
#define QF_PRINT_MAX_ELEMS 16

static void qf_print_type(const qf_tensor *t, FILE *f)
{
    char shape[256];
    fprintf(f, "%s %s", qf_dtype_name(t->dtype),
            qf_shape_str(t->ndim, t->dims, shape, sizeof shape));
}

static void qf_print_attr(const qf_attr *a, FILE *f)
{
    fprintf(f, "%s=", a->name);
    switch (a->type) {
    case QF_ATTR_INT: fprintf(f, "%" PRId64, a->i); break;
    case QF_ATTR_FLOAT: fprintf(f, "%g", (double)a->f); break;
    case QF_ATTR_STRING: fprintf(f, "\"%s\"", a->s ? a->s : ""); break;
    case QF_ATTR_INTS:
    case QF_ATTR_FLOATS:
        fputc('[', f);
        for (int k = 0; k < a->n && k < QF_PRINT_MAX_ELEMS; k++) {
            if (a->type == QF_ATTR_INTS)
                fprintf(f, "%s%" PRId64, k ? ", " : "", a->ints[k]);
            else
                fprintf(f, "%s%g", k ? ", " : "", (double)a->floats[k]);
        }
        if (a->n > QF_PRINT_MAX_ELEMS) fprintf(f, ", ... (%d)", a->n);
        fputc(']', f);
        break;
    case QF_ATTR_TENSOR:
        fputc('<', f);
        if (a->t) qf_print_type(a->t, f);
        fputc('>', f);
        break;
    }
}

static void qf_print_value_list(const qf_value *const *vs, int n, const char *title, FILE *f)
{
    fprintf(f, "%s (%d):\n", title, n);
    for (int i = 0; i < n; i++) {
        fprintf(f, "  %%%s : ", vs[i]->name);
        qf_print_type(&vs[i]->type, f);
        fputc('\n', f);
    }
}

void qf_graph_print(const qf_graph *g, FILE *f)
{
    fprintf(f, "graph '%s' (opset %" PRId64 ", ir_version %" PRId64 ", producer '%s')\n",
            g->name ? g->name : "", g->opset, g->ir_version,
            g->producer_name ? g->producer_name : "");
    qf_print_value_list((const qf_value *const *)g->inputs, g->ninputs, "inputs", f);

    int nconst = 0;
    for (int i = 0; i < g->nvalues; i++)
        if (g->values[i] && !g->values[i]->producer && g->values[i]->kind != QF_VALUE_INPUT &&
            g->values[i]->kind != QF_VALUE_ACTIVATION)
            nconst++;
    fprintf(f, "constants (%d):\n", nconst);
    for (int i = 0; i < g->nvalues; i++) {
        const qf_value *v = g->values[i];
        if (!v || v->producer || v->kind == QF_VALUE_INPUT || v->kind == QF_VALUE_ACTIVATION)
            continue;
        fprintf(f, "  %%%s : ", v->name);
        qf_print_type(&v->type, f);
        fprintf(f, " %s%s\n", qf_value_kind_name(v->kind), v->type.data ? "" : " (no data)");
    }

    fprintf(f, "nodes (%d):\n", g->nnodes);
    for (const qf_node *n = g->first; n; n = n->next) {
        fputs("  ", f);
        for (int o = 0; o < n->noutputs; o++)
            fprintf(f, "%s%%%s", o ? ", " : "", n->outputs[o]->name);
        fprintf(f, " = %s(", qf_op_name(n->op));
        for (int i = 0; i < n->ninputs; i++) {
            if (i) fputs(", ", f);
            if (n->inputs[i])
                fprintf(f, "%%%s", n->inputs[i]->name);
            else
                fputc('_', f); /* omitted optional input */
        }
        fputc(')', f);
        if (n->nattrs) {
            fputs(" {", f);
            for (int a = 0; a < n->nattrs; a++) {
                if (a) fputs(", ", f);
                qf_print_attr(&n->attrs[a], f);
            }
            fputc('}', f);
        }
        fputs(" : ", f);
        for (int o = 0; o < n->noutputs; o++) {
            if (o) fputs(", ", f);
            qf_print_type(&n->outputs[o]->type, f);
        }
        fprintf(f, "  # %s\n", n->name);
    }
    qf_print_value_list((const qf_value *const *)g->outputs, g->noutputs, "outputs", f);
}

/* --- Graphviz DOT ----------------------------------------------------------- */

/* Append s to buf (capacity size, used *k) escaped for a DOT quoted string. */
static void qf_dot_append(char *buf, size_t size, size_t *k, const char *s)
{
    for (; *s && *k + 3 < size; s++) {
        if (*s == '"' || *s == '\\') buf[(*k)++] = '\\';
        if (*s == '\n') {
            buf[(*k)++] = '\\';
            buf[(*k)++] = 'n';
            continue;
        }
        buf[(*k)++] = *s;
    }
    buf[*k] = '\0';
}

static void qf_dot_appendf_type(char *buf, size_t size, size_t *k, const qf_tensor *t)
{
    char shape[256], tmp[300];
    snprintf(tmp, sizeof tmp, "%s %s", qf_dtype_name(t->dtype),
             qf_shape_str(t->ndim, t->dims, shape, sizeof shape));
    qf_dot_append(buf, size, k, tmp);
}

/* A tiny constant (Clip's bounds, a scalar exponent) is shown by value, a
 * larger one by its type. */
static void qf_dot_append_const(char *buf, size_t size, size_t *k, const qf_tensor *t)
{
    int64_t n = qf_tensor_numel(t);
    if (!t->data || n < 1 || n > 4) {
        qf_dot_appendf_type(buf, size, k, t);
        return;
    }
    char tmp[160];
    size_t m = 0;
    m += (size_t)snprintf(tmp + m, sizeof tmp - m, "%s", t->ndim ? "[" : "");
    for (int64_t i = 0; i < n && m < sizeof tmp; i++)
        m += (size_t)snprintf(tmp + m, sizeof tmp - m, "%s%g", i ? ", " : "",
                              qf_tensor_get_f64(t, i));
    if (m < sizeof tmp) snprintf(tmp + m, sizeof tmp - m, "%s", t->ndim ? "]" : "");
    qf_dot_append(buf, size, k, tmp);
}

static const char *qf_dot_op_label(qf_op op)
{
    const char *onnx = qf_op_onnx_name(op);
    return onnx ? onnx : qf_op_name(op);
}

/* A constant is drawn inside its reader's box when it has one reader and is
 * not a graph output; a shared constant gets its own small ellipse so the
 * sharing stays visible. */
static int qf_dot_const_inline(const qf_value *v)
{
    return !v->producer && v->kind != QF_VALUE_INPUT && v->nuses <= 1 && !v->is_output;
}

/* The DOT id of the vertex a value comes from. */
static void qf_dot_source(const qf_value *v, char *id, size_t size)
{
    if (v->producer)
        snprintf(id, size, "n%" PRIu32, v->producer->id);
    else
        snprintf(id, size, "v%" PRIu32, v->id);
}

static void qf_dot_edge(const qf_value *v, const char *to, FILE *f)
{
    char from[32], label[320];
    size_t k = 0;
    label[0] = '\0';
    char shape[256];
    qf_dot_append(label, sizeof label, &k,
                  qf_shape_str(v->type.ndim, v->type.dims, shape, sizeof shape));
    qf_dot_source(v, from, sizeof from);
    fprintf(f, "  %s -> %s [label=\"%s\"];\n", from, to, label);
}

void qf_graph_print_dot(const qf_graph *g, FILE *f)
{
    char label[2048];
    size_t k;

    k = 0;
    label[0] = '\0';
    qf_dot_append(label, sizeof label, &k, g->name ? g->name : "qfold");
    fprintf(f, "digraph \"%s\" {\n", label);
    fputs("  rankdir=TB;\n"
          "  node [fontname=\"Helvetica\", fontsize=10];\n"
          "  edge [fontname=\"Helvetica\", fontsize=8, color=\"#555555\"];\n",
          f);

    for (int i = 0; i < g->ninputs; i++) {
        const qf_value *v = g->inputs[i];
        k = 0;
        label[0] = '\0';
        qf_dot_append(label, sizeof label, &k, v->name);
        qf_dot_append(label, sizeof label, &k, "\n");
        qf_dot_appendf_type(label, sizeof label, &k, &v->type);
        fprintf(f,
                "  v%" PRIu32
                " [shape=ellipse, style=filled, fillcolor=\"#cfe2f3\", label=\"%s\"];\n",
                v->id, label);
    }
    for (int i = 0; i < g->nvalues; i++) {
        const qf_value *v = g->values[i];
        if (!v || v->producer || v->kind == QF_VALUE_INPUT || v->kind == QF_VALUE_ACTIVATION ||
            (!v->nuses && !v->is_output) || qf_dot_const_inline(v))
            continue;
        k = 0;
        label[0] = '\0';
        qf_dot_append(label, sizeof label, &k, v->name);
        qf_dot_append(label, sizeof label, &k, "\n");
        qf_dot_appendf_type(label, sizeof label, &k, &v->type);
        fprintf(f, "  v%" PRIu32 " [shape=ellipse, fontsize=8, color=\"#999999\", label=\"%s\"];\n",
                v->id, label);
    }

    for (const qf_node *n = g->first; n; n = n->next) {
        k = 0;
        label[0] = '\0';
        qf_dot_append(label, sizeof label, &k, qf_dot_op_label(n->op));
        qf_dot_append(label, sizeof label, &k, "\n");
        qf_dot_append(label, sizeof label, &k, n->name);
        for (int i = 0; i < n->ninputs; i++) {
            const qf_value *v = n->inputs[i];
            if (!v || !qf_dot_const_inline(v)) continue;
            qf_dot_append(label, sizeof label, &k, "\n");
            qf_dot_append(label, sizeof label, &k, v->name);
            qf_dot_append(label, sizeof label, &k, ": ");
            qf_dot_append_const(label, sizeof label, &k, &v->type);
        }
        const char *style =
            n->op == QF_OP_BATCH_NORM
                ? ", style=\"filled,bold\", fillcolor=\"#ffd966\", color=\"#b45f06\""
                : ", style=filled, fillcolor=\"#f3f3f3\"";
        fprintf(f, "  n%" PRIu32 " [shape=box%s, label=\"%s\"];\n", n->id, style, label);
    }

    for (const qf_node *n = g->first; n; n = n->next) {
        char to[32];
        snprintf(to, sizeof to, "n%" PRIu32, n->id);
        for (int i = 0; i < n->ninputs; i++) {
            const qf_value *v = n->inputs[i];
            if (v && !qf_dot_const_inline(v)) qf_dot_edge(v, to, f);
        }
    }

    for (int i = 0; i < g->noutputs; i++) {
        const qf_value *v = g->outputs[i];
        char to[32];
        k = 0;
        label[0] = '\0';
        qf_dot_append(label, sizeof label, &k, v->name);
        qf_dot_append(label, sizeof label, &k, "\n");
        qf_dot_appendf_type(label, sizeof label, &k, &v->type);
        snprintf(to, sizeof to, "o%d", i);
        fprintf(f, "  %s [shape=ellipse, style=filled, fillcolor=\"#d9ead3\", label=\"%s\"];\n", to,
                label);
        qf_dot_edge(v, to, f);
    }
    fputs("}\n", f);
}
