# C unit tests of the graph IR.
qf_add_c_test(NAME unit_ir SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_ir.c LABELS unit TIMEOUT 60)
