/* qfold inspect MODEL.onnx [--json] [--graph] [--dot FILE] */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/strbuf.h"
#include "io/onnx_problems.h"
#include "qfold/exec.h"
#include "qfold/graph.h"
#include "qfold/io.h"

typedef struct qf_tally {
    int tensors;
    long long elems;
    unsigned long long bytes;
} qf_tally;

typedef struct qf_op_count {
    const char *name; /* ONNX op_type; qfold's name for internal ops (linear, relu6) */
    int count;
} qf_op_count;

typedef struct qf_inspect {
    const char *path;
    const qf_graph *g;
    const qf_problems *problems; /* found at import (unsupported ops, dtypes, opsets) */
    qf_op_count *ops;            /* room for QF_OP_COUNT + one per problem */
    int nops;
    qf_tally params, buffers, consts;
    int batch_norms;
} qf_inspect;

static void qf_tally_add(qf_tally *t, const qf_tensor *x)
{
    int64_t n = qf_tensor_numel(x);
    t->tensors++;
    if (n > 0) {
        t->elems += n;
        t->bytes += qf_tensor_nbytes(x);
    }
}

/* Most frequent first; ties by name, so the order is stable across runs. */
static int qf_op_count_cmp(const void *a, const void *b)
{
    const qf_op_count *x = a, *y = b;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    return strcmp(x->name, y->name);
}

static void qf_inspect_collect(qf_inspect *in)
{
    const qf_graph *g = in->g;
    int per_op[QF_OP_COUNT] = {0};
    for (const qf_node *n = g->first; n; n = n->next) {
        if (n->op == QF_OP_OPAQUE) continue; /* counted by their op's key, below */
        if ((unsigned)n->op < QF_OP_COUNT) per_op[n->op]++;
        if (n->op == QF_OP_BATCH_NORM) in->batch_norms++;
        /* A Constant node's payload is model data too. */
        for (int a = 0; a < n->nattrs; a++)
            if (n->attrs[a].type == QF_ATTR_TENSOR && n->attrs[a].t)
                qf_tally_add(&in->consts, n->attrs[a].t);
    }
    for (int op = 0; op < QF_OP_COUNT; op++) {
        if (!per_op[op]) continue;
        const char *onnx = qf_op_onnx_name((qf_op)op);
        in->ops[in->nops++] = (qf_op_count){onnx ? onnx : qf_op_name((qf_op)op), per_op[op]};
    }
    /* Ops qfold does not know, by "domain.op_type": one problem per node. */
    for (int i = 0; i < in->problems->n; i++) {
        const qf_problem *p = &in->problems->items[i];
        if (p->kind != QF_PROBLEM_OP) continue;
        int k = 0;
        while (k < in->nops && strcmp(in->ops[k].name, p->key) != 0) k++;
        if (k == in->nops) in->ops[in->nops++] = (qf_op_count){p->key, 0};
        in->ops[k].count++;
    }
    qsort(in->ops, (size_t)in->nops, sizeof in->ops[0], qf_op_count_cmp);
    for (int i = 0; i < g->nvalues; i++) {
        const qf_value *v = g->values[i];
        if (!v || v->producer || !v->type.data) continue;
        switch (v->kind) {
        case QF_VALUE_PARAMETER: qf_tally_add(&in->params, &v->type); break;
        case QF_VALUE_BUFFER: qf_tally_add(&in->buffers, &v->type); break;
        case QF_VALUE_CONSTANT: qf_tally_add(&in->consts, &v->type); break;
        case QF_VALUE_INPUT:
        case QF_VALUE_ACTIVATION: break;
        }
    }
}

static void qf_print_tally_text(FILE *f, const char *what, const qf_tally *t)
{
    char n[32], b[32];
    fprintf(f, "%-12s%d tensors, %s values, %s\n", what, t->tensors,
            qf_cli_thousands(t->elems, n, sizeof n), qf_cli_bytes(t->bytes, b, sizeof b));
}

