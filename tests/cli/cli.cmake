# The qfold command line: one ctest per case of tests/cli/cli_test.py (exit codes,
# messages, inspect text / JSON / DOT, the JSON of names that are not UTF-8,
# run against PyTorch's output on the bundled example). They run the qfold
# binary of this build, so under `make test-asan` they run it with
# AddressSanitizer + UBSan.
set(QF_CLI_CASES version engine_threads help usage inspect inspect_plan inspect_json inspect_dot inspect_escape report_utf8 run run_multi run_int64 run_fixed_batch run_errors
    eval eval_compare eval_fixed_batch eval_errors)
foreach(case ${QF_CLI_CASES})
  add_test(NAME cli_${case}
    COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/cli_test.py
            --qfold $<TARGET_FILE:qfold> --examples ${PROJECT_SOURCE_DIR}/examples
            --work ${QF_TEST_WORK}/cli --version ${PROJECT_VERSION} ${case})
  set_tests_properties(cli_${case} PROPERTIES LABELS "cli" TIMEOUT 120)
endforeach()

# Faults a careful user's scripts hit (tests/cli/fault_test.py): aliased
# outputs, bad output paths, FIFOs and devices as inputs, a full disk, signals
# and kill -9 during a write, a memory cap on qfold's own allocations.
set(QF_FAULT_CASES aliases output_paths bad_inputs full_disk all_or_nothing signals kill9 memory_cap describes)
foreach(case ${QF_FAULT_CASES})
  add_test(NAME cli_fault_${case}
    COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/fault_test.py
            --qfold $<TARGET_FILE:qfold> --examples ${PROJECT_SOURCE_DIR}/examples
            --work ${QF_TEST_WORK}/cli_fault --source ${PROJECT_SOURCE_DIR} ${case})
  set_tests_properties(cli_fault_${case} PROPERTIES LABELS "cli" TIMEOUT 300)
endforeach()

# qfold under `ulimit -v` at levels from 20 to 600 MB (tests/cli/memlimit_test.py):
# exit 0, or 1 with "out of memory", within seconds; never a hang or a death
# inside a library. Skipped in the sanitizer build (ASan needs its shadow).
if(QF_SANITIZE)
  set(QF_MEMLIMIT_ENV "QF_SANITIZED=1")
else()
  set(QF_MEMLIMIT_ENV "QF_SANITIZED=0")
endif()
foreach(case version run fuse)
  add_test(NAME cli_memlimit_${case}
    COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/memlimit_test.py
            --qfold $<TARGET_FILE:qfold> --models ${QF_TEST_WORK}/models
            --work ${QF_TEST_WORK}/cli_memlimit ${case})
  set_tests_properties(cli_memlimit_${case} PROPERTIES LABELS "cli" TIMEOUT 600 FIXTURES_REQUIRED ref_models
    SKIP_RETURN_CODE 77 ENVIRONMENT "${QF_MEMLIMIT_ENV}")
endforeach()
