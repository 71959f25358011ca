/* The size and field offsets of every struct the Python package mirrors
 * (python/qfold/_lib.py), as JSON: the package's tests compare them with
 * the ctypes mirrors, so that a header change the mirror misses fails a
 * test instead of corrupting memory. Generated from the mirror's field
 * lists; a field the header lacks fails to compile. */
#include <stddef.h>
#include <stdio.h>

#include "qfold/exec.h"
#include "qfold/io.h"
#include "qfold/pass.h"
#include "qfold/quant.h"
#include "qfold/tflite.h"

#define FIELD(T, f) printf("%s\"%s\": %zu", first ? "" : ", ", #f, offsetof(T, f)), first = 0
#define BEGIN(T) printf("%s\"%s\": {\"size\": %zu, \"fields\": {", nstruct++ ? ",\n " : "", #T, sizeof(T)), first = 1
#define END() printf("}}")

int main(void)
{
    int first, nstruct = 0;
    printf("{");
    BEGIN(qf_tensor);
    FIELD(qf_tensor, dtype);
    FIELD(qf_tensor, ndim);
    FIELD(qf_tensor, dims);
    FIELD(qf_tensor, data);
    FIELD(qf_tensor, owns);
    FIELD(qf_tensor, writable);
    END();
    BEGIN(qf_value);
    FIELD(qf_value, id);
    FIELD(qf_value, name);
    FIELD(qf_value, kind);
    FIELD(qf_value, type);
    FIELD(qf_value, producer);
    FIELD(qf_value, producer_slot);
    FIELD(qf_value, uses);
    FIELD(qf_value, nuses);
    FIELD(qf_value, cap_uses);
    FIELD(qf_value, is_output);
    FIELD(qf_value, store);
    FIELD(qf_value, deferred);
    END();
    BEGIN(qf_node);
    FIELD(qf_node, id);
    FIELD(qf_node, op);
    FIELD(qf_node, name);
    FIELD(qf_node, ninputs);
    FIELD(qf_node, noutputs);
    FIELD(qf_node, inputs);
    FIELD(qf_node, outputs);
    FIELD(qf_node, nattrs);
    FIELD(qf_node, cap_attrs);
    FIELD(qf_node, attrs);
    FIELD(qf_node, prev);
    FIELD(qf_node, next);
    END();
    BEGIN(qf_graph);
    FIELD(qf_graph, name);
    FIELD(qf_graph, opset);
    FIELD(qf_graph, ir_version);
    FIELD(qf_graph, producer_name);
    FIELD(qf_graph, first);
    FIELD(qf_graph, last);
    FIELD(qf_graph, nnodes);
    FIELD(qf_graph, values);
    FIELD(qf_graph, nvalues);
    FIELD(qf_graph, cap_values);
    FIELD(qf_graph, inputs);
    FIELD(qf_graph, ninputs);
    FIELD(qf_graph, cap_inputs);
    FIELD(qf_graph, outputs);
    FIELD(qf_graph, noutputs);
    FIELD(qf_graph, cap_outputs);
    FIELD(qf_graph, next_node_id);
    FIELD(qf_graph, impl);
    END();
    BEGIN(qf_data_source);
    FIELD(qf_data_source, ninputs);
    FIELD(qf_data_source, inputs);
    FIELD(qf_data_source, read);
    FIELD(qf_data_source, ud);
    END();
    BEGIN(qf_pass_options);
    FIELD(qf_pass_options, verify);
    FIELD(qf_pass_options, fixpoint);
    FIELD(qf_pass_options, max_iterations);
    FIELD(qf_pass_options, user);
    END();
    BEGIN(qf_onnx_save_options);
    FIELD(qf_onnx_save_options, external_data);
    FIELD(qf_onnx_save_options, location);
    FIELD(qf_onnx_save_options, always);
    FIELD(qf_onnx_save_options, staged);
    FIELD(qf_onnx_save_options, threshold);
    FIELD(qf_onnx_save_options, limit);
    FIELD(qf_onnx_save_options, wrote_external);
    END();
    BEGIN(qf_verify_options);
    FIELD(qf_verify_options, tolerance);
    FIELD(qf_verify_options, ref_name);
    FIELD(qf_verify_options, cand_name);
    FIELD(qf_verify_options, change);
    FIELD(qf_verify_options, hint);
    END();
    BEGIN(qf_compare_output);
    FIELD(qf_compare_output, name);
    FIELD(qf_compare_output, max_abs);
    FIELD(qf_compare_output, max_ref);
    FIELD(qf_compare_output, max_rel);
    FIELD(qf_compare_output, ok);
    FIELD(qf_compare_output, worst_batch);
    FIELD(qf_compare_output, worst_index);
    FIELD(qf_compare_output, worst_ref);
    FIELD(qf_compare_output, worst_cand);
    END();
    BEGIN(qf_compare_result);
    FIELD(qf_compare_result, outputs);
    FIELD(qf_compare_result, noutputs);
    FIELD(qf_compare_result, worst);
    FIELD(qf_compare_result, batches);
    FIELD(qf_compare_result, ok);
    END();
    BEGIN(qf_quantize_options);
    FIELD(qf_quantize_options, profile);
    FIELD(qf_quantize_options, batch);
    FIELD(qf_quantize_options, max_samples);
    FIELD(qf_quantize_options, progress);
    FIELD(qf_quantize_options, progress_ud);
    FIELD(qf_quantize_options, plain_calibration);
    END();
    BEGIN(qf_quantize_model_options);
    FIELD(qf_quantize_model_options, quantize);
    FIELD(qf_quantize_model_options, sqnr_samples);
    FIELD(qf_quantize_model_options, name);
    END();
    BEGIN(qf_quant_convert_stats);
    FIELD(qf_quant_convert_stats, activations);
    FIELD(qf_quant_convert_stats, weights);
    FIELD(qf_quant_convert_stats, biases);
    FIELD(qf_quant_convert_stats, zero_weights);
    END();
    BEGIN(qf_quantize_result);
    FIELD(qf_quantize_result, samples);
    FIELD(qf_quantize_result, prepare);
    FIELD(qf_quantize_result, convert);
    FIELD(qf_quantize_result, tensors);
    FIELD(qf_quantize_result, ntensors);
    FIELD(qf_quantize_result, left_float);
    FIELD(qf_quantize_result, nleft_float);
    FIELD(qf_quantize_result, stats);
    FIELD(qf_quantize_result, calibrate_ms);
    FIELD(qf_quantize_result, convert_ms);
    FIELD(qf_quantize_result, eq_trial);
    FIELD(qf_quantize_result, eq_tried);
    FIELD(qf_quantize_result, eq_sqnr);
    FIELD(qf_quantize_result, eq_rule);
    FIELD(qf_quantize_result, equalize_ms);
    FIELD(qf_quantize_result, batch);
    FIELD(qf_quantize_result, batch_note);
    END();
    BEGIN(qf_quantize_model_result);
    FIELD(qf_quantize_model_result, passes);
    FIELD(qf_quantize_model_result, quant);
    FIELD(qf_quantize_model_result, sqnr);
    FIELD(qf_quantize_model_result, nsqnr);
    FIELD(qf_quantize_model_result, passes_ms);
    FIELD(qf_quantize_model_result, sqnr_ms);
    END();
    BEGIN(qf_quantize_report_info);
    FIELD(qf_quantize_report_info, input);
    FIELD(qf_quantize_report_info, output);
    FIELD(qf_quantize_report_info, sets);
    FIELD(qf_quantize_report_info, nsets);
    FIELD(qf_quantize_report_info, files);
    FIELD(qf_quantize_report_info, nfiles);
    END();
    BEGIN(qf_classify_options);
    FIELD(qf_classify_options, batch);
    FIELD(qf_classify_options, model_name);
    FIELD(qf_classify_options, labels_name);
    END();
    BEGIN(qf_classify_result);
    FIELD(qf_classify_result, n);
    FIELD(qf_classify_result, classes);
    FIELD(qf_classify_result, top1);
    FIELD(qf_classify_result, top5);
    FIELD(qf_classify_result, pred);
    END();
    BEGIN(qf_tflite_options);
    FIELD(qf_tflite_options, float_io);
    FIELD(qf_tflite_options, all_outputs);
    FIELD(qf_tflite_options, description);
    FIELD(qf_tflite_options, batch);
    END();
    BEGIN(qf_tflite_result);
    FIELD(qf_tflite_result, data);
    FIELD(qf_tflite_result, size);
    FIELD(qf_tflite_result, nops);
    FIELD(qf_tflite_result, ops);
    FIELD(qf_tflite_result, ntensors);
    FIELD(qf_tflite_result, weight_bytes);
    FIELD(qf_tflite_result, macs);
    FIELD(qf_tflite_result, peak_activation_bytes);
    FIELD(qf_tflite_result, activation_bytes);
    FIELD(qf_tflite_result, impl);
    END();
    BEGIN(qf_engine_env);
    FIELD(qf_engine_env, name);
    FIELD(qf_engine_env, value);
    END();
    printf("}\n");
    (void)first;
    return 0;
}
