/* qfold — the reference executor.
 *
 *   qf_plan *p;
 *   QF_TRY(qf_plan_init(&p, g));            // order, shapes, buffers: once
 *   const qf_tensor *in[] = {&x};
 *   QF_TRY(qf_plan_run(p, in, 1));          // as often as needed
 *   const qf_tensor *y = qf_plan_output(p, 0);  // valid until the next run
 *   qf_plan_free(p);
 *
 * The plan sorts the graph, infers every shape from the graph inputs' shapes
 * (all must be known), prepares every node once (attributes decoded,
 * geometry checked; the state is kept for the runs), then lays every
 * activation out in one arena by
 * liveness (a buffer is reused once its last reader has run). Kernels get
 * their scratch memory from the plan; nothing is allocated per run.
 * The graph must outlive the plan and must not change while the plan exists.
 */
#ifndef QFOLD_EXEC_H
#define QFOLD_EXEC_H

#include <stdbool.h>
#include <stdio.h>

#include "qfold/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qf_plan qf_plan;

/* --- kernels and threads (process-wide; set before building plans) ---------
 * Plans run their nodes on the oneDNN backend where it has a kernel for the
 * node, and on qfold's portable reference kernels elsewhere. QF_ENGINE_AUTO
 * (the default, or the environment's QFOLD_ENGINE=ref|dnnl) uses oneDNN when
 * libdnnl.so.2 loads; QF_ENGINE_REF runs only the reference kernels;
 * QF_ENGINE_DNNL fails when oneDNN cannot be loaded (the message says why).
 * A plan keeps the engine it was built with. */
typedef enum qf_engine { QF_ENGINE_AUTO = 0, QF_ENGINE_REF = 1, QF_ENGINE_DNNL = 2 } qf_engine;
qf_status qf_set_engine(qf_engine e);
/* QF_ENGINE_REF or QF_ENGINE_DNNL: what new plans use. */
qf_engine qf_get_engine(void);
const char *qf_engine_name(qf_engine e);   /* "auto", "ref", "dnnl" */
/* One phrase on the active kernels: "oneDNN 2.6.3" when the oneDNN backend
 * is active, else "oneDNN: <why not>". */
const char *qf_engine_about(void);
/* The process is about to train (qf_train calls it; `qfold train` / `qfold
 * qat` before anything loads oneDNN). oneDNN's OpenMP threads then spin at
 * most 3000 iterations after each oneDNN call instead of the 30000 that
 * inference was measured best with: between a training step's convolutions
 * qfold's own kernels (BatchNorm, fake-quant, activations, their backward)
 * run on its own threads, which the spinning ones take cores from. It
 * changes what qf_engine_environment recommends (the program sets it before
 * oneDNN loads: libgomp reads its environment once), never a user's
 * OMP_WAIT_POLICY / GOMP_SPINCOUNT. */
void qf_engine_prefer_training(void);
/* The process environment: the library reads QFOLD_ENGINE (the default
 * engine) and changes none. oneDNN runs on libgomp (OpenMP), which reads its
 * settings from the environment once, when it loads, i.e. when qfold first
 * loads oneDNN (the first qf_set_engine with AUTO / DNNL or the first plan).
 * A program that embeds qfold sets them before that, if it wants what qfold
 * measured best (the CLI does, in main.c):
 *
 *   qf_engine_env env[QF_ENGINE_ENV_MAX];
 *   QF_TRY(qf_set_threads(n));   qf_engine_prefer_training();   // if so
 *   for (int k = 0, m = qf_engine_environment(env); k < m; k++)
 *       setenv(env[k].name, env[k].value, 0);   // 0: the user's values win
 *   QF_TRY(qf_set_engine(QF_ENGINE_AUTO));      // oneDNN loads now, or later
 *
 * What it recommends and why (left unset, libgomp's defaults apply: the
 * results are the same, the speed and memory are not):
 *   OMP_NUM_THREADS  qf_get_threads(). The library also gives oneDNN that
 *                    many threads through omp_set_num_threads when
 *                    OMP_NUM_THREADS is unset, so this one is optional;
 *   GOMP_SPINCOUNT   how long libgomp's idle threads spin between two
 *                    oneDNN calls before they sleep: 30000 (3000 once
 *                    qf_engine_prefer_training was called, 300 when the
 *                    machine's load average exceeds twice its cores); a plan
 *                    calls oneDNN dozens of times per run, and threads that
 *                    sleep at once cost a wake-up per call (2-4x slower
 *                    inference measured), while libgomp's own default spins
 *                    ten times longer and takes cores from qfold's kernels.
 *                    Not listed when OMP_WAIT_POLICY is set;
 *   OMP_STACKSIZE    4M: libgomp's threads otherwise reserve the process's
 *                    stack limit (8 MB) each, which counts under `ulimit -v`.
 * qf_engine_environment returns the count filled (0 in a build without
 * oneDNN). */
