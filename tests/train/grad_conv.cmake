# Backward kernels of Conv and ConvTranspose: central differences (C) and
# PyTorch 1.13 autograd on the same tensors (Python, through qf_node_grad).
add_executable(test_grad_conv ${CMAKE_CURRENT_LIST_DIR}/test_grad_conv.c)
target_compile_options(test_grad_conv PRIVATE ${QF_WARNINGS})
target_link_libraries(test_grad_conv PRIVATE qf_test_tools)
add_test(NAME unit_grad_conv COMMAND test_grad_conv)
set_tests_properties(unit_grad_conv PROPERTIES LABELS "unit;train" TIMEOUT 120)

add_test(NAME torch_grad_conv
  COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/grad_torch_conv.py
          --tool $<TARGET_FILE:qf_node_grad> --work ${QF_TEST_WORK}/grad_conv)
set_tests_properties(torch_grad_conv PROPERTIES LABELS "ref;train" TIMEOUT 300)
