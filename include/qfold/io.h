/* qfold — files: ONNX models and .npy arrays.
 *
 *   qf_graph *g;
 *   QF_TRY(qf_onnx_load("model.onnx", &g));
 *   QF_TRY(qf_onnx_save(g, "out.onnx"));      // temp file + rename
 *   QF_TRY(qf_onnx_save_buffer(g, &data, &size));   // or to memory
 *
 *   qf_tensor x;
 *   QF_TRY(qf_npy_load("x.npy", &x));          // x owns its data
 *   QF_TRY(qf_npy_save("y.npy", &x));
 *   qf_tensor_free(&x);
 */
#ifndef QFOLD_IO_H
#define QFOLD_IO_H

#include "qfold/exec.h"
#include "qfold/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Import an ONNX model (opsets 11..17). Initializers become constants (then
 * classified as parameters / buffers), shape-computation chains with static
 * shapes are folded to constants, shapes are inferred and the graph verified.
 * Any op outside QF_OP_LIST fails with QF_ERR_UNSUPPORTED naming op and node.
 * Statuses: QF_ERR_IO (unreadable file), QF_ERR_PARSE (not a valid ONNX
 * model: empty, truncated, malformed), QF_ERR_UNSUPPORTED (opset, op, dtype,
 * attribute type; float16 / bfloat16 are read as float32, their dtype kept
 * in qf_value.store), QF_ERR_INVALID (dangling name, value
 * produced twice, cycle), or whatever shape inference reports. Messages start
 * with the file name: "m.onnx: node 'conv1': ...". Graph inputs keep unknown
 * dims (dim_param) as -1. The protobuf is not kept: weights are copied once. */
qf_status qf_onnx_load(const char *path, qf_graph **out);
/* External data (initializers whose bytes live in side files next to the
 * model, as onnx's save_model(..., save_as_external_data=True) writes them)
 * is read by qf_onnx_load from the model's directory only: a location that
 * is absolute, has a ".." component or leads outside through a symbolic
 * link, a side file that is not a regular file, a range past its end are
 * QF_ERR_INVALID / QF_ERR_IO naming the initializer. Each such payload is
 * read into an allocation of its own (once, no other copy).
 * qf_onnx_load_ex reads side file `external_location` (as the model names
 * it) from `external_path` instead: a side file staged under a temporary
 * name by its writer (not confined: the caller vouches for it). */
typedef struct qf_onnx_load_options {
    const char *external_location, *external_path;
    /* Leave every Conv / ConvTranspose / Gemm / MatMul weight of 64 KiB or more in the file
     * (`qfold fuse`: graph.h, "payloads left in the file"): the graph keeps
     * the file open and reads such a payload only when something needs its
     * values; the exporter reads it straight into its write buffer. */
    bool defer;
} qf_onnx_load_options;
qf_status qf_onnx_load_ex(const char *path, const qf_onnx_load_options *o, qf_graph **out);
/* Same from memory; `what` (may be NULL) prefixes error messages. A model
 * with external data cannot be loaded this way (QF_ERR_UNSUPPORTED). */
qf_status qf_onnx_load_buffer(const void *data, size_t size, const char *what, qf_graph **out);
/* Export: names, opset, ir_version, producer and initializer order preserved
 * (initializers = constants that a node reads or that are graph outputs, in
 * value-id order, as raw_data); graph inputs and outputs carry dtype and
 * shape (dim_param "N" / "d<i>" for unknown dims, so shapes must have been
 * inferred). Internal ops are lowered: linear -> Gemm(transB=1) on rank-2
 * input, else MatMul(x, W^T) [+ Add(b)]; relu6 -> Clip(x, 0, 6). Written to a
 * temporary file in the same directory and renamed into place. */
qf_status qf_onnx_save(const qf_graph *g, const char *path);
/* qf_onnx_save with external data: initializers of at least `threshold`
 * bytes (0: 1024, as onnx's convert_model_to_external_data) are written to
 * the side file `external_data`, each at an offset that is a multiple of
 * 4096, and the model records them under `location` (NULL: the base name of
 * external_data). That happens when `always` is set, and otherwise only when
 * the model would be over `limit` bytes (0: protobuf's 2 GiB - 1), with
 * external_data NULL meaning "<path>.data". The side file is written to a
 * temporary file and renamed into place before the model (also through a
 * temporary file) is; `wrote_external` says whether it was written.
 * `staged`: path (and external_data) are temporary files the caller created
 * with qf_file_temp_create and renames into place itself once all its
 * outputs are written: they are written directly and synced, without a
 * temporary file of their own (one rename and one directory sync fewer); on
 * failure they are left to the caller to discard. */
