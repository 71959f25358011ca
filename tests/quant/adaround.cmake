# AdaRound (src/quant/adaround.c, quantize --set weight-rounding=adaround):
# each layer's reconstruction error below nearest rounding's (qfold's report
# and ONNX Runtime on the written files), weights at most one step from
# nearest, byte-identical models for a seed, bad values exit 2.
if(QF_PYTHON3 AND QF_NODE)
  foreach(case layers errors)
    add_test(NAME quant_adaround_${case}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/adaround_test.py --qfold $<TARGET_FILE:qfold>
              --root ${PROJECT_SOURCE_DIR} --work ${QF_TEST_WORK}/adaround ${case})
    set_tests_properties(quant_adaround_${case} PROPERTIES LABELS "quant;ref" TIMEOUT 600 SKIP_RETURN_CODE 77)
  endforeach()
endif()