static void qf_print_values_text(FILE *f, const char *title, qf_value *const *vs, int n)
{
    int width = 0;
    for (int i = 0; i < n; i++) {
        int w = (int)strlen(vs[i]->name);
        if (w > width) width = w;
    }
    fprintf(f, "%s (%d):\n", title, n);
    for (int i = 0; i < n; i++) {
        char shape[256];
        fprintf(f, "  %-*s  %s %s%s\n", width, vs[i]->name, qf_cli_dtype_label(vs[i]),
                qf_shape_str(vs[i]->type.ndim, vs[i]->type.dims, shape, sizeof shape),
                qf_value_has_default(vs[i]) ? "  (default: its initializer)" : "");
    }
}

static void qf_inspect_text(const qf_inspect *in, FILE *f)
{
    const qf_graph *g = in->g;
    fprintf(f, "%-12s%s\n", "model", in->path);
    fprintf(f, "%-12s%s\n", "name", g->name ? g->name : "");
    fprintf(f, "%-12s%" PRId64 " (ir_version %" PRId64 ")\n", "opset", g->opset, g->ir_version);
    fprintf(f, "%-12s%s\n", "producer",
            g->producer_name && *g->producer_name ? g->producer_name : "-");
    qf_print_values_text(f, "inputs", g->inputs, g->ninputs);
    qf_print_values_text(f, "outputs", g->outputs, g->noutputs);
    int width = 0;
    for (int i = 0; i < in->nops; i++) {
        int w = (int)strlen(in->ops[i].name);
        if (w > width) width = w;
    }
    fprintf(f, "ops (%d nodes):\n", g->nnodes);
    for (int i = 0; i < in->nops; i++)
        fprintf(f, "  %-*s  %d\n", width, in->ops[i].name, in->ops[i].count);
    qf_print_tally_text(f, "parameters", &in->params);
    qf_print_tally_text(f, "buffers", &in->buffers);
    qf_print_tally_text(f, "constants", &in->consts);
    fprintf(f, "%-12s%d\n", "batch norms", in->batch_norms);
}

/* A shape as a JSON array; unknown dims as null. */
static void qf_json_shape(qf_strbuf *b, int ndim, const int64_t *dims)
{
    qf_strbuf_puts(b, "[");
    for (int i = 0; i < ndim; i++) {
        if (i) qf_strbuf_puts(b, ", ");
        if (dims[i] < 0)
            qf_strbuf_puts(b, "null");
        else
            qf_strbuf_printf(b, "%" PRId64, dims[i]);
    }
    qf_strbuf_puts(b, "]");
}

static void qf_print_values_json(qf_strbuf *b, qf_value *const *vs, int n)
{
    qf_strbuf_puts(b, "[");
    for (int i = 0; i < n; i++) {
        qf_strbuf_puts(b, i ? ", {\"name\": " : "{\"name\": ");
        qf_strbuf_json_string(b, vs[i]->name);
        qf_strbuf_puts(b, ", \"dtype\": ");
        qf_strbuf_json_string(b, qf_cli_dtype_label(vs[i]));
        qf_strbuf_puts(b, ", \"shape\": ");
        qf_json_shape(b, vs[i]->type.ndim, vs[i]->type.dims);
        if (qf_value_has_default(vs[i])) qf_strbuf_puts(b, ", \"default\": true");
        qf_strbuf_puts(b, "}");
    }
    qf_strbuf_puts(b, "]");
}

static void qf_print_tally_json(qf_strbuf *b, const char *key, const qf_tally *t)
{
    qf_strbuf_printf(b, "  \"%s\": {\"tensors\": %d, \"elements\": %lld, \"bytes\": %llu},\n", key,
                     t->tensors, t->elems, t->bytes);
}

/* The JSON is built in memory (names through the one escaper, core/strbuf.h)
 * and printed at once. */
