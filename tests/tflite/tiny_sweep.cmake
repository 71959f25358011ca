# The Tiny-ML sweep (issue 29): eight small MLPerf-Tiny-style models trained
# briefly in PyTorch 1.13 on a synthetic task, each exported at opset 13
# batch 1 and opset 17 dynamic batch, quantized for both targets, exported to
# .tflite and run by TensorFlow Lite 2.2 (bit-exact with `qfold run`), ArmNN
# and ONNX Runtime (top-1 agreement >= 98 %). The PyTorch side (training,
# export) goes through tests/ref/refcache.py: computed once per `make test`.
# First pass only: 32 quantize / export / run rounds of 200 inputs each take
# minutes under the sanitizers, and every kernel they run is covered there by
# the per-op and per-model tests (armnn.cmake, reduce / resize / hard_act).
if(QF_PYTHON3 AND QF_FLATC AND QF_NODE AND NOT QF_SANITIZE)
  foreach(case resnet8 dscnn mbv1 fcae mbv3 conv1d grouped unet)
    add_test(NAME tflite_sweep_${case}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/tiny_sweep.py --qfold $<TARGET_FILE:qfold>
              --root ${PROJECT_SOURCE_DIR} --work ${QF_TEST_WORK}/tiny_sweep --schema-py ${QF_TFLITE_TEST_PY} ${case})
    set_tests_properties(tflite_sweep_${case} PROPERTIES FIXTURES_REQUIRED tflite_py LABELS "tflite;sweep"
                         TIMEOUT 900 SKIP_RETURN_CODE 77)
  endforeach()
endif()
