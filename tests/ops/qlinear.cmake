# The integer ops and their core (src/ops/int8.{h,c}, src/ops/int8/qlinear.c):
# the core against direct references (test_int8.c), and QLinearConv,
# QLinearMatMul, ConvInteger, MatMulInteger against ONNX Runtime, exactly
# (qlinear_ort.py). Their ONNX backend node tests are in node.cmake.
add_executable(test_int8 ${CMAKE_CURRENT_LIST_DIR}/test_int8.c)
target_include_directories(test_int8 PRIVATE ${CMAKE_SOURCE_DIR}/src ${QF_TEST_DIR})
target_compile_options(test_int8 PRIVATE ${QF_WARNINGS})
target_link_libraries(test_int8 PRIVATE qf_test_tools qfold_static m)
add_test(NAME int8_core COMMAND test_int8)
set_tests_properties(int8_core PROPERTIES LABELS "int8" TIMEOUT 60)

if(QF_PYTHON3 AND QF_NODE)
  foreach(case conv matmul)
    add_test(NAME int8_ort_${case}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/qlinear_ort.py --qfold $<TARGET_FILE:qfold>
              --node ${QF_NODE} --ort-js ${QF_TEST_DIR}/ref/ort_run.js --work ${QF_TEST_WORK}/qlinear ${case})
    set_tests_properties(int8_ort_${case} PROPERTIES LABELS "int8" TIMEOUT 300)
  endforeach()
endif()
