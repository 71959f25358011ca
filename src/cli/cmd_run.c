/* qfold run MODEL.onnx -i IN.npy [-i IN2.npy ...] -o OUT.npy [-o OUT2.npy ...] */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/half.h"
#include "qfold/exec.h"
#include "qfold/graph.h"
#include "qfold/io.h"
#include "qfold/quant.h"

typedef struct qf_run_args {
    const char *model;
    const char **in; /* -i paths, in graph-input order */
    int nin;
    const char **out; /* -o paths, in graph-output order */
    int nout;
    bool simulate;     /* QDQ models: Q / DQ as written, every op in float */
    bool onnx_requant; /* --requant onnx */
} qf_run_args;

/* Everything run allocates, released in one place on every path. */
typedef struct qf_run_state {
    qf_graph *g;
    qf_plan *plan;
    qf_tensor *tensors;     /* one per -i, owned until bound into the graph */
    const qf_tensor **feed; /* the tensors fed to the plan (non-bound inputs) */
    /* A model with a fixed batch B (PyTorch exports batch 1 by default) fed
     * k * B samples runs k times, B samples each: chunks = k (1 otherwise)
     * and outs holds the stacked outputs; without chunks the plan's own. */
    int64_t chunks, batch;
    qf_tensor *outs;
    int nouts;
} qf_run_state;

static void qf_run_state_free(qf_run_state *s, int ntensors)
{
    qf_plan_free(s->plan);
    qf_graph_free(s->g);
    for (int i = 0; s->tensors && i < ntensors; i++) qf_tensor_free(&s->tensors[i]);
    qf_free(s->tensors);
    qf_free(s->feed);
    for (int i = 0; s->outs && i < s->nouts; i++) qf_tensor_free(&s->outs[i]);
    qf_free(s->outs);
}

/* Output i of the run: stacked over the chunks, or the plan's. */
static const qf_tensor *qf_run_output(const qf_run_state *s, int i)
{
    return s->outs ? &s->outs[i] : qf_plan_output(s->plan, i);
}

/* "x, y, z" (the graph's input names) into buf, for the count message. */
static const char *qf_run_names(qf_value *const *vs, int n, char *buf, size_t size)
{
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && k + 1 < size; i++)
        k += (size_t)snprintf(buf + k, size - k, "%s'%s'", i ? ", " : "", vs[i]->name);
    return buf;
}

/* The .npy must have the input's dtype, its rank, and every dim the graph
 * fixes; unknown graph dims take the array's size. A fixed batch B (dim 0
 * of a float input of rank >= 2) also takes k * B samples: *chunks = k. */
static qf_status qf_run_check_input(const qf_value *v, const qf_tensor *t, const char *path,
                                    int64_t *chunks)
{
    bool ok = t->dtype == v->type.dtype && t->ndim == v->type.ndim;
    *chunks = 1;
    for (int d = 0; ok && d < t->ndim; d++) {
        int64_t want = v->type.dims[d];
        if (want < 0 || want == t->dims[d]) continue;
        if (d == 0 && t->ndim >= 2 && qf_dtype_is_float(t->dtype) && want > 0 &&
            t->dims[0] % want == 0)
            *chunks = t->dims[0] / want;
        else
            ok = false;
    }
    if (ok) return QF_OK;
    char want[256], got[256];
    return qf_error(t->dtype == v->type.dtype ? QF_ERR_SHAPE : QF_ERR_INVALID,
                    "input '%s' (%s): expected %s %s, got %s %s (wrong %s)", v->name, path,
                    qf_dtype_name(v->type.dtype),
                    qf_shape_str(v->type.ndim, v->type.dims, want, sizeof want),
                    qf_dtype_name(t->dtype), qf_shape_str(t->ndim, t->dims, got, sizeof got),
                    t->dtype == v->type.dtype ? "shape" : "dtype");
}

/* Every input fed k * B samples must agree on k (a second input of the
 * model's own batch would pair one sample with many). */
