"""libqfold through ctypes (ABI mode: nothing compiled at install).

The library is found, in this order:
  1. $QFOLD_LIBRARY: the path of a libqfold.so (an in-tree build's
     build/libqfold.so, a sanitized one, ...);
  2. the library `make install` installed with this package (_install.py,
     written at install time, names it);
  3. the system's: libqfold.so.0 through the dynamic loader's search
     (LD_LIBRARY_PATH, ld.so.cache).
Its version (qf_version()) must be the package's.

The structs below mirror the public headers (include/qfold/*.h) field by
field; tests/python/abi_layout.c prints every mirrored struct's size and
offsets from C and the tests compare them with these.
"""
import ctypes
import os

from ._version import __version__
from .errors import LibraryError, error_for

c_int, c_int32, c_int64, c_uint32, c_bool, c_double, c_float = (ctypes.c_int, ctypes.c_int32, ctypes.c_int64,
                                                                 ctypes.c_uint32, ctypes.c_bool, ctypes.c_double,
                                                                 ctypes.c_float)
c_char_p, c_void_p, c_size_t = ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t
POINTER = ctypes.POINTER
QF_MAX_DIMS = 8


class Tensor(ctypes.Structure):  # qf_tensor (qfold/tensor.h)
    _fields_ = [("dtype", c_int), ("ndim", c_int), ("dims", c_int64 * QF_MAX_DIMS), ("data", c_void_p),
                ("owns", c_bool), ("writable", c_bool)]


class Node(ctypes.Structure):  # qf_node (qfold/graph.h)
    pass


class Value(ctypes.Structure):  # qf_value
    _fields_ = [("id", c_uint32), ("name", c_char_p), ("kind", c_int), ("type", Tensor), ("producer", POINTER(Node)),
                ("producer_slot", c_int), ("uses", c_void_p), ("nuses", c_int), ("cap_uses", c_int),
                ("is_output", c_bool), ("store", c_int), ("deferred", c_void_p)]


Node._fields_ = [("id", c_uint32), ("op", c_int), ("name", c_char_p), ("ninputs", c_int), ("noutputs", c_int),
                 ("inputs", POINTER(POINTER(Value))), ("outputs", POINTER(POINTER(Value))), ("nattrs", c_int),
                 ("cap_attrs", c_int), ("attrs", c_void_p), ("prev", POINTER(Node)), ("next", POINTER(Node))]


class Graph(ctypes.Structure):  # qf_graph
    _fields_ = [("name", c_char_p), ("opset", c_int64), ("ir_version", c_int64), ("producer_name", c_char_p),
                ("first", POINTER(Node)), ("last", POINTER(Node)), ("nnodes", c_int),
                ("values", POINTER(POINTER(Value))), ("nvalues", c_int), ("cap_values", c_int),
                ("inputs", POINTER(POINTER(Value))), ("ninputs", c_int), ("cap_inputs", c_int),
                ("outputs", POINTER(POINTER(Value))), ("noutputs", c_int), ("cap_outputs", c_int),
                ("next_node_id", c_uint32), ("impl", c_void_p)]


READ_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_int64, c_int64, POINTER(c_void_p))


class DataSource(ctypes.Structure):  # qf_data_source (qfold/exec.h)
    _fields_ = [("ninputs", c_int), ("inputs", POINTER(POINTER(Tensor))), ("read", READ_FN), ("ud", c_void_p)]


class PassOptions(ctypes.Structure):  # qf_pass_options (qfold/pass.h)
    _fields_ = [("verify", c_bool), ("fixpoint", c_bool), ("max_iterations", c_int), ("user", c_void_p)]


class OnnxSaveOptions(ctypes.Structure):  # qf_onnx_save_options (qfold/io.h)
    _fields_ = [("external_data", c_char_p), ("location", c_char_p), ("always", c_bool), ("staged", c_bool),
                ("threshold", c_size_t), ("limit", c_size_t), ("wrote_external", c_bool)]


class VerifyOptions(ctypes.Structure):  # qf_verify_options (qfold/io.h)
    _fields_ = [("tolerance", c_double), ("ref_name", c_char_p), ("cand_name", c_char_p), ("change", c_char_p),
                ("hint", c_char_p)]


