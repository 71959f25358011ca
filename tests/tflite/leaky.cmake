# int8 LeakyRelu (tests/tflite/leaky_test.py, on armnn_test.py's helpers): every
# int8 input at 4 alphas x 3 qparams on TFLite 2.2 (bit-exact), ArmNN and ONNX
# Runtime; a CNN quantized for both targets, exported (LEAKY_RELU) and run on
# both runtimes; `qfold check --target neutron` placing LeakyRelu on the NPU.
if(QF_PYTHON3 AND QF_FLATC AND QF_NODE)
  foreach(case sweep model check)
    add_test(NAME tflite_leaky_${case}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/leaky_test.py --qfold $<TARGET_FILE:qfold>
              --root ${PROJECT_SOURCE_DIR} --work ${QF_TEST_WORK}/tflite_leaky --schema-py ${QF_TFLITE_TEST_PY} ${case})
    set_tests_properties(tflite_leaky_${case} PROPERTIES FIXTURES_REQUIRED tflite_py LABELS "tflite" TIMEOUT 600)
  endforeach()
endif()
