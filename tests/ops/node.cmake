# ONNX backend node tests (issue 2): generated offline from python3-onnx once
# per ctest run (fixture node_data), one ctest per op: node_Conv, node_Add, ...
# Tests whose model chains several supported ops run as node_expanded.
qf_test_program(node_runner SOURCES ${CMAKE_CURRENT_LIST_DIR}/node/node_runner.c INTERNAL)

set(QF_NODE_WORK "${QF_TEST_WORK}/node")
add_test(NAME node_generate
  COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/node/gen_node_tests.py ${QF_NODE_WORK}
          ${CMAKE_CURRENT_LIST_DIR}/node/excluded.txt)
set_tests_properties(node_generate PROPERTIES FIXTURES_SETUP node_data LABELS "node" TIMEOUT 120)

set(QF_NODE_OPS Conv ConvTranspose BatchNormalization Gemm MatMul Add Sub Mul Div Pow Sqrt
  Reciprocal Relu Clip LeakyRelu Sigmoid Tanh HardSigmoid HardSwish Softmax MaxPool AveragePool
  GlobalAveragePool ReduceMean Flatten Reshape Transpose Concat Slice Split Squeeze Unsqueeze Pad
  Identity Dropout Constant ConstantOfShape Shape Gather Cast QuantizeLinear DequantizeLinear
  Erf Mod Equal Not Where Expand Range ScatterND LayerNormalization Einsum SoftmaxCrossEntropyLoss
  QLinearConv QLinearMatMul ConvInteger MatMulInteger
  Exp Log ReduceSum ReduceMax
  PRelu Max Min Abs
  Resize
  expanded)
foreach(op ${QF_NODE_OPS})
  qf_add_c_test(NAME node_${op} PROGRAM node_runner ARGS ${QF_NODE_WORK}/manifest/${op}.txt
    FIXTURES_REQUIRED node_data FIXTURES_SETUP node_exports LABELS node TIMEOUT 120)
endforeach()

# node_runner runs qfold's export of each model (qf_export.onnx, at the
# model's opset): the onnx checker checks every one (issue 7).
add_test(NAME node_export_check
  COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/node/check_exports.py ${QF_NODE_WORK})
set_tests_properties(node_export_check PROPERTIES FIXTURES_REQUIRED "node_data;node_exports" LABELS "node"
                     TIMEOUT 120)
