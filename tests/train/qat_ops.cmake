# QAT's simulated-fusion ops (qat_bn_weight, qat_bn_output) vs PyTorch 1.13
# autograd on ConvBn2d's approximate forward: outputs bit for bit, gradients.
add_test(NAME torch_qat_ops
  COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/qat_ops_torch.py
          --tool $<TARGET_FILE:qf_node_grad> --work ${QF_TEST_WORK}/qat_ops)
set_tests_properties(torch_qat_ops PROPERTIES LABELS "ref;train;qat" TIMEOUT 300)