#define QF_ENGINE_ENV_MAX 3
typedef struct qf_engine_env {
    const char *name;
    char value[24];
} qf_engine_env;
int qf_engine_environment(qf_engine_env *env);
/* Threads the kernels use: 0 = the machine's cores (the default). Before the
 * first plan runs; QF_ERR_INVALID outside 0..16. */
qf_status qf_set_threads(int n);
int qf_get_threads(void);

qf_status qf_plan_init(qf_plan **out, qf_graph *g);
void qf_plan_free(qf_plan *p);

/* inputs in graph input order; dtype and shape must match the graph's. An
 * entry NULL for an input with a default (qf_value_has_default) runs it with
 * its default. */
qf_status qf_plan_run(qf_plan *p, const qf_tensor *const *inputs, int ninputs);
int qf_plan_num_outputs(const qf_plan *p);
/* A borrowed view of output i (graph output order). */
const qf_tensor *qf_plan_output(const qf_plan *p, int i);
/* Bytes of the activation arena (planned) and the sum of all activations
 * (unplanned) — the ratio says what the planner saved. */
size_t qf_plan_arena_bytes(const qf_plan *p);
size_t qf_plan_naive_bytes(const qf_plan *p);
/* What the plan runs, one step a line: the kernel (ref / dnnl), the node,
 * the memory layout of each 4-D input and output (nchw, or nhwc:
 * channels-last), the nodes fused into it as post-ops, and the reorders the
 * layout plan inserted (qfold inspect --plan prints this). */
void qf_plan_print(const qf_plan *p, FILE *f);

/* A per-step hook: after each node runs, hook(ud, node, outputs, noutputs)
 * sees its output tensors (views into the arena, valid only during the call:
 * the memory is reused by later steps). Calibration observes activations
 * this way without keeping them. A status other than QF_OK stops the run
 * and is returned by qf_plan_run. NULL removes the hook. */
typedef qf_status (*qf_plan_hook)(void *ud, const qf_node *n, const qf_tensor *const *outputs, int noutputs);
void qf_plan_set_hook(qf_plan *p, qf_plan_hook hook, void *ud);

/* Observing chosen values on the planned fast path (calibration): a plan
 * built with qf_plan_init_observed runs channels-last and with post-ops
 * fused as qf_plan_init's does, except that no fusion hides a value that
 * wants(ud, v) accepts (asked once per value at build); after the step that
 * writes such a value, observe(ud, v, t, nhwc) sees it: t has v's logical
 * dims (N, C, H, W for 4-D) and, when nhwc, channels-last data — fine for
 * statistics that ignore element order (per-tensor min / max, histograms).
 * t is a view into the arena, valid during the call. A hook set later
 * (qf_plan_set_hook) makes the plan plain again; observe is still called. */
typedef struct qf_plan_observer {
    bool (*wants)(void *ud, const qf_value *v);
    qf_status (*observe)(void *ud, const qf_value *v, const qf_tensor *t, bool nhwc);
    void *ud;
} qf_plan_observer;
qf_status qf_plan_init_observed(qf_plan **out, qf_graph *g, const qf_plan_observer *obs);
/* An observed tensor's elements into dst (qf_tensor_nbytes(t) bytes) in
 * NCHW order: t as the observer got it, channels-last when nhwc (a 4-D
 * activation). On the kernels' threads. */
void qf_exec_copy_nchw(void *dst, const qf_tensor *t, bool nhwc);

