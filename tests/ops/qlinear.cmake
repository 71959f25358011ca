# The integer ops and their core (src/ops/int8.{h,c}, src/ops/int8/qlinear.c):
# the core against direct references (test_int8.c), and QLinearConv,
# QLinearMatMul, ConvInteger, MatMulInteger against ONNX Runtime, exactly
# (qlinear_ort.py). Their ONNX backend node tests are in node.cmake.
qf_add_c_test(NAME int8_core SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_int8.c INTERNAL LIBS qf_test_tools
  LABELS int8 TIMEOUT 60)

if(QF_PYTHON3 AND QF_NODE)
  foreach(case conv matmul)
    add_test(NAME int8_ort_${case}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/qlinear_ort.py --qfold $<TARGET_FILE:qfold>
              --node ${QF_NODE} --ort-js ${QF_TEST_DIR}/ref/ort_run.js --work ${QF_TEST_WORK}/qlinear ${case})
    set_tests_properties(int8_ort_${case} PROPERTIES LABELS "int8" TIMEOUT 300)
  endforeach()
endif()
