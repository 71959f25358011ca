# The test tools and their own tests: the check harness (qf_check.h), the
# one-node runner (qf_node_run.{h,c}) and the gradient check
# (qf_gradcheck.{h,c}), the last two in the library qf_test_tools.
add_executable(test_check ${CMAKE_CURRENT_LIST_DIR}/test_check.c)
target_include_directories(test_check PRIVATE ${QF_TEST_DIR})
target_compile_options(test_check PRIVATE ${QF_WARNINGS})
target_link_libraries(test_check PRIVATE qfold_static)
add_test(NAME unit_check COMMAND test_check)
set_tests_properties(unit_check PROPERTIES LABELS "unit" TIMEOUT 60)

# C tests of kernels link qf_test_tools.
add_library(qf_test_tools STATIC ${CMAKE_CURRENT_LIST_DIR}/qf_node_run.c ${CMAKE_CURRENT_LIST_DIR}/qf_gradcheck.c)
target_include_directories(qf_test_tools PUBLIC ${QF_TEST_DIR} PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_compile_options(qf_test_tools PRIVATE ${QF_WARNINGS})
target_link_libraries(qf_test_tools PUBLIC qfold_static m)

# The gradient check on functions with known gradients, right and wrong.
add_executable(test_gradcheck ${CMAKE_CURRENT_LIST_DIR}/test_gradcheck.c)
target_compile_options(test_gradcheck PRIVATE ${QF_WARNINGS})
target_link_libraries(test_gradcheck PRIVATE qf_test_tools)
add_test(NAME unit_gradcheck COMMAND test_gradcheck)
set_tests_properties(unit_gradcheck PROPERTIES LABELS "unit" TIMEOUT 60)

# One node forward and backward from files (tests/tools/grad_util.py drives
# it in the tests that compare backward kernels with PyTorch's autograd).
add_executable(qf_node_grad ${CMAKE_CURRENT_LIST_DIR}/qf_node_grad.c)
target_compile_options(qf_node_grad PRIVATE ${QF_WARNINGS})
target_link_libraries(qf_node_grad PRIVATE qfold_static)