/* A data set read a range of samples at a time, so that it never has to be
 * in memory whole. inputs[i] describes the data of graph input i: dtype and
 * shape [N, sample dims...] (its data pointer is not used; N, the sample
 * count, is the same for every input). read(src, first, count, rows) points
 * rows[i], for every input, at samples first .. first+count-1 of input i
 * (count * sample bytes, C order), valid until the next read or until the
 * source goes away; first + count <= N. qf_npy_source (qfold/io.h) reads
 * .npy files; qf_data_source_tensors wraps tensors already in memory. */
typedef struct qf_data_source qf_data_source;
struct qf_data_source {
    int ninputs;
    const qf_tensor *const *inputs;
    qf_status (*read)(const qf_data_source *src, int64_t first, int64_t count, const void **rows);
    void *ud;
};

/* Data [N, sample dims...] for graph input v: v's dtype and rank, the sample
 * dims the graph fixes, N >= 1. QF_ERR_INVALID (dtype) / QF_ERR_SHAPE naming
 * the input and both shapes. */
qf_status qf_data_check(const qf_value *v, const qf_tensor *data);

/* A source over in-memory tensors data[0 .. ndata-1] ([N, ...] each): rows
 * point into them (no copy). The tensors must outlive the source. */
qf_data_source qf_data_source_tensors(const qf_tensor *const *data, int ndata);

/* Running a data set in batches: the graph's batch dimension is set to
 * `batch` (the last batch may be smaller), a plan is built for each batch
 * size (with `hook`, may be NULL, installed; by qf_plan_init_observed with
 * `observer`), each batch's rows are read
 * from the source (one batch in memory at a time) and run, and after each
 * run on_batch(ud, first, count, plan) is called (may be NULL): samples
 * first .. first+count-1, the plan's outputs hold them in their first
 * `count` rows, and the rows the source returned for them are still valid.
 * A graph whose batch dimension is fixed runs that size; a short last batch
 * is padded (the extra rows repeat the last sample). With `widen`, a graph
 * whose fixed batch size qf_batch_widen accepts runs `batch` samples at
 * once instead, as a graph with a dynamic batch does (same plans, same
 * results). The graph's input shapes are restored at the end and every
 * shape inferred from them again. */
typedef qf_status (*qf_batch_fn)(void *ud, int64_t first, int64_t count, const qf_plan *plan);
typedef struct qf_batch_options {
    int64_t batch;       /* samples per run; 0 = 32 */
    qf_plan_hook hook;   /* per-step hook of every plan (may be NULL): plans run plain */
    void *hook_ud;
    const qf_plan_observer *observer; /* NULL, or plans built by qf_plan_init_observed */
    qf_batch_fn on_batch;
    void *ud;
    bool widen; /* a fixed batch size may grow (qf_batch_widen) */
} qf_batch_options;
qf_status qf_run_source(qf_graph *g, const qf_data_source *src, const qf_batch_options *opt);
/* The same, a batch at a time, for callers that run two graphs in step on
 * the rows they read once (per-layer SQNR, the int8 diff): data[i]
 * describes input i ([N, ...] as a source's inputs; the data pointers are
 * not used), opt's batch and on_batch are not used. qf_batcher_run runs
 * `count` samples (rows[i]: count samples of input i, C order) on a plan
 * kept until the batch size changes; a graph with a fixed batch size runs
 * that size (qf_batcher_rows), a short batch padded with its last sample.
 * qf_batcher_plan: the plan of the last run, its outputs in its first
 * `count` rows. qf_batcher_close restores the graph's input shapes and
 * infers every shape again (its status), and frees the batcher (NULL: no-op).
 * One batcher per graph at a time. With opt->widen, qf_batcher_rows of a
 * fixed-batch graph answers `count` when the graph may run that many
 * samples at once (qf_batch_widen), and qf_batcher_why says why not (NULL
 * when it may, or the graph's batch is not fixed). */
typedef struct qf_batcher qf_batcher;
qf_status qf_batcher_open(qf_batcher **out, qf_graph *g, const qf_tensor *const *data, int ndata,
                          const qf_batch_options *opt);
