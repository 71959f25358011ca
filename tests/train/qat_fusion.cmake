# QAT's simulated BatchNorm fusion as a whole graph (qat_bn_add, and the
# exact two-pass form of qat_bn_add_exact) vs PyTorch 1.13's fused QAT modules
# (ConvBn2d, ConvBnReLU2d, LinearBn1d; the ConvTranspose and exact forms as
# torch formulas): two training steps through the training plan (the
# qf_qat_step driver), outputs, gradients, running statistics and the weight
# fake-quant's buffers.
qf_test_program(qf_qat_step SOURCES ${CMAKE_CURRENT_LIST_DIR}/qf_qat_step.c)

add_test(NAME torch_qat_fusion
  COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/qat_fusion_torch.py
          --tool $<TARGET_FILE:qf_qat_step> --work ${QF_TEST_WORK}/qat_fusion)
set_tests_properties(torch_qat_fusion PROPERTIES LABELS "ref;train;qat" TIMEOUT 300)

# A shared-qparams group (an activation, the MaxPool and Flatten after it on
# one set of fake-quant buffers) vs PyTorch FX's one FakeQuantize module
# called per member: each member masks its gradient with its own forward's
# scale. Two training steps through qf_qat_step (`@fq_all`).
add_test(NAME torch_qat_shared
  COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/qat_shared_torch.py
          --tool $<TARGET_FILE:qf_qat_step> --work ${QF_TEST_WORK}/qat_shared)
set_tests_properties(torch_qat_shared PROPERTIES LABELS "ref;train;qat" TIMEOUT 300)

# Their backward kernels against central differences, qat_bn_stats's update.
qf_add_c_test(NAME unit_grad_qat SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_grad_qat.c LIBS qf_test_tools
  LABELS unit train qat TIMEOUT 120)
