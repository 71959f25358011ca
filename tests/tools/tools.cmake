# The test tools themselves: the check harness (qf_check.h).
add_executable(test_check ${CMAKE_CURRENT_LIST_DIR}/test_check.c)
target_include_directories(test_check PRIVATE ${QF_TEST_DIR})
target_compile_options(test_check PRIVATE ${QF_WARNINGS})
target_link_libraries(test_check PRIVATE qfold_static)
add_test(NAME unit_check COMMAND test_check)
set_tests_properties(unit_check PROPERTIES LABELS "unit" TIMEOUT 60)