int64_t qf_batcher_rows(qf_batcher *b, int64_t count);
const char *qf_batcher_why(const qf_batcher *b);
qf_status qf_batcher_run(qf_batcher *b, const void *const *rows, int64_t count);
const qf_plan *qf_batcher_plan(const qf_batcher *b);
qf_status qf_batcher_close(qf_batcher *b);

/* --- a fixed batch size, widened -------------------------------------------
 *
 *   qf_batch_widen *w;
 *   st = qf_batch_widen_init(&w, g);           // g's inputs fix the batch (f)
 *   bool ok;
 *   st = qf_batch_widen_begin(w, 32, &ok);     // g now at batch 32 if ok
 *   ... plan and run g ...
 *   qf_batch_widen_end(w);                     // g's inputs at f again
 *   qf_batch_widen_free(w);
 *
 * Whether a graph exported with a fixed batch size f (PyTorch's default:
 * that of the example input) may run R samples at once, each sample's
 * outputs what they are at batch f: every node reading a value derived
 * from the inputs is of an op that computes row by row along axis 0, with
 * its axis attributes away from axis 0, and every such value, inferred at
 * batch R, has R / f times its rows and the same other dims
 * (src/exec/batch_widen.c gives the proof and the ops). A Reshape whose
 * constant shape starts with its input's axis-0 size (PyTorch's [1, -1] of
 * x.view(x.size(0), -1)) copies that dim from its input while widened.
 * init (shapes inferred at f) checks the ops; begin sets the inputs to R
 * rows, infers, checks the shapes and, when *ok, leaves g so (Reshape shape
 * constants rewritten) until end or the next begin; otherwise g is as found.
 * qf_batch_widen_why: the reason of the last refusal, naming the node
 * (NULL: none). The graph must not change in between. */
typedef struct qf_batch_widen qf_batch_widen;
qf_status qf_batch_widen_init(qf_batch_widen **out, qf_graph *g);
qf_status qf_batch_widen_begin(qf_batch_widen *w, int64_t rows, bool *ok);
void qf_batch_widen_end(qf_batch_widen *w);
const char *qf_batch_widen_why(const qf_batch_widen *w);
void qf_batch_widen_free(qf_batch_widen *w);

/* --- classification accuracy (what `qfold eval` counts) --------------------
 *
 *   qf_classify_result r;
 *   st = qf_classify(g, src, labels, &(qf_classify_options){.batch = 64}, &r);
 *   printf("top-1 %.2f %%\n", 100.0 * (double)r.top1 / (double)r.n);
 *   qf_classify_result_free(&r);
 *
 * Runs g over every sample of src (qf_run_source) and ranks its first output,
 * class scores float32 [batch, classes], against labels (src's sample count
 * of class indices): top1 counts the samples whose true class no score beats
 * (ties go to the lower index, as argmax; NaN beats nothing), top5 those
 * that fewer than 5 beat; pred[i] is sample i's highest-scoring class.
 * QF_ERR_UNSUPPORTED for another first output, QF_ERR_INVALID for a label
 * out of range (the message names the sample, and the files when named).
 * A QDQ model runs as given: lower it first (qf_quant_lower_int8) to count
 * as `qfold eval` does. */
typedef struct qf_classify_options {
    int64_t batch;           /* samples per run; 0 = 32 */
    const char *model_name;  /* in messages; NULL: "the model" */
    const char *labels_name; /* the labels' file in messages; NULL: not named */
} qf_classify_options;
typedef struct qf_classify_result {
    int64_t n, classes, top1, top5;
    int32_t *pred; /* n top-1 classes (qf_malloc) */
} qf_classify_result;
qf_status qf_classify(qf_graph *g, const qf_data_source *src, const int64_t *labels, const qf_classify_options *opt,
                      qf_classify_result *out);
void qf_classify_result_free(qf_classify_result *r);

