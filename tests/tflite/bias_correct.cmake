# Bias correction's models exported to TFLite (tests/quant/bias_correct_test.py
# case tflite): the structure read back, only int32 biases differing between
# the two forms' exports, TFLite 2.2 and ArmNN against qfold's integer
# reference. Here, not in tests/quant: the schema reader of armnn.cmake
# (fixture tflite_py).
if(QF_PYTHON3 AND QF_FLATC AND QF_NODE)
  add_test(NAME tflite_bias_correct
    COMMAND ${QF_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/quant/bias_correct_test.py --qfold $<TARGET_FILE:qfold>
            --root ${PROJECT_SOURCE_DIR} --work ${QF_TEST_WORK}/bias_correct --schema-py ${QF_TFLITE_TEST_PY} tflite)
  set_tests_properties(tflite_bias_correct PROPERTIES FIXTURES_REQUIRED tflite_py LABELS "quant;tflite" TIMEOUT 600
                       SKIP_RETURN_CODE 77)
endif()
