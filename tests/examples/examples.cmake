# The C example programs (examples/c/) against the CLI: the same steps give
# the same files, byte for byte, and the same figures.
if(TARGET qfold_pipeline)
  add_test(NAME example_c_pipeline
    COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/pipeline_test.py
            --example $<TARGET_FILE:qfold_pipeline> --qfold $<TARGET_FILE:qfold>
            --examples ${PROJECT_SOURCE_DIR}/examples --work ${QF_TEST_WORK}/example_c_pipeline)
  set_tests_properties(example_c_pipeline PROPERTIES LABELS "examples" TIMEOUT 300)
endif()

# The library sets no environment variable (the CLI does, before oneDNN loads).
add_test(NAME library_no_setenv
  COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/no_setenv_test.py $<TARGET_FILE:qfold_static>)
set_tests_properties(library_no_setenv PROPERTIES LABELS "examples" SKIP_RETURN_CODE 77 TIMEOUT 60)