/* --- model vs model ---------------------------------------------------------
 *
 *   qf_compare_result r;
 *   qf_status st = qf_compare_graphs(original, rewritten, NULL, 0, &(qf_compare_options){0}, &r);
 *   for (int i = 0; i < r.noutputs; i++)   // also filled when st is a shape mismatch
 *       printf("%s: max abs diff %g %s\n", r.outputs[i].name, r.outputs[i].max_abs,
 *              r.outputs[i].ok ? "ok" : "FAILED");
 *   qf_compare_result_free(&r);
 *
 * Runs a reference graph and a candidate graph (a fused, quantized or
 * trained form of it) on the same inputs, batch after batch, and compares
 * every output: for output o over all batches, with a = reference and
 * b = candidate elements,
 *   max_abs = max |a - b|   (Inf when one side is NaN and the other is not;
 *                            both NaN counts as equal)
 *   max_ref = max |a|       (over the elements where neither side is NaN)
 *   max_rel = max_abs / max(1e-6, max_ref),   ok = max_rel <= tolerance.
 * Inputs are the caller's, or made from the reference graph's inputs:
 * uniform [-1, 1) floats from a fixed-seed generator (unknown dims taken as
 * 1), integer and bool inputs zeros. Both graphs are changed as `qfold run`
 * changes a graph: their input shapes are set to the inputs' shapes and
 * int64 inputs become constants (from the first batch; later batches must
 * repeat them). Compare copies of graphs that are needed afterwards. */
typedef struct qf_compare_options {
    double tolerance;          /* max_rel bound per output; 0 = 1e-4 */
    int batches;               /* batches to run; 0 = 1. With given inputs, the batches they hold */
    uint64_t seed;             /* generated inputs: 0 = the fixed default seed */
    /* Words for messages, e.g. "original", "fused", "fusing" ("output 'y':
     * shape [1,4] before, [1,5] after fusing"); NULL = "reference",
     * "candidate", "the rewrite". */
    const char *ref_name, *cand_name, *change;
} qf_compare_options;

typedef struct qf_compare_output {
    const char *name;          /* the reference graph's output name (owned by the result) */
    double max_abs, max_ref, max_rel;
    bool ok;
    /* The element with the largest |a - b| (the first of equals): batch,
     * flat index into the output, and both values; index -1 when every
     * element is equal. */
    int worst_batch;
    int64_t worst_index;
    double worst_ref, worst_cand;
} qf_compare_output;

typedef struct qf_compare_result {
    qf_compare_output *outputs; /* graph output order */
    int noutputs;              /* outputs compared (on a shape mismatch: up to the mismatched one) */
    int worst;                 /* the output with the largest max_rel (-1 when noutputs is 0) */
    int batches;               /* batches run */
    bool ok;                   /* every output within the tolerance */
} qf_compare_result;

/* Compare ref and cand. inputs is NULL (generated inputs) or holds
 * opt->batches (0 = 1) batches of ref->ninputs tensors, batch-major:
 * inputs[b * ninputs + i]; ninputs must equal ref->ninputs then. Each must
 * match the graph input's dtype and rank. *out is always initialized (free
 * it with qf_compare_result_free). Returns QF_OK when both graphs ran,
 * whatever the differences (see out->ok); QF_ERR_MISMATCH when the graphs'
 * input or output counts differ or an output's shape does (out holds the
 * outputs up to that one, that one with ok false); otherwise the status of
 * binding or running a graph, its message prefixed by "running the <name>
 * model: ". opt may be NULL. */
qf_status qf_compare_graphs(qf_graph *ref, qf_graph *cand, const qf_tensor *const *inputs, int ninputs,
                            const qf_compare_options *opt, qf_compare_result *out);
void qf_compare_result_free(qf_compare_result *r);
/* The inputs qf_compare_graphs generates for batch `batch` (seed 0 = the
 * default): ts[i] for every input of g, each to be freed with
 * qf_tensor_free (on failure none is left allocated). */
qf_status qf_compare_make_inputs(const qf_graph *g, uint64_t seed, int batch, qf_tensor *ts);

/* Run node n alone (its shapes inferred): prepare it, allocate its scratch,
 * run its float forward kernel. in: n->ninputs tensors (NULL for an omitted
 * optional input); out: n->noutputs tensors set up by the caller (dtype,
 * shape, data). Allocates only transient state. Errors name the node. */
qf_status qf_node_eval(const qf_node *n, int64_t opset, const qf_tensor *const *in, qf_tensor *const *out);

