# float16 / bfloat16 models (tests/io/half_test.py): an fp16 CNN and an fp32
# one with fp16 weights behind Casts against ONNX Runtime, a bfloat16 CNN
# against a float64 reference on its bfloat16 values, Cast rounding against
# numpy / torch bit for bit.
if(QF_NODE)
  foreach(case fp16_cnn fp16_shared_weight fp16_constant_of_shape fp16_quantize fp16_weights_behind_cast bf16_cnn cast_rounding bad_half)
    add_test(NAME io_half_${case}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/half_test.py --qfold $<TARGET_FILE:qfold>
              --node ${QF_NODE} --ort-run ${QF_TEST_DIR}/ref/ort_run.js --work ${QF_TEST_WORK}/half ${case})
    set_tests_properties(io_half_${case} PROPERTIES LABELS "io" TIMEOUT 120)
  endforeach()
endif()