class CompareOutput(ctypes.Structure):  # qf_compare_output (qfold/exec.h)
    _fields_ = [("name", c_char_p), ("max_abs", c_double), ("max_ref", c_double), ("max_rel", c_double),
                ("ok", c_bool), ("worst_batch", c_int), ("worst_index", c_int64), ("worst_ref", c_double),
                ("worst_cand", c_double)]


class CompareResult(ctypes.Structure):  # qf_compare_result
    _fields_ = [("outputs", POINTER(CompareOutput)), ("noutputs", c_int), ("worst", c_int), ("batches", c_int),
                ("ok", c_bool)]


PROGRESS_FN = ctypes.CFUNCTYPE(None, c_void_p, c_char_p, c_int64, c_int64)


class QuantizeOptions(ctypes.Structure):  # qf_quantize_options (qfold/quant.h)
    _fields_ = [("profile", c_void_p), ("batch", c_int64), ("max_samples", c_int64), ("progress", PROGRESS_FN),
                ("progress_ud", c_void_p), ("plain_calibration", c_bool), ("exclude", POINTER(c_char_p)),
                ("nexclude", c_int), ("bn_stats", c_void_p), ("seed", ctypes.c_uint64),
                ("adaround_progress", c_void_p)]


class QuantizeModelOptions(ctypes.Structure):  # qf_quantize_model_options
    _fields_ = [("quantize", QuantizeOptions), ("sqnr_samples", c_int64), ("no_local_sqnr", c_bool),
                ("name", c_char_p)]


class ConvertStats(ctypes.Structure):  # qf_quant_convert_stats
    _fields_ = [("activations", c_int), ("weights", c_int), ("biases", c_int), ("zero_weights", c_int)]


class BcStats(ctypes.Structure):  # qf_quant_bc_stats (qfold/quant_bias.h)
    _fields_ = [("layers", c_int), ("added", c_int), ("skipped", c_int), ("passes", c_int), ("samples", c_int64),
                ("max_abs_error", c_double)]


class QuantizeResult(ctypes.Structure):  # qf_quantize_result
    _fields_ = [("samples", c_int64), ("prepare", c_void_p), ("convert", c_void_p), ("tensors", c_void_p),
                ("ntensors", c_int), ("left_float", c_void_p), ("nleft_float", c_int), ("stats", ConvertStats),
                ("calibrate_ms", c_double), ("convert_ms", c_double), ("eq_trial", c_bool),
                ("eq_tried", c_bool * 3), ("eq_sqnr", c_double * 3), ("eq_rule", c_int), ("equalize_ms", c_double),
                ("batch", c_int64), ("batch_note", c_char_p), ("bc_rule", c_int), ("bc_form", c_int),
                ("bc_kept", c_bool), ("bc_sqnr_before", c_double), ("bc_sqnr_after", c_double), ("bc", BcStats),
                ("bc_alt_sqnr", c_double), ("bc_alt", BcStats), ("bc_ms", c_double), ("bc_float", c_void_p),
                ("bc_bn", c_void_p), ("adaround", c_void_p), ("nadaround", c_int), ("adaround_ms", c_double),
                ("adaround_seed", ctypes.c_uint64), ("float_ref", c_void_p)]


class QuantizeModelResult(ctypes.Structure):  # qf_quantize_model_result
    _fields_ = [("passes", c_void_p), ("quant", QuantizeResult), ("sqnr", c_void_p), ("nsqnr", c_int),
                ("worst_local", c_int * 3), ("nworst_local", c_int), ("passes_ms", c_double), ("sqnr_ms", c_double)]


class QuantizeReportInfo(ctypes.Structure):  # qf_quantize_report_info
    _fields_ = [("input", c_char_p), ("output", c_char_p), ("sets", POINTER(c_char_p)), ("nsets", c_int),
                ("files", POINTER(c_char_p)), ("nfiles", c_int), ("target", c_void_p)]


