# qfold quantize of a model exported with a fixed batch size (PyTorch's
# default): calibrated in batches where every op computes each sample on its
# own, to what the dynamic-batch export gives; one sample at a time, with the
# reason, where a Reshape pins the batch (src/exec/batch_widen.c).
if(QF_PYTHON3)
  foreach(case dynamic view pinned)
    add_test(NAME quant_fixed_batch_${case}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/fixed_batch_test.py --qfold $<TARGET_FILE:qfold>
              --root ${PROJECT_SOURCE_DIR} --work ${QF_TEST_WORK}/fixed_batch ${case})
    set_tests_properties(quant_fixed_batch_${case} PROPERTIES LABELS "quant;ref" TIMEOUT 300 SKIP_RETURN_CODE 77)
  endforeach()
endif()
