# The test tools themselves: the check harness (qf_check.h), the one-node
# runner (qf_node_run.{h,c}) that the kernel tests link.
add_executable(test_check ${CMAKE_CURRENT_LIST_DIR}/test_check.c)
target_include_directories(test_check PRIVATE ${QF_TEST_DIR})
target_compile_options(test_check PRIVATE ${QF_WARNINGS})
target_link_libraries(test_check PRIVATE qfold_static)
add_test(NAME unit_check COMMAND test_check)
set_tests_properties(unit_check PROPERTIES LABELS "unit" TIMEOUT 60)

# The one-node runner (qf_node_run.{h,c}): C tests of kernels link it.
add_library(qf_test_tools STATIC ${CMAKE_CURRENT_LIST_DIR}/qf_node_run.c)
target_include_directories(qf_test_tools PUBLIC ${QF_TEST_DIR} PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_compile_options(qf_test_tools PRIVATE ${QF_WARNINGS})
target_link_libraries(qf_test_tools PUBLIC qfold_static)