class ClassifyOptions(ctypes.Structure):  # qf_classify_options (qfold/exec.h)
    _fields_ = [("batch", c_int64), ("model_name", c_char_p), ("labels_name", c_char_p)]


class ClassifyResult(ctypes.Structure):  # qf_classify_result
    _fields_ = [("n", c_int64), ("classes", c_int64), ("top1", c_int64), ("top5", c_int64),
                ("pred", POINTER(c_int32))]


class TfliteOptions(ctypes.Structure):  # qf_tflite_options (qfold/tflite.h)
    _fields_ = [("float_io", c_bool), ("all_outputs", c_bool), ("description", c_char_p), ("batch", c_int)]


class TfliteResult(ctypes.Structure):  # qf_tflite_result
    _fields_ = [("data", POINTER(ctypes.c_uint8)), ("size", c_size_t), ("nops", c_int), ("ops", c_void_p),
                ("ntensors", c_int), ("weight_bytes", c_int64), ("macs", c_int64),
                ("peak_activation_bytes", c_int64), ("activation_bytes", c_int64), ("impl", c_void_p)]


class EngineEnv(ctypes.Structure):  # qf_engine_env (qfold/exec.h)
    _fields_ = [("name", c_char_p), ("value", ctypes.c_char * 24)]


class OptimConfig(ctypes.Structure):  # qf_optim_config (qfold/train.h)
    _fields_ = [("kind", c_int), ("lr", c_double), ("momentum", c_double), ("dampening", c_double),
                ("nesterov", c_bool), ("weight_decay", c_double), ("beta1", c_double), ("beta2", c_double),
                ("eps", c_double)]


class Schedule(ctypes.Structure):  # qf_schedule
    _fields_ = [("kind", c_int), ("warmup", c_int64), ("step_size", c_int64), ("gamma", c_double),
                ("min_lr", c_double), ("total", c_int64)]


class TrainStepInfo(ctypes.Structure):  # qf_train_step_info
    _fields_ = [("epoch", c_int), ("step", c_int64), ("steps_per_epoch", c_int64), ("total_steps", c_int64),
                ("loss", c_double), ("accuracy", c_double), ("lr", c_double)]


STEP_FN = ctypes.CFUNCTYPE(c_int, c_void_p, POINTER(TrainStepInfo))


class TrainConfig(ctypes.Structure):  # qf_train_config
    _fields_ = [("epochs", c_int), ("batch", c_int64), ("optim", OptimConfig), ("sched", Schedule), ("loss", c_int),
                ("seed", ctypes.c_uint64), ("shuffle", c_bool), ("clip_norm", c_double),
                ("freeze", POINTER(c_char_p)), ("forward_only", c_bool), ("on_step", STEP_FN),
                ("on_epoch", c_void_p), ("ud", c_void_p)]


class TrainResult(ctypes.Structure):  # qf_train_result
    _fields_ = [("steps", c_int64), ("epochs_done", c_int), ("final_loss", c_double), ("val_accuracy", c_double),
                ("nparams", c_int), ("nweights", c_int64)]


class QatWhen(ctypes.Structure):  # qf_qat_when (qfold/qat.h)
    _fields_ = [("unit", c_int), ("at", c_int64)]


class QatConfig(ctypes.Structure):  # qf_qat_config
    _fields_ = [("train", TrainConfig), ("prepare", c_char_p), ("finalize", c_char_p), ("passes", PassOptions),
                ("calib_count", c_int64), ("freeze_bn", QatWhen), ("freeze_observers", QatWhen)]


class QFormat(ctypes.Structure):  # qf_qformat (qfold/quant.h)
    _fields_ = [("scheme", c_int), ("qmin", c_int32), ("qmax", c_int32), ("per_channel", c_bool),
                ("observer", c_int)]


# QF_OP_COUNT: what qf_op_from_name answers for a name that is no op.
OP_COUNT = None


class QuantFloatNode(ctypes.Structure):  # qf_quant_float_node
    _fields_ = [("name", c_char_p), ("op", c_char_p), ("reason", c_char_p)]