static qf_status qf_run_check_chunks(qf_run_state *s, const qf_value *v, const qf_tensor *t, int i,
                                     int64_t chunks)
{
    if (i > 0 && chunks != s->chunks)
        return qf_error(
            QF_ERR_SHAPE,
            "input '%s': %lld samples, where the model's fixed batch of %lld and the other inputs "
            "make %lld runs (give every input the same number of samples)",
            v->name, (long long)t->dims[0], (long long)v->type.dims[0], (long long)s->chunks);
    s->chunks = chunks;
    s->batch = v->type.dims[0];
    return QF_OK;
}

/* A view of samples [c * B, (c + 1) * B) of t. */
static qf_tensor qf_run_slice(const qf_tensor *t, int64_t c, int64_t b)
{
    qf_tensor v = *t;
    v.owns = v.writable = false;
    v.dims[0] = b;
    v.data = (char *)t->data + (size_t)c * qf_tensor_nbytes(&v);
    return v;
}

/* Run the plan once per chunk of B samples; each output, whose dim 0 must
 * be the batch, stacked into s->outs. */
static qf_status qf_run_chunks(qf_run_state *s, int nfeed, int nout)
{
    qf_tensor *views = qf_calloc((size_t)(nfeed ? nfeed : 1), sizeof *views);
    const qf_tensor **feed = qf_calloc((size_t)(nfeed ? nfeed : 1), sizeof *feed);
    s->outs = qf_calloc((size_t)(nout ? nout : 1), sizeof *s->outs);
    qf_status st = views && feed && s->outs ? QF_OK : QF_ERR_NOMEM;
    for (int64_t c = 0; st == QF_OK && c < s->chunks; c++) {
        for (int i = 0; i < nfeed; i++) {
            views[i] = qf_run_slice(s->feed[i], c, s->batch);
            feed[i] = &views[i];
        }
        st = qf_plan_run(s->plan, feed, nfeed);
        for (int o = 0; st == QF_OK && o < nout; o++) {
            const qf_tensor *y = qf_plan_output(s->plan, o);
            if (c == 0) {
                if (y->ndim < 1 || y->dims[0] != s->batch) {
                    st = qf_error(QF_ERR_SHAPE,
                                  "output '%s': its first dimension is not the model's fixed batch "
                                  "of %lld, so %lld "
                                  "samples cannot run %lld at a time (give %lld)",
                                  s->g->outputs[o]->name, (long long)s->batch,
                                  (long long)(s->chunks * s->batch), (long long)s->batch,
                                  (long long)s->batch);
                    break;
                }
                int64_t dims[QF_MAX_DIMS];
                memcpy(dims, y->dims, sizeof dims);
                dims[0] = s->chunks * s->batch;
                st = qf_tensor_init(&s->outs[o], y->dtype, y->ndim, dims);
                s->nouts = o + 1;
                if (st != QF_OK) break;
            }
            size_t nb = qf_tensor_nbytes(y);
            memcpy((char *)s->outs[o].data + (size_t)c * nb, y->data, nb);
        }
    }
    qf_free(views);
    qf_free(feed);
    return st;
}

