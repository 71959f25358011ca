# The test tools and their own tests: the check harness (qf_check.h), the
# one-node runner (qf_node_run.{h,c}) and the gradient check
# (qf_gradcheck.{h,c}), the last two in the library qf_test_tools.
qf_add_c_test(NAME unit_check SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_check.c LABELS unit TIMEOUT 60)

# C tests of kernels link qf_test_tools.
add_library(qf_test_tools STATIC ${CMAKE_CURRENT_LIST_DIR}/qf_node_run.c ${CMAKE_CURRENT_LIST_DIR}/qf_gradcheck.c)
target_include_directories(qf_test_tools PUBLIC ${QF_TEST_DIR} PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_compile_options(qf_test_tools PRIVATE ${QF_WARNINGS})
target_link_libraries(qf_test_tools PUBLIC qfold_static m)

# The gradient check on functions with known gradients, right and wrong.
qf_add_c_test(NAME unit_gradcheck SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gradcheck.c LIBS qf_test_tools
  LABELS unit TIMEOUT 60)

# One node forward and backward from files (tests/tools/grad_util.py drives
# it in the tests that compare backward kernels with PyTorch's autograd).
qf_test_program(qf_node_grad SOURCES ${CMAKE_CURRENT_LIST_DIR}/qf_node_grad.c)
