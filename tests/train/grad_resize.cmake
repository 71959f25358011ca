# Resize (src/ops/ref/resize.c): forward and backward against PyTorch 1.13's
# F.interpolate, nearest and bilinear, align_corners True and False (through
# qf_node_grad), and central differences on the same kernels (C).
qf_add_c_test(NAME unit_grad_resize SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_grad_resize.c LIBS qf_test_tools
  LABELS unit train TIMEOUT 120)
add_test(NAME torch_grad_resize
  COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/grad_torch_resize.py
          --tool $<TARGET_FILE:qf_node_grad> --work ${QF_TEST_WORK}/grad_resize)
set_tests_properties(torch_grad_resize PROPERTIES LABELS "ref;train" TIMEOUT 300)
