# The loss ops (src/ops/ref/loss.c): central differences and bad input (C), and
# PyTorch 1.13's cross_entropy / mse_loss on the same tensors (Python, through
# qf_node_grad for SoftmaxCrossEntropyLoss; mse_loss is internal, so it runs
# through qf_loss_grad, a driver of its own).
qf_add_c_test(NAME unit_grad_loss SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_grad_loss.c LIBS qf_test_tools
  LABELS unit train TIMEOUT 120)

qf_test_program(qf_mse_grad SOURCES ${CMAKE_CURRENT_LIST_DIR}/qf_mse_grad.c LIBS qf_test_tools)
add_test(NAME torch_grad_loss
  COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/grad_torch_loss.py
          --tool $<TARGET_FILE:qf_node_grad> --mse-tool $<TARGET_FILE:qf_mse_grad>
          --work ${QF_TEST_WORK}/grad_loss)
set_tests_properties(torch_grad_loss PROPERTIES LABELS "ref;train" TIMEOUT 300)
