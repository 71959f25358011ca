# Backward kernels of the activation family: central differences (C) and
# PyTorch 1.13 autograd on the same tensors (Python, through qf_node_grad).
add_executable(test_grad_activation ${CMAKE_CURRENT_LIST_DIR}/test_grad_activation.c)
target_compile_options(test_grad_activation PRIVATE ${QF_WARNINGS})
target_link_libraries(test_grad_activation PRIVATE qf_test_tools)
add_test(NAME unit_grad_activation COMMAND test_grad_activation)
set_tests_properties(unit_grad_activation PROPERTIES LABELS "unit;train" TIMEOUT 120)

add_test(NAME torch_grad_activation
  COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/grad_torch_activation.py
          --tool $<TARGET_FILE:qf_node_grad> --work ${QF_TEST_WORK}/grad_activation)
set_tests_properties(torch_grad_activation PROPERTIES LABELS "ref;train" TIMEOUT 300)
