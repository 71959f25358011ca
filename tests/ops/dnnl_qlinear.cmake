# QLinearConv on oneDNN (src/backend/dnnl/dnnl_qlinear.c) against the reference
# integer kernel on odd shapes: within 1 LSB, >= 99.9 % equal. Skipped (77)
# when oneDNN cannot be loaded; not built without oneDNN.
if(QF_HAVE_DNNL)
  add_executable(test_dnnl_qlinear ${CMAKE_CURRENT_LIST_DIR}/test_dnnl_qlinear.c)
  target_include_directories(test_dnnl_qlinear PRIVATE ${CMAKE_SOURCE_DIR}/src ${QF_TEST_DIR})
  target_compile_options(test_dnnl_qlinear PRIVATE ${QF_WARNINGS})
  target_link_libraries(test_dnnl_qlinear PRIVATE qf_test_tools qfold_static m)
  add_test(NAME dnnl_qlinear COMMAND test_dnnl_qlinear)
  set_tests_properties(dnnl_qlinear PROPERTIES LABELS "int8;dnnl" TIMEOUT 120 SKIP_RETURN_CODE 77)
endif()
