# Backward kernels of Conv and ConvTranspose: central differences (C) and
# PyTorch 1.13 autograd on the same tensors (Python, through qf_node_grad).
qf_add_c_test(NAME unit_grad_conv SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_grad_conv.c LIBS qf_test_tools
  LABELS unit train TIMEOUT 120)

add_test(NAME torch_grad_conv
  COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/grad_torch_conv.py
          --tool $<TARGET_FILE:qf_node_grad> --work ${QF_TEST_WORK}/grad_conv)
set_tests_properties(torch_grad_conv PROPERTIES LABELS "ref;train" TIMEOUT 300)
