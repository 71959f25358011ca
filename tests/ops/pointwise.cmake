# Pointwise, linear and quantization kernels (src/ops/{linear,elementwise,
# activation,quant,broadcast}.c) against naive references.
add_executable(test_pointwise ${CMAKE_CURRENT_LIST_DIR}/test_pointwise.c)
target_include_directories(test_pointwise PRIVATE ${CMAKE_SOURCE_DIR}/src ${QF_TEST_DIR})
target_compile_options(test_pointwise PRIVATE ${QF_WARNINGS})
target_link_libraries(test_pointwise PRIVATE qf_test_tools qfold_static)
add_test(NAME pointwise COMMAND test_pointwise)
set_tests_properties(pointwise PROPERTIES LABELS "unit" TIMEOUT 60)

# The same kernels through import + executor, on cases the ONNX node tests do
# not cover (batch-broadcast MatMul, Softmax opset 11 vs 13 on 4-D input,
# per-axis quantization ties ...), expected outputs from numpy / PyTorch.
set(QF_POINTWISE_WORK "${QF_TEST_WORK}/pointwise")
add_test(NAME pointwise_cases_generate
  COMMAND ${QF_PYTHON3} ${QF_TEST_DIR}/ref/pointwise_cases.py ${QF_POINTWISE_WORK})
set_tests_properties(pointwise_cases_generate PROPERTIES FIXTURES_SETUP pointwise_cases LABELS "ref" TIMEOUT 120)
add_test(NAME pointwise_cases COMMAND node_runner ${QF_POINTWISE_WORK}/manifest.txt)
set_tests_properties(pointwise_cases PROPERTIES FIXTURES_REQUIRED pointwise_cases LABELS "ref" TIMEOUT 120)
