# Hostile models (tests/ref/hostile_models.py): files that parse but carry
# absurd shapes, attributes, indices or NaN; each must fail with one clear
# message and the contract's exit status, or (ok_* cases) run correctly.
# Several are regression tests of fuzzer findings (fuzz/README.md).
set(QF_HOSTILE_CASES reshape_overflow reshape_two_unknown expand_huge constant_of_shape_huge
  zero_dim_hides_huge initializer_zero_dim input_huge range_huge range_extremes range_empty_operand
  split_overflow pad_beyond_axis pad_overflow pad_extremes conv_huge_dilation conv_huge_pads
  conv_huge_stride conv_scratch conv_transpose_group arena_over_limit plan_out_of_memory
  gather_index_out_of_range scatter_nd_index_out_of_range slice_step_zero concat_rank_mismatch
  axis_out_of_range kernel_shape_wrong_length attribute_wrong_type constant_of_shape_value_wrong_dtype
  batchnorm_negative_variance sigmoid_nan ok_slice_extreme ok_range_negative_step
  ok_conv_transpose_empty_input ok_conv_no_channels
  nul_attribute_name nul_op_type nul_domain nul_value_name nul_external_location external_location_dot)
if(QF_SANITIZE)
  set(QF_HOSTILE_ENV "QF_SANITIZED=1")
else()
  set(QF_HOSTILE_ENV "QF_SANITIZED=0")
endif()
foreach(c ${QF_HOSTILE_CASES})
  add_test(NAME hostile_${c}
    COMMAND ${QF_PYTHON3} ${QF_TEST_DIR}/ref/hostile_models.py $<TARGET_FILE:qfold> ${c})
  set_tests_properties(hostile_${c} PROPERTIES LABELS "bad_input;hostile" TIMEOUT 300
    ENVIRONMENT "${QF_HOSTILE_ENV}")
endforeach()
