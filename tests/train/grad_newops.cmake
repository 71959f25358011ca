# Backward kernels of PRelu, Max, Min, Abs (issue 29): PyTorch 1.13 autograd
# on the same tensors (through qf_node_grad), and central differences (C).
add_test(NAME torch_grad_newops
  COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/grad_torch_newops.py
          --tool $<TARGET_FILE:qf_node_grad> --work ${QF_TEST_WORK}/grad_newops)
set_tests_properties(torch_grad_newops PROPERTIES LABELS "ref;train" TIMEOUT 300)
qf_add_c_test(NAME unit_grad_newops SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_grad_newops.c LIBS qf_test_tools
  LABELS unit train TIMEOUT 120)
