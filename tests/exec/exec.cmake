# Executor (plan, arena, folding) and the layout / constant op kernels,
# checked against numpy fixtures generated at test time.
set(QF_EXEC_WORK "${QF_TEST_WORK}/exec")
add_test(NAME exec_fixtures COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/exec_fixtures.py ${QF_EXEC_WORK})
set_tests_properties(exec_fixtures PROPERTIES FIXTURES_SETUP exec_data LABELS "exec" TIMEOUT 60)
qf_add_c_test(NAME exec SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_exec.c INTERNAL ARGS ${QF_EXEC_WORK}
  FIXTURES_REQUIRED exec_data LABELS exec TIMEOUT 120)

# qf_compare_graphs (src/exec/compare.c): reference vs candidate graph.
qf_add_c_test(NAME exec_compare SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_compare.c LABELS exec TIMEOUT 60)

# The backward tape (src/exec/grad.c): whole-graph gradients vs central
# differences, fan-out, frozen subsets, errors, out of memory at every
# allocation, and oneDNN's training convolutions vs the reference kernels.
qf_add_c_test(NAME exec_grad SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_grad.c LIBS qf_test_tools
  LABELS exec train TIMEOUT 120)
