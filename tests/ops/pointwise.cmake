# Pointwise, linear and quantization kernels (src/ops/{linear,elementwise,
# activation,quant,broadcast}.c) against naive references.
qf_add_c_test(NAME pointwise SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_pointwise.c INTERNAL LIBS qf_test_tools
  LABELS unit TIMEOUT 60)

# The same kernels through import + executor, on cases the ONNX node tests do
# not cover (batch-broadcast MatMul, Softmax opset 11 vs 13 on 4-D input,
# per-axis quantization ties ...), expected outputs from numpy / PyTorch.
set(QF_POINTWISE_WORK "${QF_TEST_WORK}/pointwise")
add_test(NAME pointwise_cases_generate
  COMMAND ${QF_PYTHON3} ${QF_TEST_DIR}/ref/pointwise_cases.py ${QF_POINTWISE_WORK})
set_tests_properties(pointwise_cases_generate PROPERTIES FIXTURES_SETUP pointwise_cases LABELS "ref" TIMEOUT 120)
qf_add_c_test(NAME pointwise_cases PROGRAM node_runner ARGS ${QF_POINTWISE_WORK}/manifest.txt
  FIXTURES_REQUIRED pointwise_cases LABELS ref TIMEOUT 120)