/* Run node n alone forward then backward (the backward kernels' tests): the
 * forward as qf_node_eval, in training mode when `training` (BatchNormalization
 * on batch statistics, updating in[3] / in[4] in place; Dropout drawing from
 * `seed`), then the op's backward_f32 with dout (n->noutputs entries, NULL:
 * no gradient on that output) into din (n->ninputs entries, NULL: not
 * wanted; float32 tensors of the input's shape, set up by the caller). The
 * backward sees the data of only the inputs and outputs the op's bwd_in /
 * bwd_out name (the others with data NULL, as the tape frees them).
 * QF_ERR_UNSUPPORTED naming the node when the op has no backward kernel. */
qf_status qf_node_eval_grad(const qf_node *n, int64_t opset, const qf_tensor *const *in, qf_tensor *const *out,
                            const qf_tensor *const *dout, qf_tensor *const *din, bool training, uint64_t seed);

/* --- the backward tape (grad.c) -----------------------------------------------
 *
 *   qf_grad_plan *gp;
 *   qf_grad_options o = {.loss = loss_value, .nparams = n, .params = ps};
 *   QF_TRY(qf_grad_plan_init(&gp, g, &o));
 *   for (each batch) {
 *       QF_TRY(qf_grad_plan_forward(gp, inputs, ninputs, true));   // training mode
 *       QF_TRY(qf_grad_plan_backward(gp));                         // d loss / d params
 *       ... an optimizer reads qf_grad_plan_grad(gp, i) and writes params[i]->type.data
 *   }
 *   qf_grad_plan_free(gp);
 *
 * A training plan over g (reference kernels; a Relu after a BatchNormalization
 * runs inside it; channels-last chains on oneDNN's convolutions): the forward
 * keeps what each node's backward reads (its op's bwd_in / bwd_out) until that
 * backward has run and frees the rest as the inference plan does; the
 * backward runs the nodes in reverse order from d loss / d loss = 1, writing
 * every gradient into a buffer of one arena laid out by liveness, and sums
 * where a value has several readers. Only nodes between a parameter and the
 * loss run backward; one of them without a backward kernel fails the init,
 * naming it. Parameters are read from, and stay in, their values' payloads:
 * the caller updates them in place between steps (they must be writable:
 * owned, or borrowed and writable), as BatchNormalization's running
 * statistics are in the training forward. The graph's input shapes must be
 * set (batch included) and must not change while the plan exists. */
typedef struct qf_grad_plan qf_grad_plan;
typedef struct qf_grad_options {
    const qf_value *loss;              /* a float32 value of one element: the loss */
    int nparams;
    const qf_value *const *params;     /* the values to differentiate (constants of g) */
    bool unfused;                      /* every node a step of its own (tests: the fused kernels against them) */
} qf_grad_options;
qf_status qf_grad_plan_init(qf_grad_plan **out, qf_graph *g, const qf_grad_options *opt);
void qf_grad_plan_free(qf_grad_plan *p);
/* Forward over inputs (graph input order); `training`: BN on batch statistics
 * and updating its running ones, Dropout active with a new stream each call
 * (seeded: qf_grad_plan_seed). Without training the plan runs as inference
 * and a backward is refused. */
qf_status qf_grad_plan_forward(qf_grad_plan *p, const qf_tensor *const *inputs, int ninputs, bool training);
/* Gradients of the loss of the last training forward. */
qf_status qf_grad_plan_backward(qf_grad_plan *p);
/* d loss / d params[i] after a backward (float32, the parameter's shape). */
const qf_tensor *qf_grad_plan_grad(const qf_grad_plan *p, int i);
/* Graph output i of the last forward (valid until the next forward). */
const qf_tensor *qf_grad_plan_output(const qf_grad_plan *p, int i);
/* The loss of the last forward. */
float qf_grad_plan_loss(const qf_grad_plan *p);
/* Dropout's random streams derive from this seed and a step counter. */
void qf_grad_plan_seed(qf_grad_plan *p, uint64_t seed);
/* Bytes of the training arena (forward values kept + gradients). */
size_t qf_grad_plan_arena_bytes(const qf_grad_plan *p);
/* Nodes that run inside another node's kernels (a Relu inside the
 * BatchNormalization before it): 0 with qf_grad_options.unfused. */
int qf_grad_plan_fused(const qf_grad_plan *p);

#ifdef __cplusplus
}
#endif
#endif
