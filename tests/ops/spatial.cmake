# Spatial ops (conv, conv_transpose, batch_norm, pools, reduce_mean):
# shape inference + bad inputs, then kernels against PyTorch references.
qf_add_c_test(NAME spatial_infer SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_spatial.c INTERNAL LIBS qf_test_tools
  LABELS spatial)

if(QF_PYTHON3)
  set(QF_SPATIAL_REF "${QF_TEST_WORK}/spatial_ref")
  add_test(NAME spatial_ref_gen COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/spatial_ref.py ${QF_SPATIAL_REF})
  set_tests_properties(spatial_ref_gen PROPERTIES FIXTURES_SETUP spatial_ref LABELS "spatial")
  qf_add_c_test(NAME spatial_torch PROGRAM test_spatial ARGS ${QF_SPATIAL_REF}
    FIXTURES_REQUIRED spatial_ref LABELS spatial)
endif()