typedef struct qf_onnx_save_options {
    const char *external_data;
    const char *location;
    bool always;
    bool staged;
    size_t threshold;
    size_t limit;
    bool wrote_external; /* out */
} qf_onnx_save_options;
qf_status qf_onnx_save_ex(const qf_graph *g, const char *path, qf_onnx_save_options *o);
/* The model into memory: *data (from qf_malloc, freed with qf_free) holds
 * the *size bytes qf_onnx_save writes to a file for a model without
 * external data (the same code writes both), for qf_onnx_load_buffer or a
 * caller that wants no file. A model over protobuf's 2 GiB is
 * QF_ERR_UNSUPPORTED naming its size (only a file with external data can
 * hold it); payloads left in the model file (defer) are read into the
 * buffer. On failure *data is NULL and *size 0. */
qf_status qf_onnx_save_buffer(const qf_graph *g, void **data, size_t *size);

/* metadata_props: the model's entries are kept from qf_onnx_load to
 * qf_onnx_save (through passes and qf_graph_clone). qf_onnx_metadata copies
 * the value of entry `key` into buf (NUL-terminated; *found false, buf ""
 * when there is none; QF_ERR_INVALID when it does not fit in size bytes or
 * is malformed); qf_onnx_metadata_set adds entry key = value, replacing one
 * of that key. */
qf_status qf_onnx_metadata(const qf_graph *g, const char *key, char *buf, size_t size, bool *found);
qf_status qf_onnx_metadata_set(qf_graph *g, const char *key, const char *value);
/* What `qfold quantize` / `qfold qat` record of --exclude: the entries of
 * left[0 .. nleft-1] (qf_quantize_result.left_float) with the reason
 * QF_QUANT_EXCLUDED ("excluded", qfold/quant.h), their node names one a line,
 * in metadata_props "qfold.excluded" (QF_QUANT_EXCLUDED_KEY), which the
 * TFLite export reads to refuse such a node with that reason. Nothing when
 * there is none. */
struct qf_quant_float_node;
qf_status qf_onnx_record_excluded(qf_graph *g, const struct qf_quant_float_node *left, int nleft);

/* Read one serialized TensorProto (the ONNX backend tests' input_0.pb). */
qf_status qf_onnx_tensor_load(const char *path, qf_tensor *out);

/* .npy version 1.0-3.0 read (version 1.0 written), C order, little-endian:
 * float32, float64, int8, uint8, int32, int64, bool. The header is checked
 * strictly and the data must be exactly numel * itemsize bytes, else
 * QF_ERR_PARSE naming the file; Fortran order, big-endian data and other
 * dtypes are QF_ERR_UNSUPPORTED. */
qf_status qf_npy_load(const char *path, qf_tensor *out);
qf_status qf_npy_save(const char *path, const qf_tensor *t);
/* qf_npy_save of a float32 tensor in a model's storage dtype (qf_value.store):
 * QF_STORE_F16 writes float16 ('<f2'), QF_STORE_BF16 float32 holding the
 * bfloat16 values (numpy has no bfloat16), both rounded to nearest even; 0
 * is qf_npy_save. qf_npy_load also reads float16 arrays, into float32. */
qf_status qf_npy_save_as(const char *path, const qf_tensor *t, int store);

/* A .npy file read a range of rows (indices of the first axis) at a time,
 * for data sets that need not be in memory whole (calibration):
 *
 *   qf_npy_file *f;
 *   QF_TRY(qf_npy_open("calib.npy", &f));       // header checked as qf_npy_load
 *   const qf_tensor *info = qf_npy_info(f);      // dtype and shape, data NULL
 *   QF_TRY(qf_npy_read_rows(f, first, count, buf));  // count * qf_npy_row_bytes(f)
 *   qf_npy_close(f);
 *
 * The file must be a regular file (rows are read at their offsets) holding
 * exactly the data its shape needs. Errors name the file. A rank-0 array has
 * no rows. */
typedef struct qf_npy_file qf_npy_file;
qf_status qf_npy_open(const char *path, qf_npy_file **out);
const qf_tensor *qf_npy_info(const qf_npy_file *f);
size_t qf_npy_row_bytes(const qf_npy_file *f);
/* Rows first .. first+count-1 into dst; QF_ERR_INVALID past the last row,
 * QF_ERR_PARSE if the file was truncated since it was opened. */