/* Load the inputs, bind their shapes, build the plan, run. */
static qf_status qf_run_model(const qf_run_args *ra, qf_run_state *s)
{
    qf_graph *g = s->g;
    int n = ra->nin;
    s->tensors = qf_calloc((size_t)(n ? n : 1), sizeof *s->tensors);
    s->feed = qf_calloc((size_t)(n ? n : 1), sizeof *s->feed);
    if (!s->tensors || !s->feed) return QF_ERR_NOMEM;

    /* Check every input against the graph before changing the graph. */
    s->chunks = 1;
    for (int i = 0; i < n; i++) {
        qf_status st = qf_npy_load(ra->in[i], &s->tensors[i]);
        if (st != QF_OK) return qf_error_prefix(st, "input '%s': ", g->inputs[i]->name);
        int64_t chunks;
        QF_TRY(qf_run_check_input(g->inputs[i], &s->tensors[i], ra->in[i], &chunks));
        if (qf_dtype_is_float(s->tensors[i].dtype) && (chunks > 1 || s->chunks > 1))
            QF_TRY(qf_run_check_chunks(s, g->inputs[i], &s->tensors[i], i, chunks));
        /* A float16 / bfloat16 input given as float32 (numpy has no
         * bfloat16) is rounded to the model's dtype, as the model sees it. */
        int store = g->inputs[i]->store & QF_STORE_DTYPE;
        if (store && s->tensors[i].dtype == QF_DTYPE_F32) {
            float *x = s->tensors[i].data;
            for (int64_t k = 0, m = qf_tensor_numel(&s->tensors[i]); k < m; k++)
                x[k] = qf_half_round(x[k], store);
        }
    }
    /* Unknown dims (a dynamic batch) take the arrays' sizes. int64 inputs
     * are shape-like (a Reshape's target fed at run time): they become
     * constants so that every shape stays static. Binding removes an input
     * from the list, so bind from the last one backwards. */
    for (int i = 0; i < n; i++)
        if (s->tensors[i].dtype != QF_DTYPE_I64 && s->chunks == 1)
            QF_TRY(qf_graph_set_input_shape(g, i, s->tensors[i].ndim, s->tensors[i].dims));
    int nfeed = 0;
    for (int i = 0; i < n; i++)
        if (s->tensors[i].dtype != QF_DTYPE_I64) s->feed[nfeed++] = &s->tensors[i];
    for (int i = n - 1; i >= 0; i--)
        if (s->tensors[i].dtype == QF_DTYPE_I64) QF_TRY(qf_graph_bind_input(g, i, &s->tensors[i]));

    /* A QDQ model runs its conv groups in integers, as the NPU would, unless
     * --simulate asks for the float simulation of the file as written. */
    if (!ra->simulate)
        QF_TRY(qf_quant_lower_int8(
            g, NULL, ra->onnx_requant ? QF_REQUANT_ONNX : QF_REQUANT_FIXED_POINT, NULL));
    QF_TRY(qf_plan_init(&s->plan, g));
    int nout = qf_plan_num_outputs(s->plan);
    if (nout != ra->nout)
        return qf_error(QF_ERR_INTERNAL, "the plan has %d outputs, the graph %d", nout, ra->nout);
    if (s->chunks == 1) return qf_plan_run(s->plan, s->feed, nfeed);
    return qf_run_chunks(s, nfeed, nout);
}

/* Every output to its temporary name, then all renamed together: a failure
 * leaves every old output as it was. */
static int qf_run_save(const qf_run_args *ra, qf_run_state *s, qf_cli_outputs *out)
{
    const qf_graph *g = s->g;
    for (int i = 0; i < ra->nout; i++) {
        const char *tmp;
        qf_status st = qf_cli_outputs_stage(out, i, &tmp);
        if (st == QF_OK) st = qf_npy_save_as(tmp, qf_run_output(s, i), g->outputs[i]->store);
        if (st != QF_OK)
            return qf_cli_fail_write(out, i, qf_error_prefix(st, "'%s': ", g->outputs[i]->name));
    }
    int rc = qf_cli_outputs_commit(out);
    for (int i = 0; rc == QF_EXIT_OK && i < ra->nout; i++) {
        const qf_tensor *y = qf_run_output(s, i);
        char shape[256];
        int store = g->outputs[i]->store & QF_STORE_DTYPE;
        printf("%s: %s %s -> %s\n", g->outputs[i]->name,
               store == QF_STORE_F16    ? "float16"
               : store == QF_STORE_BF16 ? "bfloat16"
                                        : qf_dtype_name(y->dtype),
               qf_shape_str(y->ndim, y->dims, shape, sizeof shape), ra->out[i]);
    }
    return rc;
}

/* One -i per graph input, or one per input without a default (an ONNX
 * initializer listed as a graph input): those with a default then run with
 * it, as ONNX Runtime runs an overridable initializer nobody feeds. */
