# qfold export on ArmNN's TfLite parser (tests/tflite/): the structure of every
# exported model read with flatc --python code of the vendored schema
# (generated here, at test time: independent of the C writer), every op of
# the test models within 1 LSB of qfold's integer reference on ArmNN 20.08's
# CpuRef backend, whole models and Fashion-MNIST's top-1 against ONNX Runtime.
find_program(QF_FLATC flatc)
if(QF_PYTHON3 AND QF_FLATC)
  set(QF_TFLITE_TEST_PY "${QF_TEST_WORK}/tflite_py_obj")  # with the object API (tfl_split.py)
  add_test(NAME tflite_schema_py
    COMMAND ${QF_FLATC} --python --gen-object-api -o ${QF_TFLITE_TEST_PY} ${PROJECT_SOURCE_DIR}/third_party/tflite/schema.fbs)
  set_tests_properties(tflite_schema_py PROPERTIES FIXTURES_SETUP tflite_py LABELS "tflite" TIMEOUT 60)
  set(QF_TFLITE_CASES checker armnn_limits data_errors conv_bn depthwise conv_transpose residual concat
      activations activations_sweep generic_linear conv1d conv1d_out group_conv group_convt)
  if(QF_NODE)
    list(APPEND QF_TFLITE_CASES quantize_static)
    # fashion (top-1 agreement on 500 real images) is not in the sanitizer
    # build: an accuracy check, rounding-dependent; its quantize and
    # `export --float-io` paths run there in quantize_static.
    if(NOT QF_SANITIZE)
      list(APPEND QF_TFLITE_CASES fashion)
    endif()
  endif()
  foreach(case ${QF_TFLITE_CASES})
    add_test(NAME tflite_armnn_${case}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/armnn_test.py --qfold $<TARGET_FILE:qfold>
              --root ${PROJECT_SOURCE_DIR} --work ${QF_TEST_WORK}/tflite --schema-py ${QF_TFLITE_TEST_PY} ${case})
    set_tests_properties(tflite_armnn_${case} PROPERTIES FIXTURES_REQUIRED tflite_py LABELS "tflite" TIMEOUT 300)
  endforeach()
endif()

# int8 HardSigmoid / HardSwish (hard_act_test.py, on armnn_test.py's
# helpers): every int8 input on TFLite 2.2 (bit-exact) and ArmNN; torchvision's
# mobilenet_v3_small at opsets 13 and 14 on both targets, TFLite 2.2 bit-exact
# with `QFOLD_ENGINE=ref qfold run`, ONNX Runtime on the QDQ model.
if(QF_PYTHON3 AND QF_FLATC)
  set(QF_TFLITE_HARD_CASES sweep)
  if(QF_NODE)
    list(APPEND QF_TFLITE_HARD_CASES mobilenet_v3_13 mobilenet_v3_14)
  endif()
  foreach(case ${QF_TFLITE_HARD_CASES})
    add_test(NAME tflite_hard_${case}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/hard_act_test.py --qfold $<TARGET_FILE:qfold>
              --root ${PROJECT_SOURCE_DIR} --work ${QF_TEST_WORK}/tflite_hard --schema-py ${QF_TFLITE_TEST_PY} ${case})
    set_tests_properties(tflite_hard_${case} PROPERTIES FIXTURES_REQUIRED tflite_py LABELS "tflite" TIMEOUT 600)
  endforeach()
endif()
