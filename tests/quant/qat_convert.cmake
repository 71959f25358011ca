# The end of QAT: the BatchNorm fold through the weight fake_quant,
# qat_convert (fake_quants to QDQ) and qat_export (PyTorch's exported form).
add_executable(test_qat_convert ${CMAKE_CURRENT_LIST_DIR}/test_qat_convert.c)
target_include_directories(test_qat_convert PRIVATE ${QF_TEST_DIR} ${CMAKE_SOURCE_DIR}/src)
target_compile_options(test_qat_convert PRIVATE ${QF_WARNINGS})
target_link_libraries(test_qat_convert PRIVATE qfold_static m)
add_test(NAME quant_qat_convert COMMAND test_qat_convert)
set_tests_properties(quant_qat_convert PROPERTIES LABELS "quant;qat" TIMEOUT 60)