static int qf_run_check_counts(const qf_run_args *ra, qf_graph *g)
{
    char names[1024];
    int need = 0;
    for (int i = 0; i < g->ninputs; i++) need += !qf_value_has_default(g->inputs[i]);
    if (ra->nin != g->ninputs && ra->nin == need) {
        for (int i = g->ninputs - 1; i >= 0; i--)
            if (qf_value_has_default(g->inputs[i])) {
                qf_status st = qf_graph_input_use_default(g, i);
                if (st != QF_OK) return qf_cli_fail(st);
            }
    } else if (ra->nin != g->ninputs && need != g->ninputs) {
        char req[1024] = "";
        qf_value **vs = qf_calloc((size_t)g->ninputs, sizeof *vs);
        if (!vs) return qf_cli_fail(QF_ERR_NOMEM);
        int k = 0;
        for (int i = 0; i < g->ninputs; i++)
            if (!qf_value_has_default(g->inputs[i])) vs[k++] = g->inputs[i];
        qf_run_names(vs, k, req, sizeof req);
        qf_free(vs);
        return qf_cli_error(
            QF_EXIT_USAGE,
            "'%s' has %d inputs (%s), %d of them with a default: give %d -i (%s%s), "
            "or %d to override the defaults, got %d",
            ra->model, g->ninputs, qf_run_names(g->inputs, g->ninputs, names, sizeof names),
            g->ninputs - need, need, need ? "" : "none", req, g->ninputs, ra->nin);
    }
    if (ra->nin != g->ninputs)
        return qf_cli_error(QF_EXIT_USAGE, "'%s' has %d input%s (%s): give %d -i, got %d",
                            ra->model, g->ninputs, g->ninputs == 1 ? "" : "s",
                            qf_run_names(g->inputs, g->ninputs, names, sizeof names), g->ninputs,
                            ra->nin);
    if (ra->nout != g->noutputs)
        return qf_cli_error(QF_EXIT_USAGE, "'%s' has %d output%s (%s): give %d -o, got %d",
                            ra->model, g->noutputs, g->noutputs == 1 ? "" : "s",
                            qf_run_names(g->outputs, g->noutputs, names, sizeof names), g->noutputs,
                            ra->nout);
    return QF_EXIT_OK;
}

/* Outputs checked before any work: usable paths, none the same file as
 * another output, the model or an input. */
static int qf_run_check_paths(const qf_run_args *ra, qf_cli_outputs *out)
{
    int rc = QF_EXIT_OK;
    for (int o = 0; rc == QF_EXIT_OK && o < ra->nout; o++)
        rc = qf_cli_outputs_add(out, "output", ra->out[o]);
    if (rc == QF_EXIT_OK) rc = qf_cli_outputs_input(out, "the model", ra->model);
    for (int i = 0; rc == QF_EXIT_OK && i < ra->nin; i++)
        rc = qf_cli_outputs_input(out, "input", ra->in[i]);
    return rc;
}

