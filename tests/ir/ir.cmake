# C unit tests of the graph IR.
add_executable(test_ir ${CMAKE_CURRENT_LIST_DIR}/test_ir.c)
target_include_directories(test_ir PRIVATE ${QF_TEST_DIR})
target_compile_options(test_ir PRIVATE ${QF_WARNINGS})
target_link_libraries(test_ir PRIVATE qfold_static)
add_test(NAME unit_ir COMMAND test_ir)
set_tests_properties(unit_ir PROPERTIES LABELS "unit" TIMEOUT 60)