class QuantSession(ctypes.Structure):  # qf_quant_session
    _fields_ = [("profile", c_void_p), ("exclude", POINTER(c_char_p)), ("nexclude", c_int),
                ("annotation", c_void_p), ("calib", c_void_p), ("stats", ConvertStats), ("tensors", c_void_p),
                ("ntensors", c_int)]


class FinalizeSession(ctypes.Structure):  # qf_quant_finalize_session
    _fields_ = [("weight_range", c_bool), ("weight_qmin", c_int32), ("weight_qmax", c_int32),
                ("weights", c_void_p), ("nweights", c_int), ("cap", c_int), ("folded", c_int), ("biases", c_int),
                ("float_biases", c_int), ("activations", c_int), ("shared", c_int)]


TRIAL_FN = ctypes.CFUNCTYPE(None, c_void_p, c_void_p, c_int)


class QuantTargetTrial(ctypes.Structure):  # qf_quant_target_trial
    _fields_ = [("what", ctypes.c_char * 256), ("skipped", c_char_p), ("top1", c_double), ("drop", c_double),
                ("kept", c_bool)]


class QuantTargetOptions(ctypes.Structure):  # qf_quant_target_options
    _fields_ = [("model", QuantizeModelOptions), ("sets", POINTER(c_char_p)), ("nsets", c_int),
                ("eval", POINTER(DataSource)), ("labels", POINTER(c_int64)), ("eval_batch", c_int64),
                ("max_drop", c_double), ("max_excluded", c_int), ("trial", TRIAL_FN), ("trial_ud", c_void_p)]


class TargetSpec(ctypes.Structure):  # qf_target_spec (qfold/target.h)
    _fields_ = [("name", c_char_p), ("flow", c_int), ("num_macs", c_int), ("num_pipes", c_int),
                ("neutron_passes", c_bool)]


class CheckResult(ctypes.Structure):  # qf_check_result
    _fields_ = [("target", TargetSpec), ("from_float", c_bool), ("nodes", c_void_p), ("nnodes", c_int),
                ("partitions", c_void_p), ("partition_len", c_void_p), ("npartitions", c_int), ("npu_nodes", c_int),
                ("cpu_nodes", c_int), ("macs_total", c_int64), ("macs_npu", c_int64), ("macs_npu_padded", c_int64),
                ("npu_mac_fraction", c_double), ("transitions", c_int), ("arena", c_void_p)]


# The structs tests/python/abi_layout.c measures, by their C names.
MIRRORED = {"qf_tensor": Tensor, "qf_value": Value, "qf_node": Node, "qf_graph": Graph,
            "qf_data_source": DataSource, "qf_pass_options": PassOptions, "qf_onnx_save_options": OnnxSaveOptions,
            "qf_verify_options": VerifyOptions, "qf_compare_output": CompareOutput,
            "qf_compare_result": CompareResult, "qf_quantize_options": QuantizeOptions, "qf_quant_bc_stats": BcStats,
            "qf_quantize_model_options": QuantizeModelOptions, "qf_quant_convert_stats": ConvertStats,
            "qf_quantize_result": QuantizeResult, "qf_quantize_model_result": QuantizeModelResult,
            "qf_quantize_report_info": QuantizeReportInfo, "qf_classify_options": ClassifyOptions,
            "qf_classify_result": ClassifyResult, "qf_tflite_options": TfliteOptions,
            "qf_tflite_result": TfliteResult, "qf_engine_env": EngineEnv, "qf_optim_config": OptimConfig,
            "qf_schedule": Schedule, "qf_train_step_info": TrainStepInfo, "qf_train_config": TrainConfig,
            "qf_train_result": TrainResult, "qf_qat_when": QatWhen, "qf_qat_config": QatConfig,
            "qf_qformat": QFormat, "qf_quant_float_node": QuantFloatNode, "qf_quant_session": QuantSession,
            "qf_quant_finalize_session": FinalizeSession, "qf_quant_target_trial": QuantTargetTrial,
            "qf_quant_target_options": QuantTargetOptions, "qf_target_spec": TargetSpec,
            "qf_check_result": CheckResult}

