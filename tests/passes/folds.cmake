# BatchNorm folds (issue 3): unit tests of fuse_batch_norm,
# fuse_batch_norm_forward and decompose_batch_norm on graphs built with the
# IR API, then end-to-end tests of `qfold fuse` on PyTorch models checked
# with python onnx, `qfold run` and ONNX Runtime.
qf_add_c_test(NAME folds_unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_bn_folds.c LABELS folds TIMEOUT 120)

# End-to-end: one ctest per case of tests/passes/fuse_e2e.py. resnet18 and
# mobilenet_v2 reuse the ref fixture's exported models (tests/ref.cmake).
set(QF_FOLDS_WORK "${QF_TEST_WORK}/folds")
set(QF_FOLDS_CASES
  conv2d_bias conv2d_nobias_eps1e-3 conv2d_grouped_dilated conv2d_depthwise conv1d_bias
  conv1d_depthwise_nobias convtranspose2d_groups2 convtranspose1d_bias linear_bn1d_bias
  linear_bn1d_nobias matmul_bn1d gemm_only_fuse forward_bn_conv forward_bn_depthwise
  forward_padded_kept decompose decompose_rank2 skip_connection conv_is_output weight_not_const
  training_mode numeric_error resnet18 mobilenet_v2)
if(QF_NODE)
  foreach(c ${QF_FOLDS_CASES})
    add_test(NAME folds_${c}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/fuse_e2e.py $<TARGET_FILE:qfold> ${QF_NODE}
              ${QF_TEST_DIR}/ref/ort_run.js ${QF_FOLDS_WORK} ${QF_TEST_WORK}/models ${c})
    if(c STREQUAL "resnet18" OR c STREQUAL "mobilenet_v2")
      set_tests_properties(folds_${c} PROPERTIES LABELS "folds" TIMEOUT 600 FIXTURES_REQUIRED ref_models)
    else()
      set_tests_properties(folds_${c} PROPERTIES LABELS "folds" TIMEOUT 300)
    endif()
  endforeach()
else()
  message(WARNING "node not found: the folds end-to-end tests are not registered (scripts/deps.sh)")
endif()