static qf_status qf_inspect_json(const qf_inspect *in, FILE *f)
{
    const qf_graph *g = in->g;
    qf_strbuf b = {0};
    qf_strbuf_puts(&b, "{\n  \"model\": ");
    qf_strbuf_json_string(&b, in->path);
    qf_strbuf_puts(&b, ",\n  \"name\": ");
    qf_strbuf_json_string(&b, g->name);
    qf_strbuf_printf(&b, ",\n  \"opset\": %" PRId64 ",\n  \"ir_version\": %" PRId64, g->opset,
                     g->ir_version);
    qf_strbuf_puts(&b, ",\n  \"producer\": ");
    qf_strbuf_json_string(&b, g->producer_name);
    qf_strbuf_puts(&b, ",\n  \"inputs\": ");
    qf_print_values_json(&b, g->inputs, g->ninputs);
    qf_strbuf_puts(&b, ",\n  \"outputs\": ");
    qf_print_values_json(&b, g->outputs, g->noutputs);
    qf_strbuf_printf(&b, ",\n  \"nodes\": %d,\n  \"ops\": {", g->nnodes);
    for (int i = 0; i < in->nops; i++) {
        if (i) qf_strbuf_puts(&b, ", ");
        qf_strbuf_json_string(&b, in->ops[i].name);
        qf_strbuf_printf(&b, ": %d", in->ops[i].count);
    }
    qf_strbuf_puts(&b, "},\n");
    qf_print_tally_json(&b, "parameters", &in->params);
    qf_print_tally_json(&b, "buffers", &in->buffers);
    qf_print_tally_json(&b, "constants", &in->consts);
    qf_strbuf_printf(&b, "  \"batch_norms\": %d\n}\n", in->batch_norms);
    size_t len;
    char *text = qf_strbuf_take(&b, &len);
    if (!text) return qf_error(QF_ERR_NOMEM, "out of memory writing the JSON");
    fwrite(text, 1, len, f);
    qf_free(text);
    return QF_OK;
}

/* The grouped listing of what keeps qfold from running the model, on stderr. */
static void qf_inspect_problems(const char *model, const qf_problems *p, bool loaded)
{
    fprintf(stderr, "qfold: %s: %s:\n", model,
            loaded ? "qfold cannot run this model" : "problems found before the import stopped");
    qf_problems_print(p, stderr, "  ");
}

static void qf_print_dot_cb(FILE *f, const void *g) { qf_graph_print_dot(g, f); }

/* The plan qfold would run the model with, unknown input dims taken as
 * `batch` (the first) and 1 (others). */
static qf_status qf_inspect_plan(qf_graph *g, int64_t batch, FILE *f)
{
    for (int i = 0; i < g->ninputs; i++) {
        const qf_value *v = g->inputs[i];
        int64_t dims[QF_MAX_DIMS];
        for (int d = 0; d < v->type.ndim; d++) dims[d] = v->type.dims[d] >= 0 ? v->type.dims[d] : d ? 1 : batch;
        QF_TRY(qf_graph_set_input_shape(g, i, v->type.ndim, dims));
    }
    qf_plan *plan = NULL;
    QF_TRY(qf_plan_init(&plan, g));
    fprintf(f, "\nengine: %s\n", qf_engine_name(qf_get_engine()));
    qf_plan_print(plan, f);
    qf_plan_free(plan);
    return QF_OK;
}