P = POINTER
GRAPH_P = P(Graph)
# name: (restype, argtypes). restype c_int: a qf_status (checked by `check`).
SIGNATURES = {
    "qf_version": (c_char_p, []),
    "qf_error_message": (c_char_p, []),
    "qf_error_clear": (None, []),
    "qf_free": (None, [c_void_p]),
    "qf_onnx_load": (c_int, [c_char_p, P(GRAPH_P)]),
    "qf_onnx_load_buffer": (c_int, [c_void_p, c_size_t, c_char_p, P(GRAPH_P)]),
    "qf_onnx_save_buffer": (c_int, [GRAPH_P, P(c_void_p), P(c_size_t)]),
    "qf_onnx_save_ex": (c_int, [GRAPH_P, c_char_p, P(OnnxSaveOptions)]),
    "qf_graph_free": (None, [GRAPH_P]),
    "qf_graph_clone": (c_int, [GRAPH_P, P(GRAPH_P)]),
    "qf_graph_set_input_shape": (c_int, [GRAPH_P, c_int, c_int, P(c_int64)]),
    "qf_graph_infer_shapes": (c_int, [GRAPH_P]),
    "qf_graph_bind_input": (c_int, [GRAPH_P, c_int, P(Tensor)]),
    "qf_graph_input_use_default": (c_int, [GRAPH_P, c_int]),
    "qf_value_has_default": (c_bool, [P(Value)]),
    "qf_graph_is_quantized": (c_bool, [GRAPH_P]),
    "qf_node_attr_string": (c_char_p, [P(Node), c_char_p, c_char_p]),
    "qf_op_name": (c_char_p, [c_int]),
    "qf_op_onnx_name": (c_char_p, [c_int]),
    "qf_op_from_name": (c_int, [c_char_p]),
    "qf_dtype_name": (c_char_p, [c_int]),
    "qf_set_engine": (c_int, [c_int]),
    "qf_get_engine": (c_int, []),
    "qf_set_threads": (c_int, [c_int]),
    "qf_get_threads": (c_int, []),
    "qf_engine_about": (c_char_p, []),
    "qf_engine_environment": (c_int, [P(EngineEnv)]),
    "qf_plan_init": (c_int, [P(c_void_p), GRAPH_P]),
    "qf_plan_free": (None, [c_void_p]),
    "qf_plan_run": (c_int, [c_void_p, P(P(Tensor)), c_int]),
    "qf_plan_num_outputs": (c_int, [c_void_p]),
    "qf_plan_output": (P(Tensor), [c_void_p, c_int]),
    "qf_data_source_tensors": (DataSource, [P(P(Tensor)), c_int]),
    "qf_data_check": (c_int, [P(Value), P(Tensor)]),
    "qf_pipeline_run": (c_int, [GRAPH_P, c_char_p, P(PassOptions), P(c_void_p)]),
    "qf_pass_report_json": (c_int, [c_void_p, c_char_p, P(c_void_p), P(c_size_t)]),
    "qf_pass_report_free": (None, [c_void_p]),
    "qf_quant_register_passes": (c_int, []),
    "qf_verify_graphs": (c_int, [GRAPH_P, GRAPH_P, P(Tensor), P(VerifyOptions), P(CompareResult)]),
    "qf_compare_result_free": (None, [P(CompareResult)]),
    "qf_quant_profile_make": (c_int, [c_char_p, P(c_char_p), c_int, P(c_void_p)]),
    "qf_quantize_model_check": (c_int, [GRAPH_P, c_char_p]),
    "qf_quantize_model": (c_int, [GRAPH_P, P(DataSource), P(QuantizeModelOptions), P(QuantizeModelResult)]),
    "qf_quantize_model_result_free": (None, [P(QuantizeModelResult)]),
    "qf_quantize_model_report_json": (c_int, [P(QuantizeModelResult), c_void_p, P(QuantizeReportInfo),
                                              P(c_void_p), P(c_size_t)]),
    "qf_quant_lower_int8": (c_int, [GRAPH_P, c_void_p, c_int, P(c_int)]),
    "qf_classify": (c_int, [GRAPH_P, P(DataSource), P(c_int64), P(ClassifyOptions), P(ClassifyResult)]),
    "qf_classify_result_free": (None, [P(ClassifyResult)]),
    "qf_tflite_export": (c_int, [GRAPH_P, P(TfliteOptions), P(TfliteResult)]),
    "qf_tflite_result_free": (None, [P(TfliteResult)]),
    "qf_tflite_report_json": (c_int, [P(TfliteResult), c_void_p, P(c_void_p), P(c_size_t)]),
    "qf_train_defaults": (TrainConfig, []),
    "qf_train": (c_int, [GRAPH_P, P(DataSource), P(Tensor), P(DataSource), P(Tensor), P(TrainConfig),
                         P(TrainResult)]),
    "qf_optim_parse": (c_int, [c_char_p, P(c_int)]),
    "qf_sched_parse": (c_int, [c_char_p, P(c_int)]),
    "qf_tensor_init": (c_int, [P(Tensor), c_int, c_int, P(c_int64)]),
    "qf_npy_open": (c_int, [c_char_p, P(c_void_p)]),
    "qf_npy_info": (P(Tensor), [c_void_p]),
    "qf_npy_close": (None, [c_void_p]),
    "qf_npy_check_finite": (c_int, [c_char_p, c_char_p, P(Value), c_void_p]),
    "qf_npy_source_init": (c_int, [P(c_void_p), P(c_void_p), c_int]),
    "qf_npy_source_get": (P(DataSource), [c_void_p]),
    "qf_npy_source_free": (None, [c_void_p]),
    "qf_qat_defaults": (QatConfig, []),
    "qf_qat_when_parse": (c_int, [c_char_p, P(QatWhen)]),
    "qf_qat_prepare": (c_int, [GRAPH_P, P(QatConfig), P(c_void_p)]),
    "qf_qat_calibrate": (c_int, [GRAPH_P, P(DataSource), P(Tensor), P(QatConfig), P(c_int64)]),
    "qf_qat_train": (c_int, [GRAPH_P, P(DataSource), P(Tensor), P(DataSource), P(Tensor), P(QatConfig),
                             P(TrainResult)]),
    "qf_qat_bn_reestimate": (c_int, [GRAPH_P, P(DataSource), P(Tensor), P(QatConfig), c_int64, P(c_int),
                                     P(c_int64)]),
    "qf_qat_finalize": (c_int, [GRAPH_P, P(QatConfig), P(c_void_p)]),
    "qf_quant_exclude_resolve": (c_int, [GRAPH_P, P(c_char_p), c_int, c_char_p, P(c_void_p), P(c_void_p), P(c_int)]),
    "qf_quant_exclude_free": (None, [c_void_p, c_void_p, c_int]),
    "qf_quant_equalize_choose": (c_int, [GRAPH_P, P(DataSource), c_int64, c_void_p, P(c_int), P(QuantizeResult)]),
    "qf_quantize_result_free": (None, [P(QuantizeResult)]),
    "qf_quant_annotation_free": (None, [c_void_p]),
    "qf_quant_profile_find": (c_void_p, [c_char_p]),
    "qf_quant_finalize_session_free": (None, [P(FinalizeSession)]),
    "qf_quantize_to_target": (c_int, [GRAPH_P, P(DataSource), P(QuantTargetOptions), P(GRAPH_P),
                                      P(QuantizeModelResult), c_void_p]),
    "qf_quant_target_result_free": (None, [c_void_p]),
    "qf_onnx_record_excluded": (c_int, [GRAPH_P, c_void_p, c_int]),
    "qf_onnx_metadata": (c_int, [GRAPH_P, c_char_p, c_char_p, c_size_t, P(c_bool)]),
    "qf_graph_find_node": (c_void_p, [GRAPH_P, c_char_p]),
    "qf_graph_verify_shapes": (c_int, [GRAPH_P]),
    "qf_pipeline_find": (c_void_p, [c_char_p]),
    "qf_passes_run": (c_int, [GRAPH_P, P(c_char_p), P(PassOptions), P(c_void_p)]),
    "qf_graph_toposort": (c_int, [GRAPH_P]),
    "qf_onnx_metadata_set": (c_int, [GRAPH_P, c_char_p, c_char_p]),
    "qf_target_spec_init": (c_int, [P(TargetSpec), c_char_p]),
    "qf_target_spec_set": (c_int, [P(TargetSpec), c_char_p]),
    "qf_target_check": (c_int, [GRAPH_P, P(TargetSpec), P(CheckResult)]),
    "qf_check_report_json": (c_int, [P(CheckResult), P(c_void_p), P(c_size_t)]),
    "qf_check_result_free": (None, [P(CheckResult)]),
    "qf_interrupt_request": (None, []),
    "qf_interrupt_pending": (c_bool, []),
    "qf_interrupt_clear": (None, []),
    "qf_interrupt_catch_sigint": (c_int, []),
    "qf_interrupt_release_sigint": (None, []),
}


