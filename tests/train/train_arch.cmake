# `qfold train` vs PyTorch 1.13 on five architectures (residual, squeeze-excite,
# depthwise + Linear/BN1d head, Concat/Transpose branches, ConvTranspose).
set(QF_TRAIN_ARCH_CASES resblock se_hardswish mobile_linear_bn branches deconv_pool_mean)
foreach(c ${QF_TRAIN_ARCH_CASES})
  add_test(NAME train_arch_${c}
    COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/train_arch_test.py --qfold $<TARGET_FILE:qfold>
            --work ${QF_TEST_WORK}/train_arch ${c})
  set_tests_properties(train_arch_${c} PROPERTIES LABELS "ref;train" TIMEOUT 300)
endforeach()
