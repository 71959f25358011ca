# qfold quantize --max-drop: the accuracy target's trials, a target reached
# at once, one reached by an exclusion, one that cannot be reached, and the
# option errors (tests/quant/accuracy_target_test.py).
if(QF_PYTHON3)
  foreach(case easy exclusion impossible errors)
    add_test(NAME quant_target_${case}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/accuracy_target_test.py --qfold $<TARGET_FILE:qfold>
              --work ${QF_TEST_WORK}/accuracy_target ${case})
    set_tests_properties(quant_target_${case} PROPERTIES LABELS "quant" TIMEOUT 300 SKIP_RETURN_CODE 77)
  endforeach()
endif()
