# Exp, Log, ReduceSum, ReduceMax (issue 29 item 6): qfold's int8 run against
# TensorFlow Lite 2.2 on the export (bit for bit), ArmNN 20.08 where its
# parser has the operator (EXP; LOG, SUM, REDUCE_MAX refused, pinned), ONNX
# Runtime on the quantized QDQ models (reduce_test.py says what each case does).
if(QF_PYTHON3)
  set(QF_REDUCE_CASES sweep reduce armnn_limits refusals)
  if(QF_NODE)
    list(APPEND QF_REDUCE_CASES quantize)
  endif()
  foreach(case ${QF_REDUCE_CASES})
    add_test(NAME tflite_reduce_${case}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/reduce_test.py --qfold $<TARGET_FILE:qfold>
              --root ${PROJECT_SOURCE_DIR} --work ${QF_TEST_WORK}/tflite_reduce ${case})
    set_tests_properties(tflite_reduce_${case} PROPERTIES LABELS "tflite" TIMEOUT 300 SKIP_RETURN_CODE 77
                         ENVIRONMENT "QF_NODE=${QF_NODE}")
  endforeach()
endif()
