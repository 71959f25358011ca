# QLinearConv on oneDNN (src/backend/dnnl/dnnl_qlinear.c) against the reference
# integer kernel on odd shapes: within 1 LSB, >= 99.9 % equal. Skipped (77)
# when oneDNN cannot be loaded; not built without oneDNN.
if(QF_HAVE_DNNL)
  qf_add_c_test(NAME dnnl_qlinear SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_dnnl_qlinear.c INTERNAL
    LIBS qf_test_tools LABELS int8 dnnl TIMEOUT 120 SKIP77)
endif()
