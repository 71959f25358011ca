# The integer executor's ConvTranspose, MatMul, Mul, AveragePool,
# GlobalAveragePool, ReduceMean and Concat groups: lowered (or not), against a
# direct integer reference and the float simulation (test_lower_ops.c); run
# on both engines (the reference kernels under QFOLD_ENGINE=ref).
add_executable(test_lower_ops ${CMAKE_CURRENT_LIST_DIR}/test_lower_ops.c)
target_include_directories(test_lower_ops PRIVATE ${QF_TEST_DIR} ${CMAKE_SOURCE_DIR}/src)
target_compile_options(test_lower_ops PRIVATE ${QF_WARNINGS})
target_link_libraries(test_lower_ops PRIVATE qfold_static m)
add_test(NAME quant_lower_ops COMMAND test_lower_ops)
set_tests_properties(quant_lower_ops PROPERTIES LABELS "quant" TIMEOUT 60)
add_test(NAME quant_lower_ops_ref COMMAND test_lower_ops)
set_tests_properties(quant_lower_ops_ref PROPERTIES LABELS "quant" TIMEOUT 60 ENVIRONMENT "QFOLD_ENGINE=ref")
