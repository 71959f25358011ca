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
# A target reached by a recovery (bias correction), not an exclusion: the
# skewed Fashion-MNIST CNN on a small slice, ONNX Runtime running the result.
if(QF_PYTHON3 AND QF_NODE)
  add_test(NAME quant_target_recovery
    COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/accuracy_target_test.py --qfold $<TARGET_FILE:qfold>
            --work ${QF_TEST_WORK}/accuracy_target recovery)
  set_tests_properties(quant_target_recovery PROPERTIES LABELS "quant;ref" TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()