def _candidates():
    env = os.environ.get("QFOLD_LIBRARY")
    if env:
        return [env], "$QFOLD_LIBRARY"
    found = []
    try:
        from . import _install  # written by `make install`
        found.append(_install.LIBRARY)
    except ImportError:
        pass
    found.append("libqfold.so.0")
    return found, "the installed library"


def _load():
    paths, what = _candidates()
    errors = []
    for path in paths:
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            errors.append("%s: %s" % (path, e))
    raise LibraryError("cannot load libqfold (%s): %s; set QFOLD_LIBRARY to the path of a libqfold.so "
                       "(an in-tree build: build/libqfold.so)" % (what, "; ".join(errors)), "IO")


lib, path = _load()
for _name, (_res, _args) in SIGNATURES.items():
    try:
        _f = getattr(lib, _name)
    except AttributeError:
        raise LibraryError("%s has no %s(): it is not a libqfold %s" % (path, _name, __version__), "UNSUPPORTED")
    _f.restype, _f.argtypes = _res, _args

OP_COUNT = lib.qf_op_from_name(b"")


class QuantProfile(ctypes.Structure):  # qf_quant_profile (ops: QF_OP_COUNT entries, asked of the library)
    _fields_ = [("name", c_char_p), ("summary", c_char_p), ("activation", QFormat), ("conv_weight", QFormat),
                ("linear_weight", QFormat), ("min_scale", c_float), ("fuse_activation", c_bool),
                ("fuse_any_clip", c_bool), ("concat_shares", c_bool), ("matmul_symmetric", c_bool),
                ("reduction_shares", c_bool), ("equalize", c_int), ("bias_correction", c_int),
                ("neutron_passes", c_bool), ("weight_rounding", c_int), ("adaround_iters", c_int),
                ("adaround_reg", c_float), ("every_op", c_bool), ("ops", c_bool * OP_COUNT)]


