# The oneDNN float forward kernels against the reference C kernels; where
# oneDNN is not available it says why and exits 77 (skipped). One program:
# its case harness (dnnl_case.h) and its Conv / post-op cases
# (dnnl_conv_cases.h) are header-only, included by test_dnnl_kernels.c.
qf_add_c_test(NAME dnnl_kernels SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_dnnl_kernels.c INTERNAL LIBS qf_test_tools
  LABELS dnnl TIMEOUT 300 SKIP77)
# Which nodes run on one thread follows libgomp's wait (qf_dnnl_lib.short_wait):
# the bound checked with the idle threads sleeping at once and spinning.
qf_add_c_test(NAME dnnl_serial_bound_passive PROGRAM test_dnnl_kernels ARGS serial-bound
  LABELS dnnl TIMEOUT 60 SKIP77 ENVIRONMENT OMP_WAIT_POLICY=passive)
qf_add_c_test(NAME dnnl_serial_bound_spin PROGRAM test_dnnl_kernels ARGS serial-bound
  LABELS dnnl TIMEOUT 60 SKIP77 ENVIRONMENT GOMP_SPINCOUNT=30000)
