# Backward kernels of the pools (src/ops/ref/pool.c), the layout ops
# (src/ops/ref/data_movement.c), Dropout (src/ops/ref/dropout.c) and Quantize /
# DequantizeLinear (src/ops/ref/quantize_linear.c): central differences (C) and PyTorch 1.13
# autograd on the same tensors (Python, through qf_node_grad).
foreach(area pool layout)
  add_executable(test_grad_${area} ${CMAKE_CURRENT_LIST_DIR}/test_grad_${area}.c)
  target_compile_options(test_grad_${area} PRIVATE ${QF_WARNINGS})
  target_link_libraries(test_grad_${area} PRIVATE qf_test_tools)
  add_test(NAME unit_grad_${area} COMMAND test_grad_${area})
  set_tests_properties(unit_grad_${area} PROPERTIES LABELS "unit;train" TIMEOUT 120)

  add_test(NAME torch_grad_${area}
    COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/grad_torch_${area}.py
            --tool $<TARGET_FILE:qf_node_grad> --work ${QF_TEST_WORK}/grad_${area})
  set_tests_properties(torch_grad_${area} PROPERTIES LABELS "ref;train" TIMEOUT 300)
endforeach()