class QuantTargetResult(ctypes.Structure):  # qf_quant_target_result
    _fields_ = [("float_top1", c_double), ("samples", c_int64), ("max_drop", c_double),
                ("trials", POINTER(QuantTargetTrial)), ("ntrials", c_int), ("best", c_int), ("met", c_bool),
                ("profile", QuantProfile), ("exclude", POINTER(c_char_p)), ("nexclude", c_int), ("ms", c_double)]


MIRRORED["qf_quant_profile"] = QuantProfile
MIRRORED["qf_quant_target_result"] = QuantTargetResult

version = lib.qf_version().decode()
if version != __version__:
    raise LibraryError("the qfold package is version %s but the library %s is version %s: install the "
                       "package and the library of one version (or set QFOLD_LIBRARY)"
                       % (__version__, path, version), "UNSUPPORTED")


def message():
    m = lib.qf_error_message()
    return m.decode("utf-8", "replace") if m else ""


def check(st):
    """Raise the qfold.Error subclass for a qf_status other than QF_OK."""
    if st != 0:
        raise error_for(st, message())


def take_text(ptr, size):
    """The bytes of a qf_malloc'd buffer (copied), the buffer freed."""
    try:
        return ctypes.string_at(ptr, size) if size else b""
    finally:
        lib.qf_free(ptr)
