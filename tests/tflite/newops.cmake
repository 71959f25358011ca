# PRelu, Max, Min, Abs (issue 29), Split (issue 30) through quantize -> run -> ONNX Runtime ->
# export -> TFLite 2.2 and ArmNN (tests/tflite/newops_test.py).
if(QF_PYTHON3 AND QF_FLATC AND QF_NODE)
  foreach(case model split sweep)
    add_test(NAME tflite_newops_${case}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/newops_test.py --qfold $<TARGET_FILE:qfold>
              --root ${PROJECT_SOURCE_DIR} --work ${QF_TEST_WORK}/tflite_newops --schema-py ${QF_TFLITE_TEST_PY} ${case})
    set_tests_properties(tflite_newops_${case} PROPERTIES FIXTURES_REQUIRED tflite_py LABELS "tflite" TIMEOUT 600)
  endforeach()
endif()
