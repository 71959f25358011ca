# Spatial ops (conv, conv_transpose, batch_norm, pools, reduce_mean):
# shape inference + bad inputs, then kernels against PyTorch references.
add_executable(test_spatial ${CMAKE_CURRENT_LIST_DIR}/test_spatial.c)
target_include_directories(test_spatial PRIVATE ${CMAKE_SOURCE_DIR}/src ${QF_TEST_DIR})
target_compile_options(test_spatial PRIVATE ${QF_WARNINGS})
target_link_libraries(test_spatial PRIVATE qf_test_tools qfold_static)

add_test(NAME spatial_infer COMMAND test_spatial)
set_tests_properties(spatial_infer PROPERTIES LABELS "spatial")

if(QF_PYTHON3)
  set(QF_SPATIAL_REF "${QF_TEST_WORK}/spatial_ref")
  add_test(NAME spatial_ref_gen COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/spatial_ref.py ${QF_SPATIAL_REF})
  set_tests_properties(spatial_ref_gen PROPERTIES FIXTURES_SETUP spatial_ref LABELS "spatial")
  add_test(NAME spatial_torch COMMAND test_spatial ${QF_SPATIAL_REF})
  set_tests_properties(spatial_torch PROPERTIES FIXTURES_REQUIRED spatial_ref LABELS "spatial")
endif()
