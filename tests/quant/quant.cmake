# Quantization: observers against PyTorch 1.13's (tests/quant/).
qf_add_c_test(NAME quant_observers SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_observers.c LABELS quant TIMEOUT 60)

if(QF_PYTHON3)
  set(QF_OBSERVER_REF "${QF_TEST_WORK}/observer_ref")
  add_test(NAME quant_observers_ref_gen COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/observers_ref.py ${QF_OBSERVER_REF})
  set_tests_properties(quant_observers_ref_gen PROPERTIES FIXTURES_SETUP observer_ref LABELS "quant" TIMEOUT 300)
  qf_add_c_test(NAME quant_observers_torch PROGRAM test_observers ARGS ${QF_OBSERVER_REF}
    FIXTURES_REQUIRED observer_ref LABELS quant TIMEOUT 120)
endif()

# Fixed-point requantization (src/ops/math/requant.h).
qf_add_c_test(NAME quant_requant SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_requant.c INTERNAL LABELS quant TIMEOUT 60)

# Calibration on the planned path (channels-last, fused where nothing is
# observed) against the plain plan: the same statistics up to float rounding.
qf_add_c_test(NAME quant_calib_plan SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_calib_plan.c INTERNAL LABELS quant TIMEOUT 120)

# The quantization rows (src/quant/op_quant.c): slots within the arity, profiles
# naming only ops with a pattern; broken copies caught.
qf_add_c_test(NAME quant_op_rows SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_op_quant.c PROGRAM test_op_quant INTERNAL
  LABELS quant unit TIMEOUT 60)

# Annotation: where the profiles put every Q/DQ pair.
qf_add_c_test(NAME quant_annotate SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_annotate.c LABELS quant TIMEOUT 60)

# qfold quantize end to end: ONNX checker, ONNX Runtime on every model written,
# the neutron placement rules in the file, bad input, and accuracy on a slice of
# Fashion-MNIST against PyTorch FX PTQ.
# quant_quantize_accuracy (top-1 on 2,000 Fashion-MNIST test images against
# PyTorch FX PTQ) is not in the sanitizer build: accuracy depends on the
# engine's rounding, not on memory safety; `qfold quantize` on the same model
# runs there in the fashion case, `qfold eval` in cli_eval_* and the errors case.
if(QF_PYTHON3 AND QF_NODE)
  set(QF_QUANTIZE_CASES fashion resnet18 mobilenet_v2 mixed errors zero_weights shared_bias progress group_convt)
  if(NOT QF_SANITIZE)
    list(APPEND QF_QUANTIZE_CASES accuracy)
  endif()
  foreach(case ${QF_QUANTIZE_CASES})
    add_test(NAME quant_quantize_${case}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/quantize_test.py --qfold $<TARGET_FILE:qfold>
              --root ${PROJECT_SOURCE_DIR} --work ${QF_TEST_WORK}/quantize ${case})
    set_tests_properties(quant_quantize_${case} PROPERTIES LABELS "quant" TIMEOUT 600)
  endforeach()
  set_tests_properties(quant_quantize_fashion PROPERTIES FIXTURES_SETUP quantized_fashion)

  # The int8 lowering on the model the fashion case wrote: 5 Conv and 2 Gemm
  # groups, its global average pool and its input's scaling (a Mul by a constant).
  qf_add_c_test(NAME quant_lower SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_lower.c
    ARGS ${QF_TEST_WORK}/quantize/fashion/fq_neutron.onnx 5 2 2
    FIXTURES_REQUIRED quantized_fashion LABELS quant TIMEOUT 60)
  # And on the mixed case's model: 2 Conv groups, 1 Gemm, and with TFLite's
  # requantization its ConvTranspose, Concat, Add of a constant, global average
  # pool and max pool (the max pool with ONNX's too).
  set_tests_properties(quant_quantize_mixed PROPERTIES FIXTURES_SETUP quantized_mixed)
  qf_add_c_test(NAME quant_lower_mixed PROGRAM test_lower
    ARGS ${QF_TEST_WORK}/quantize/mixed/q.onnx 2 1 5 1 qconv_transpose,qconcat,qmean
    FIXTURES_REQUIRED quantized_mixed LABELS quant TIMEOUT 60)
endif()

# QAT's prepare: QAT annotation, fake_quant insertion, qat_bn_add, a training step.
qf_add_c_test(NAME quant_qat_prepare SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_qat_prepare.c LABELS quant qat TIMEOUT 60)
