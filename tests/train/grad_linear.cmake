# Backward kernels of the matrix products (Gemm, MatMul, linear) and of the
# elementwise arithmetic (Add, Sub, Mul, Div): central differences (C) and
# PyTorch 1.13 autograd on the same tensors (Python, through qf_node_grad).
foreach(fam linear elementwise)
  qf_add_c_test(NAME unit_grad_${fam} SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_grad_${fam}.c LIBS qf_test_tools
    LABELS unit train TIMEOUT 120)

  add_test(NAME torch_grad_${fam}
    COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/grad_torch_${fam}.py
            --tool $<TARGET_FILE:qf_node_grad> --work ${QF_TEST_WORK}/grad_${fam})
  set_tests_properties(torch_grad_${fam} PROPERTIES LABELS "ref;train" TIMEOUT 300)
endforeach()
