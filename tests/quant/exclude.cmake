# qfold quantize --exclude (and qat --exclude), the export's refusal of an
# excluded node, and the per-layer debugger's local SQNR against PyTorch
# (tests/quant/exclude_test.py).
if(QF_PYTHON3 AND QF_NODE)
  foreach(case quantize errors qat local local_equalized)
    add_test(NAME quant_exclude_${case}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/exclude_test.py --qfold $<TARGET_FILE:qfold>
              --root ${PROJECT_SOURCE_DIR} --work ${QF_TEST_WORK}/exclude ${case})
    set_tests_properties(quant_exclude_${case} PROPERTIES LABELS "quant" TIMEOUT 300 SKIP_RETURN_CODE 77)
  endforeach()
endif()
