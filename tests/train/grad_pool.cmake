# Backward kernels of the pools (src/ops/ref/pool.c), the layout ops
# (src/ops/ref/data_movement.c), Dropout (src/ops/ref/dropout.c) and Quantize /
# DequantizeLinear (src/ops/ref/quantize_linear.c): central differences (C) and PyTorch 1.13
# autograd on the same tensors (Python, through qf_node_grad).
foreach(area pool layout)
  qf_add_c_test(NAME unit_grad_${area} SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_grad_${area}.c LIBS qf_test_tools
    LABELS unit train TIMEOUT 120)

  add_test(NAME torch_grad_${area}
    COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/grad_torch_${area}.py
            --tool $<TARGET_FILE:qf_node_grad> --work ${QF_TEST_WORK}/grad_${area})
  set_tests_properties(torch_grad_${area} PROPERTIES LABELS "ref;train" TIMEOUT 300)
endforeach()
