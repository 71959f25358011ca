# Every model a command writes goes out the same way (tests/io/model_outputs_test.py):
# qat --keep-qat's second model with --external-data and the automatic side
# file, all or nothing; the automatic side file of fuse / quantize / train /
# finalize named after the final output; the trained weight range a keep-qat
# file records for finalize; fuse --verify sized from declared shapes.
if(QF_PYTHON3 AND QF_NODE)
  foreach(case keep_qat_external keep_qat_auto keep_qat_all_or_nothing auto_each_command fuse_dropped_side
          finalize_range verify_declared)
    add_test(NAME io_outputs_${case}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/model_outputs_test.py --qfold $<TARGET_FILE:qfold>
              --node ${QF_NODE} --ort-run ${QF_TEST_DIR}/ref/ort_run.js --work ${QF_TEST_WORK}/model_outputs ${case})
    set_tests_properties(io_outputs_${case} PROPERTIES LABELS "io;cli" TIMEOUT 180)
  endforeach()
endif()
