# The fake_quant op (QAT's fake-quant with its moving-average observer) vs
# PyTorch 1.13's FakeQuantize over three training steps: outputs, gradients,
# scale, zero point and running range.
add_test(NAME torch_fake_quant
  COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/fake_quant_torch.py
          --tool $<TARGET_FILE:qf_node_grad> --work ${QF_TEST_WORK}/fake_quant)
set_tests_properties(torch_fake_quant PROPERTIES LABELS "ref;train" TIMEOUT 300)
