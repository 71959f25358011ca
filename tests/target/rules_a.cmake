# The Neutron rules of src/target/neutron_conv.c and neutron_pool.c (issue 30,
# item 2): tests/target/rules_a_test.py builds small ONNX models just inside
# and just outside every limit of the Conv / ConvTranspose / Gemm / MatMul /
# pool / reduction / Softmax rules and runs `qfold check --json` on them in
# the SDK 3.x and SDK 2.x flows. One process, all cases (seconds).
add_test(NAME target_rules_a
  COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/rules_a_test.py $<TARGET_FILE:qfold>
          ${QF_TEST_WORK}/target_rules_a)
set_tests_properties(target_rules_a PROPERTIES LABELS "target" TIMEOUT 300)

# The same rules called directly on hand-made views, for the paths a check of
# an ONNX file does not reach (MaxPool's Indices in use, Softmax before opset
# 13, ReduceMean's partition rule with opset-18 axes).
qf_add_c_test(NAME target_rules_a_unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_rules_a.c INTERNAL
              LABELS target TIMEOUT 60)
