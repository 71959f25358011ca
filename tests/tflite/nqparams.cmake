# The neutron target's qparams as the NXP Neutron quantizer sets them (issue
# 30 item 4, tests/quant/neutron_qparams_test.py): quant_neutron_qparams the
# QDQ file's fixed / shared / symmetric qparams and ONNX Runtime's run of it,
# tflite_neutron_qparams the model without its MatMul on TFLite 2.2, bit-exact.
# Here, not in tests/quant: the schema reader of armnn.cmake (fixture tflite_py).
if(QF_PYTHON3 AND QF_FLATC AND QF_NODE)
  foreach(case qparams tflite)
    set(name quant_neutron_qparams)
    if(case STREQUAL "tflite")
      set(name tflite_neutron_qparams)
    endif()
    add_test(NAME ${name}
      COMMAND ${QF_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/quant/neutron_qparams_test.py --qfold $<TARGET_FILE:qfold>
              --root ${PROJECT_SOURCE_DIR} --work ${QF_TEST_WORK}/neutron_qparams --schema-py ${QF_TFLITE_TEST_PY}
              ${case})
    set_tests_properties(${name} PROPERTIES LABELS "quant;tflite" TIMEOUT 600)
  endforeach()
  set_tests_properties(tflite_neutron_qparams PROPERTIES FIXTURES_REQUIRED tflite_py)
endif()
