# TFLite export (src/tflite/): layout permutations, op mapping, refusals and
# the report on QDQ graphs built in C (test_tflite.c); the CLI on the
# quantizer's test CNNs with a structural smoke check through a reader that
# flatc --python generates here from the vendored schema (export_test.py).
qf_add_c_test(NAME tflite_unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tflite.c INTERNAL LABELS tflite TIMEOUT 60)

# The Python reader of the schema, generated at build time (never committed).
set(QF_TFLITE_PY "${CMAKE_BINARY_DIR}/gen/tflite_py")
add_custom_command(
  OUTPUT "${QF_TFLITE_PY}/tflite/Model.py"
  COMMAND ${QF_FLATC} --python -o ${QF_TFLITE_PY} ${QF_TFLITE_SCHEMA}
  DEPENDS "${QF_TFLITE_SCHEMA}"
  COMMENT "flatc --python schema.fbs (TFLite reader for the tests)")
add_custom_target(qfold_tflite_py ALL DEPENDS "${QF_TFLITE_PY}/tflite/Model.py")

if(QF_PYTHON3)
  foreach(case cnn refusals tflite_out generic_linear requant maxpool_pads)
    add_test(NAME tflite_export_${case}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/export_test.py --qfold $<TARGET_FILE:qfold>
              --root ${PROJECT_SOURCE_DIR} --work ${QF_TEST_WORK}/tflite_export --reader ${QF_TFLITE_PY} ${case})
    set_tests_properties(tflite_export_${case} PROPERTIES LABELS "tflite" TIMEOUT 300 SKIP_RETURN_CODE 77)
  endforeach()
endif()
