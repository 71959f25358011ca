# The deployment target check (src/target/): the engine of `qfold check` on
# graphs built in C with the test's own rule rows (test_target_check.c), and
# the CLI on PyTorch-made and bundled models (check_test.py).
qf_add_c_test(NAME target_check_unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_target_check.c INTERNAL
              LABELS target TIMEOUT 60)

if(QF_PYTHON3)
  foreach(case float_vs_quantized every_node_once strict dot truncated bad_set outputs grouped linear3d ort_uint8)
    add_test(NAME target_check_cli_${case}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/check_test.py --qfold $<TARGET_FILE:qfold>
              --root ${PROJECT_SOURCE_DIR} --work ${QF_TEST_WORK}/target_check ${case})
    set_tests_properties(target_check_cli_${case} PROPERTIES LABELS "target" TIMEOUT 300 SKIP_RETURN_CODE 77)
  endforeach()
endif()
