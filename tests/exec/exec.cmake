# Executor (plan, arena, folding) and the layout / constant op kernels,
# checked against numpy fixtures generated at test time.
add_executable(test_exec ${CMAKE_CURRENT_LIST_DIR}/test_exec.c)
target_compile_options(test_exec PRIVATE ${QF_WARNINGS})
target_include_directories(test_exec PRIVATE ${CMAKE_SOURCE_DIR}/src ${QF_TEST_DIR})
target_link_libraries(test_exec PRIVATE qfold_static)

set(QF_EXEC_WORK "${QF_TEST_WORK}/exec")
add_test(NAME exec_fixtures COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/exec_fixtures.py ${QF_EXEC_WORK})
set_tests_properties(exec_fixtures PROPERTIES FIXTURES_SETUP exec_data LABELS "exec" TIMEOUT 60)
add_test(NAME exec COMMAND test_exec ${QF_EXEC_WORK})
set_tests_properties(exec PROPERTIES FIXTURES_REQUIRED exec_data LABELS "exec" TIMEOUT 120)

# qf_compare_graphs (src/exec/compare.c): reference vs candidate graph.
add_executable(test_compare ${CMAKE_CURRENT_SOURCE_DIR}/exec/test_compare.c)
target_compile_options(test_compare PRIVATE ${QF_WARNINGS})
target_link_libraries(test_compare PRIVATE qfold_static m)
add_test(NAME exec_compare COMMAND test_compare)
set_tests_properties(exec_compare PROPERTIES LABELS "exec" TIMEOUT 60)

# The backward tape (src/exec/grad.c): whole-graph gradients vs central
# differences, fan-out, frozen subsets, errors, out of memory at every
# allocation, and oneDNN's training convolutions vs the reference kernels.
add_executable(test_grad ${CMAKE_CURRENT_LIST_DIR}/test_grad.c)
target_compile_options(test_grad PRIVATE ${QF_WARNINGS})
target_include_directories(test_grad PRIVATE ${QF_TEST_DIR})
target_link_libraries(test_grad PRIVATE qf_test_tools)
add_test(NAME exec_grad COMMAND test_grad)
set_tests_properties(exec_grad PROPERTIES LABELS "exec;train" TIMEOUT 120)
