# qfold's GEMM (src/ops/math/gemm.h) against a plain loop in double: every
# micro-kernel this CPU runs, the threaded split, and qf_sgemm through the
# active engine.
qf_add_c_test(NAME unit_gemm SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gemm.c INTERNAL LABELS unit TIMEOUT 120)