qf_status qf_npy_read_rows(qf_npy_file *f, int64_t first, int64_t count, void *dst);
void qf_npy_close(qf_npy_file *f);

/* A data source (qfold/exec.h) over .npy files, one per graph input, that
 * reads each batch's rows into a buffer of its own (one batch in memory, not
 * the data set). It borrows the files: close them after freeing the source. */
#define QF_NPY_SOURCE_MAX 64
typedef struct qf_npy_source qf_npy_source;
qf_status qf_npy_source_init(qf_npy_source **out, qf_npy_file *const *files, int n);
const qf_data_source *qf_npy_source_get(const qf_npy_source *s);
void qf_npy_source_free(qf_npy_source *s);

/* Every value of the float32 .npy file f (data for graph input v) finite
 * (other dtypes: QF_OK): read a few MiB at a time, the whole file checked
 * before anything runs. QF_ERR_NUMERIC "<what> '<path>' for input '<v>'
 * (expects float32 [?, 1, 28, 28], samples first, finite): element K
 * (sample S, at [c, h, w]) is NaN". */
qf_status qf_npy_check_finite(const char *what, const char *path, const qf_value *v, qf_npy_file *f);

/* Write `size` bytes to path through a temporary file in the same directory
 * (".NAME.qfold-tmp-<pid>-XXXXXX"; fsync, then rename): a failure never leaves a partial file. An existing
 * file's mode is kept; a new file gets 0644. */
qf_status qf_file_write_atomic(const char *path, const void *data, size_t size);
/* Temporary files, for a caller's own all-or-nothing writes of several
 * files. qf_file_temp_create creates an empty "DIR/.BASE.qfold-tmp-<pid>-XXXXXX"
 * next to path (mode 0600; *tmp is owned by the caller, qf_free) after
 * removing the ones that dead processes left for the same path, and
 * registers it for qf_file_remove_temps. qf_file_temp_forget unregisters it
 * once the caller renamed it into place; qf_file_temp_discard unlinks and
 * unregisters it. */
qf_status qf_file_temp_create(const char *path, char **tmp);
void qf_file_temp_forget(const char *tmp);
void qf_file_temp_discard(const char *tmp);
/* Remove the temporary files of every write in progress in this process
 * (each then fails or leaves nothing). Async-signal-safe: meant for a
 * SIGINT / SIGTERM handler, so that an interrupted program leaves no
 * ".NAME.qfold-tmp-<pid>-*" file; those of a process killed without a
 * chance to clean up are removed by the next write to the same path. */
void qf_file_remove_temps(void);
/* Read a whole regular file (owned buffer in *data, freed with qf_free);
 * directories, FIFOs and devices are QF_ERR_IO, without blocking. */
qf_status qf_file_read(const char *path, void **data, size_t *size);

/* --- several outputs, written all or nothing --------------------------------
 *
 *   qf_outputs out;
 *   qf_outputs_init(&out);
 *   QF_TRY(qf_outputs_add(&out, "output", "m.onnx"));         // each output, first
 *   QF_TRY(qf_outputs_input(&out, "the input model", in));    // each input
 *   ... the work ...
 *   const char *tmp;
 *   st = qf_outputs_save_model(&out, 0, g, &tmp);   // a model (+ its side file)
 *   st = qf_outputs_stage(&out, 1, &tmp);           // or any file: write it to tmp
 *   st = qf_outputs_commit(&out);                   // rename every staged file
 *   qf_outputs_free(&out);                          // removes what was not committed
 *
 * add refuses (QF_ERR_INVALID, message naming `what` and the path) '', a
 * directory, a non-regular file, a missing or unwritable parent directory,
 * and an output that is the same file as an earlier one; input refuses an
 * output that is that input. Files are compared by identity: device and
 * inode when both exist, else the real path of the parent directory + the
 * name ("./o.onnx" is "o.onnx"). stage creates the temporary
 * ".NAME.qfold-tmp-<pid>-XXXXXX" next to the output (qf_file_temp_create:
 * qf_file_remove_temps in a signal handler removes it) with the mode the
 * output will have; commit renames them all in the order added, side files
 * first, and syncs each directory. Paths are borrowed (they must outlive
 * the set). One set at a time per process for qf_outputs_load_staged.
 *
 * External data: with `external_data` set (before the first add) a model
 * output gets a side file ("<output>.data", or `external_name` in the
 * output's directory for the first output), checked as an output of its own
 * and written with the model's initializers of 1 KiB and more. Without it,
 * a model over `external_limit` bytes (0: protobuf's 2 GiB) goes out so
 * anyway (the side file is staged in case). A side file is always named after
 * its output's final name, never a temporary's. */