static int qf_cli_inspect(int argc, char **argv)
{
    const char *model = NULL, *dot = NULL, *v;
    bool json = false, dump = false, plan = false;
    int64_t batch = 0;
    qf_cli_args a = qf_cli_args_begin(&qf_cli_cmd_inspect, argc, argv);
    while (qf_cli_args_next(&a)) {
        if (qf_cli_args_flag(&a, "--json", NULL)) {
            json = true;
        } else if (qf_cli_args_flag(&a, "--graph", NULL)) {
            dump = true;
        } else if (qf_cli_args_flag(&a, "--plan", NULL)) {
            plan = true;
        } else if (qf_cli_args_value(&a, "--batch", NULL, &v)) {
            char *end;
            long long b = strtoll(v, &end, 10);
            if (*end || b < 1 || b > 1000000) return qf_cli_value_error(a.cmd, "--batch: expects a count >= 1");
            batch = b;
        } else if (qf_cli_args_value(&a, "--dot", NULL, &v)) {
            dot = v;
        } else if (!model && qf_cli_args_positional(&a, &v)) {
            model = v;
        } else {
            return qf_cli_args_unknown(&a);
        }
    }
    if (a.failed) return QF_EXIT_USAGE;
    if (!model) return qf_cli_usage_error(a.cmd, "no model given");
    if (json && dump) return qf_cli_usage_error(a.cmd, "--graph and --json do not mix");
    if (json && plan) return qf_cli_usage_error(a.cmd, "--plan and --json do not mix");
    if (batch && !plan) return qf_cli_usage_error(a.cmd, "--batch goes with --plan");
    qf_cli_outputs out;
    qf_cli_outputs_init(&out);
    int rc = QF_EXIT_OK;
    if (dot && (rc = qf_cli_outputs_add(&out, "--dot", dot)) == QF_EXIT_OK)
        rc = qf_cli_outputs_input(&out, "the model", model);
    qf_graph *g = NULL;
    qf_status st = QF_OK;
    /* Every problem at once, not just the first (src/io/onnx_problems.h). */
    qf_problems problems = {0};
    if (rc == QF_EXIT_OK && (st = qf_onnx_load_collect(model, &problems, &g)) != QF_OK) {
        rc = qf_cli_fail(st);
        if (problems.n) qf_inspect_problems(model, &problems, g != NULL);
    }
    qf_inspect in = {.path = model, .g = g, .problems = &problems};
    if (rc == QF_EXIT_OK &&
        !(in.ops = qf_calloc((size_t)QF_OP_COUNT + (size_t)problems.n, sizeof *in.ops)))
        rc = qf_cli_fail(QF_ERR_NOMEM);
    if (rc != QF_EXIT_OK) {
        qf_problems_free(&problems);
        qf_graph_free(g);
        qf_cli_outputs_free(&out);
        return rc;
    }
    qf_inspect_collect(&in);
    if (json && (st = qf_inspect_json(&in, stdout)) != QF_OK)
        rc = qf_cli_fail(st);
    else if (!json)
        qf_inspect_text(&in, stdout);
    if (dump) {
        fputc('\n', stdout);
        qf_graph_print(g, stdout);
    }
    if (problems.n) {
        /* A model qfold cannot run: the status a failed import has. */
        qf_inspect_problems(model, &problems, true);
        rc = qf_cli_exit_code(QF_ERR_UNSUPPORTED);
    }
    if (rc == QF_EXIT_OK && plan && (st = qf_inspect_plan(g, batch ? batch : 1, stdout)) != QF_OK)
        rc = qf_cli_fail(st);
    if (dot && rc == QF_EXIT_OK) {
        const char *tmp;
        st = qf_cli_outputs_stage(&out, 0, &tmp);
        if (st == QF_OK) st = qf_cli_write_file(tmp, qf_print_dot_cb, g);
        rc = st == QF_OK ? qf_cli_outputs_commit(&out) : qf_cli_fail_write(&out, 0, st);
    }
    qf_cli_outputs_free(&out);
    qf_free(in.ops);
    qf_problems_free(&problems);
    qf_graph_free(g);
    return rc;
}

const qf_cli_command qf_cli_cmd_inspect = {
    .name = "inspect",
    .summary = "describe a model: inputs, outputs, ops, parameters, BatchNorms",
    .usage = "qfold inspect MODEL.onnx [--json] [--graph] [--dot FILE] [--plan [--batch N]]",
    .details =
        "Shows the graph as qfold imports it. Op names are ONNX op types (qfold's own\n"
        "name for its internal ops, such as linear and relu6; domain.op_type for ops of\n"
        "other domains).\n\n"
        "A model qfold cannot run (ops it does not know, dtypes or opsets it does not\n"
        "handle) is still described; every problem is then listed on stderr, grouped with\n"
        "counts (unsupported ops: 2 x com.microsoft.FusedGemm (nodes a, b)), nothing is\n"
        "written and the exit status is 2. `qfold fuse` still folds the rest of such a\n"
        "model, keeping the unknown nodes as they are.\n\n"
        "options:\n"
        "  --json       print the same information as one JSON object\n"
        "  --graph      also print the whole graph, one node per line\n"
        "  --dot FILE   also write the graph as Graphviz DOT (dot -Tsvg FILE > graph.svg)\n"
        "  --plan       also print the plan `qfold run` would execute: per step the kernel\n"
        "               (ref, or dnnl: the oneDNN backend, see --engine), the node, the memory\n"
        "               layout of each 4-D input and output (nchw, or nhwc: channels-last), the\n"
        "               nodes fused into it as post-ops (+ Relu 'r1'), and the reorders between\n"
        "               layouts the plan inserted\n"
        "  --batch N    with --plan: the batch size for an input whose first dim is unknown\n"
        "               (default 1; other unknown dims are taken as 1)\n\n"
        "Counts: parameters are trainable initializers (weights, biases, BN gamma/beta),\n"
        "buffers are BN running statistics, constants are everything else.\n",
    .fn = qf_cli_inspect,
};
