# C unit tests of the graph IR.
qf_add_c_test(NAME unit_ir SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_ir.c LABELS unit TIMEOUT 60)

# Graphs at scale (tests/ir/scale_test.py): 10^6 edges into one node, a
# 10^5-node chain in order and reversed (2 * 10^4 under the sanitizers); import, verify and the passes must
# finish in seconds (bound: 60 s per command, which the quadratic code missed;
# 150 s under the sanitizers).
foreach(case concat_wide relu_chain relu_reversed)
  add_test(NAME ir_scale_${case}
    COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/scale_test.py $<TARGET_FILE:qfold> ${QF_TEST_WORK}/ir_scale ${case})
  set_tests_properties(ir_scale_${case} PROPERTIES LABELS "ir;scale" TIMEOUT 600
    ENVIRONMENT "QF_SANITIZED=$<BOOL:${QF_SANITIZE}>")
endforeach()
