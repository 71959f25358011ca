# qfold's GEMM (src/ops/math/gemm.h) against a plain loop in double: every
# micro-kernel this CPU runs, the threaded split, and qf_sgemm through the
# active engine.
add_executable(test_gemm ${CMAKE_CURRENT_LIST_DIR}/test_gemm.c)
target_include_directories(test_gemm PRIVATE ${QF_TEST_DIR} ${PROJECT_SOURCE_DIR}/src)
target_compile_options(test_gemm PRIVATE ${QF_WARNINGS})
target_link_libraries(test_gemm PRIVATE qfold_static m)
add_test(NAME unit_gemm COMMAND test_gemm)
set_tests_properties(unit_gemm PROPERTIES LABELS "unit" TIMEOUT 120)
