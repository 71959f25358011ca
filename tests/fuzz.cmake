# The fuzz targets (fuzz/): built with clang in a build directory of their own
# and run for a few seconds each on a corpus of the test models, so that their
# build and the bad-input contract cannot rot between fuzz campaigns. Only in
# the first pass of `make test`: the fuzz build carries its own sanitizers.
# Skipped (77) without clang / libFuzzer. The first run builds the library
# once more with clang (minutes on 2 cores); later runs rebuild what changed.
if(NOT QF_SANITIZE AND NOT QF_FUZZ)
  set(QF_FUZZ_SECONDS 10 CACHE STRING "Seconds each fuzz target runs in the fuzz_smoke test")
  add_test(NAME fuzz_smoke
    COMMAND sh ${PROJECT_SOURCE_DIR}/fuzz/run.sh ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/fuzz-build
            ${QF_FUZZ_SECONDS} ${PROJECT_SOURCE_DIR}/fuzz/seeds ${PROJECT_SOURCE_DIR}/examples
            ${PROJECT_SOURCE_DIR}/tests ${QF_TEST_WORK})
  # COST: the longest test of the pass (~3 min, mostly its clang build of the
  # library on both cores) starts first on a clean clone too, as later runs
  # start it from its measured time (tests/CMakeLists.txt's COST list).
  set_tests_properties(fuzz_smoke PROPERTIES LABELS "fuzz" TIMEOUT 1800 SKIP_RETURN_CODE 77
    FIXTURES_REQUIRED ref_models COST 1000)
endif()
