# Bias correction (--set bias-correction=off|empirical|analytical|auto,
# src/quant/bias_correct.c): each layer's mean output per channel moved to the
# float one (ONNX Runtime on both files); the four values, auto's choice and
# its refusal, the report, qat's refusal; the data-free form against the
# weights' real mean error (PyTorch on ONNX Runtime's layer inputs). The
# TFLite export of the corrected models: tests/tflite/bias_correct.cmake.
if(QF_PYTHON3 AND QF_NODE)
  foreach(case means cli analytical)
    add_test(NAME quant_bias_correct_${case}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/bias_correct_test.py --qfold $<TARGET_FILE:qfold>
              --root ${PROJECT_SOURCE_DIR} --work ${QF_TEST_WORK}/bias_correct ${case})
    set_tests_properties(quant_bias_correct_${case} PROPERTIES LABELS "quant;ref" TIMEOUT 300 SKIP_RETURN_CODE 77)
  endforeach()
endif()
