# Backward kernels of the activation family: central differences (C) and
# PyTorch 1.13 autograd on the same tensors (Python, through qf_node_grad).
qf_add_c_test(NAME unit_grad_activation SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_grad_activation.c LIBS qf_test_tools
  LABELS unit train TIMEOUT 120)

add_test(NAME torch_grad_activation
  COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/grad_torch_activation.py
          --tool $<TARGET_FILE:qf_node_grad> --work ${QF_TEST_WORK}/grad_activation)
set_tests_properties(torch_grad_activation PROPERTIES LABELS "ref;train" TIMEOUT 300)