typedef struct qf_output {
    const char *what, *path;
    char *resolved; /* realpath(parent) + "/" + name */
    bool exists;
    unsigned long long dev, ino;
    char *tmp; /* staged temporary, until committed */
    /* A model output's side file for its external data (path owned in
     * side_path); renamed before every other output, dropped with its model. */
    struct qf_output *side;
    char *side_path;
} qf_output;
typedef struct qf_outputs {
    qf_output *o;
    int n, cap;
    bool external_data;        /* every model output with its side file */
    const char *external_name; /* the first output's side file name (NULL: "<output>.data") */
    size_t external_limit;     /* the automatic switch (0: protobuf's 2 GiB) */
    /* The last model qf_outputs_save_model staged, for qf_outputs_load_staged. */
    char *staged_model, *staged_side, *location;
} qf_outputs;
void qf_outputs_init(qf_outputs *s);
qf_status qf_outputs_add(qf_outputs *s, const char *what, const char *path);
/* A model output other than the first: with external_data its side file
 * "<path>.data" is checked as well. */
qf_status qf_outputs_add_model(qf_outputs *s, const char *what, const char *path);
qf_status qf_outputs_input(const qf_outputs *s, const char *what, const char *path);
qf_status qf_outputs_stage(qf_outputs *s, int i, const char **tmp);
/* Stage output i and write g to it as ONNX (*tmp: the staged name), with its
 * side file staged next to it when external data is written. */
qf_status qf_outputs_save_model(qf_outputs *s, int i, const qf_graph *g, const char **tmp);
/* qf_onnx_load of the model the last qf_outputs_save_model staged at `path`
 * (its side file read from its staged name), else of path. */
qf_status qf_outputs_load_staged(const qf_outputs *s, const char *path, qf_graph **out);
/* QF_ERR_IO "cannot rename 'T' to 'P': ..." when a rename fails (the
 * outputs renamed before it stay). */
qf_status qf_outputs_commit(qf_outputs *s);
/* Discard what output i staged: commit leaves its file as it was. */
void qf_outputs_drop(qf_outputs *s, int i);
void qf_outputs_free(qf_outputs *s);

/* --- verify: a rewritten model against the original --------------------------
 *
 *   qf_compare_result r;
 *   qf_verify_options o = {.tolerance = 1e-4, .ref_name = "original", .cand_name = "fused"};
 *   st = qf_verify_graphs(original, rewritten, NULL, &o, &r);   // inputs synthesized
 *   ... r.ok, r.outputs[i].max_abs ...
 *   qf_compare_result_free(&r);
 *
 * Runs both graphs on the same inputs and compares every output
 * (qf_compare_graphs, qfold/exec.h, on one batch). `given` is NULL (every
 * input synthesized) or holds ref->ninputs tensors, in graph input order, a
 * tensor with data NULL synthesized. A synthesized input is uniform [-1, 1)
 * (integer inputs zeros, as qf_compare_make_inputs), its unknown dims sized
 * from the model's constraints: a dim that shares its symbolic name with a
 * dim of a given tensor takes its size; dims that the shapes the ONNX file
 * declares for later values (value_info, outputs) pin are solved for; the
 * leading dim (the batch) is 1 otherwise, the others the smallest of
 * 1, 2, 4 ... 256 at which the reference graph plans. QF_ERR_MISMATCH
 * "cannot verify: the <ref_name> model does not run ..." when no size works
 * (ending "; give the inputs with <hint>" when hint is set); QF_OK when both
 * ran, whatever the differences (res->ok). Both graphs are
 * changed as qf_compare_graphs changes them. */
typedef struct qf_verify_options {
    double tolerance; /* max_rel bound per output; 0 = 1e-4 */
    /* Words for messages (qf_compare_options); NULL: compare's defaults. */
    const char *ref_name, *cand_name, *change;
    /* How the caller's user gives inputs, for the messages (the CLI's fuse:
     * "--verify-data X.npy"); NULL: the messages do not say. */
    const char *hint;
} qf_verify_options;
qf_status qf_verify_graphs(qf_graph *ref, qf_graph *cand, const qf_tensor *given, const qf_verify_options *opt,
                           qf_compare_result *res);

#ifdef __cplusplus
}
#endif
#endif
