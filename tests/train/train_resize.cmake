# `qfold train` through Resize (nearest, bilinear, align_corners) vs PyTorch 1.13
# (train_resize_test.py on train_arch_test.py's harness).
add_test(NAME train_resize_upsample
  COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/train_resize_test.py --qfold $<TARGET_FILE:qfold>
          --work ${QF_TEST_WORK}/train_resize upsample)
set_tests_properties(train_resize_upsample PROPERTIES LABELS "ref;train" TIMEOUT 300)
