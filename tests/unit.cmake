# C unit tests: the graph IR and allocation-failure injection.
add_executable(test_ir ${CMAKE_CURRENT_SOURCE_DIR}/test_ir.c)
target_include_directories(test_ir PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_compile_options(test_ir PRIVATE ${QF_WARNINGS})
target_link_libraries(test_ir PRIVATE qfold_static)
add_test(NAME unit_ir COMMAND test_ir)
set_tests_properties(unit_ir PROPERTIES LABELS "unit" TIMEOUT 60)

# Uses the small torch model of the ref_models fixture (tests/ref.cmake).
add_executable(test_alloc_fail ${CMAKE_CURRENT_SOURCE_DIR}/test_alloc_fail.c)
target_include_directories(test_alloc_fail PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_compile_options(test_alloc_fail PRIVATE ${QF_WARNINGS})
target_link_libraries(test_alloc_fail PRIVATE qfold_static)
file(MAKE_DIRECTORY "${QF_TEST_WORK}/alloc_fail")
add_test(NAME unit_alloc_fail
  COMMAND test_alloc_fail ${QF_TEST_WORK}/models/tiny_cnn.onnx ${QF_TEST_WORK}/models/tiny_cnn.in0.npy
          ${QF_TEST_WORK}/alloc_fail)
set_tests_properties(unit_alloc_fail PROPERTIES FIXTURES_REQUIRED ref_models LABELS "unit" TIMEOUT 300)

# Size arithmetic on hostile numbers (checked multiply, shape limits).
add_executable(test_limits ${CMAKE_CURRENT_SOURCE_DIR}/test_limits.c)
target_compile_options(test_limits PRIVATE ${QF_WARNINGS})
target_include_directories(test_limits PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(test_limits PRIVATE qfold_static)
add_test(NAME unit_limits COMMAND test_limits)
set_tests_properties(unit_limits PROPERTIES LABELS "unit" TIMEOUT 60)

# The op table and schema: every op has its rows and required columns.
add_executable(test_op_table ${CMAKE_CURRENT_SOURCE_DIR}/test_op_table.c)
target_compile_options(test_op_table PRIVATE ${QF_WARNINGS})
target_include_directories(test_op_table PRIVATE ${CMAKE_CURRENT_SOURCE_DIR} ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(test_op_table PRIVATE qfold_static)
add_test(NAME unit_op_table COMMAND test_op_table)
set_tests_properties(unit_op_table PROPERTIES LABELS "unit" TIMEOUT 60)