static int qf_cli_run(int argc, char **argv)
{
    /* At most argc paths of each kind: size the lists once. */
    qf_run_args ra = {0};
    ra.in = qf_calloc((size_t)argc, sizeof *ra.in);
    ra.out = qf_calloc((size_t)argc, sizeof *ra.out);
    if (!ra.in || !ra.out) {
        qf_free(ra.in);
        qf_free(ra.out);
        return qf_cli_fail(QF_ERR_NOMEM);
    }
    int rc = QF_EXIT_OK;
    const char *v;
    qf_cli_args a = qf_cli_args_begin(&qf_cli_cmd_run, argc, argv);
    while (rc == QF_EXIT_OK && qf_cli_args_next(&a)) {
        if (qf_cli_args_value(&a, "-i", "--input", &v)) {
            if (!a.failed) ra.in[ra.nin++] = v;
        } else if (qf_cli_args_value(&a, "-o", "--output", &v)) {
            if (!a.failed) ra.out[ra.nout++] = v;
        } else if (qf_cli_args_flag(&a, "--simulate", NULL)) {
            ra.simulate = true;
        } else if (qf_cli_args_value(&a, "--requant", NULL, &v)) {
            if (a.failed) break;
            if (strcmp(v, "tflite") == 0)
                ra.onnx_requant = false;
            else if (strcmp(v, "onnx") == 0)
                ra.onnx_requant = true;
            else
                rc = qf_cli_value_error(a.cmd, "--requant takes tflite or onnx, got '%s'", v);
        } else if (!ra.model && qf_cli_args_positional(&a, &v)) {
            ra.model = v;
        } else {
            rc = qf_cli_args_unknown(&a);
        }
    }
    if (a.failed) rc = QF_EXIT_USAGE;
    if (rc == QF_EXIT_OK && !ra.model) rc = qf_cli_usage_error(a.cmd, "no model given");
    if (rc == QF_EXIT_OK && ra.nout == 0)
        rc = qf_cli_usage_error(a.cmd, "no output given (-o OUT.npy)");
    qf_cli_outputs out;
    qf_cli_outputs_init(&out);
    if (rc == QF_EXIT_OK) rc = qf_run_check_paths(&ra, &out);

    qf_run_state s = {0};
    if (rc == QF_EXIT_OK) {
        qf_status st = qf_onnx_load(ra.model, &s.g);
        if (st != QF_OK) rc = qf_cli_fail(st);
    }
    if (rc == QF_EXIT_OK) rc = qf_run_check_counts(&ra, s.g);
    if (rc == QF_EXIT_OK) {
        qf_status st = qf_run_model(&ra, &s);
        rc = st != QF_OK ? qf_cli_fail(st) : qf_run_save(&ra, &s, &out);
    }
    qf_cli_outputs_free(&out);
    qf_run_state_free(&s, ra.nin);
    qf_free(ra.in);
    qf_free(ra.out);
    return rc;
}

const qf_cli_command qf_cli_cmd_run = {
    .name = "run",
    .summary = "run a model on .npy inputs with the reference executor, write .npy outputs",
    .usage = "qfold run MODEL.onnx -i IN.npy [-i IN2.npy ...] -o OUT.npy [-o OUT2.npy ...]\n"
             "                 [--simulate | --requant tflite|onnx]",
    .details =
        "Inputs follow the graph's input order, outputs its output order; give one -i per\n"
        "graph input and one -o per graph output ('qfold inspect' lists them). An input with\n"
        "a default (an initializer of the same name, ONNX IR version >= 4) may be left out:\n"
        "give one -i per input without a default, in order, and the others take their\n"
        "defaults; or one -i per input to override them.\n\n"
        "options:\n"
        "  -i, --input FILE    a .npy array for the next graph input: same dtype, same rank,\n"
        "                      same size in every dimension the graph fixes (a dynamic\n"
        "                      dimension takes the array's size; int64 inputs are bound\n"
        "                      as constants). A model exported with a fixed batch B takes\n"
        "                      k * B samples too: it runs k times, the outputs stacked\n"
        "  -o, --output FILE   where to write the next graph output (.npy, written to a\n"
        "                      temporary file and renamed into place)\n"
        "  --simulate          a quantized (QDQ) model: compute every op in float with the\n"
        "                      QuantizeLinear / DequantizeLinear as written. Without it, each\n"
        "                      DequantizeLinear -> Conv / Gemm -> [ReLU] -> QuantizeLinear group "
        "runs\n"
        "                      in integers (int8 x int8 -> int32, TFLite's fixed-point\n"
        "                      requantization), as an int8 NPU computes it\n"
        "  --requant KIND      the integer groups' requantization: tflite (default: fixed-point\n"
        "                      multiplier and shift, TFLite's rounding) or onnx (float scale,\n"
        "                      round half to even, as ONNX Runtime's integer kernels)\n",
    .fn = qf_cli_run,
};
