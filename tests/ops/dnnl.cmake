# The oneDNN float forward kernels against the reference C kernels; where
# oneDNN is not available it says why and exits 77 (skipped). One program:
# its case harness (dnnl_case.h) and its Conv / post-op cases
# (dnnl_conv_cases.h) are header-only, included by test_dnnl_kernels.c.
add_executable(test_dnnl_kernels ${CMAKE_CURRENT_LIST_DIR}/test_dnnl_kernels.c)
target_include_directories(test_dnnl_kernels PRIVATE ${CMAKE_SOURCE_DIR}/src ${QF_TEST_DIR})
target_compile_options(test_dnnl_kernels PRIVATE ${QF_WARNINGS})
target_link_libraries(test_dnnl_kernels PRIVATE qf_test_tools qfold_static m)
add_test(NAME dnnl_kernels COMMAND test_dnnl_kernels)
set_tests_properties(dnnl_kernels PROPERTIES LABELS "dnnl" TIMEOUT 300 SKIP_RETURN_CODE 77)
# Which nodes run on one thread follows libgomp's wait (qf_dnnl_lib.short_wait):
# the bound checked with the idle threads sleeping at once and spinning.
add_test(NAME dnnl_serial_bound_passive COMMAND test_dnnl_kernels serial-bound)
set_tests_properties(dnnl_serial_bound_passive PROPERTIES LABELS "dnnl" TIMEOUT 60 SKIP_RETURN_CODE 77
                     ENVIRONMENT "OMP_WAIT_POLICY=passive")
add_test(NAME dnnl_serial_bound_spin COMMAND test_dnnl_kernels serial-bound)
set_tests_properties(dnnl_serial_bound_spin PROPERTIES LABELS "dnnl" TIMEOUT 60 SKIP_RETURN_CODE 77
                     ENVIRONMENT "GOMP_SPINCOUNT=30000")
