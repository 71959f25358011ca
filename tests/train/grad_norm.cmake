# BatchNormalization in training mode as PyTorch (src/ops/ref/norm.c): central
# differences in training and inference mode (C), and nn.BatchNorm1d / 2d's
# outputs, gradients and running statistics over 3 training steps (Python,
# through qf_node_grad --training).
qf_add_c_test(NAME unit_grad_norm SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_grad_norm.c LIBS qf_test_tools
  LABELS unit train TIMEOUT 120)

add_test(NAME torch_grad_norm
  COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/grad_torch_norm.py
          --tool $<TARGET_FILE:qf_node_grad> --work ${QF_TEST_WORK}/grad_norm)
set_tests_properties(torch_grad_norm PROPERTIES LABELS "ref;train" TIMEOUT 300)
