# Reference tests (issue 2): PyTorch parity of `qfold run`, the ONNX round
# trip checked with onnx.checker and ONNX Runtime, and bad input to the CLI.
# The torch models are built once per ctest run (fixture ref_models).
qf_test_program(qf_roundtrip SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/tools/qf_roundtrip.c)

set(QF_REF_MODELS "${QF_TEST_WORK}/models")
add_test(NAME ref_make_models COMMAND ${QF_PYTHON3} ${QF_TEST_DIR}/ref/make_models.py ${QF_REF_MODELS})
set_tests_properties(ref_make_models PROPERTIES FIXTURES_SETUP ref_models LABELS "ref" TIMEOUT 300)

# Small models and the two torchvision networks; `make test-asan` runs them
# all through the instrumented qfold too.
set(QF_REF_SMALL tiny_cnn conv1d_bn convtranspose_bn grouped_conv depthwise_conv linear_bn1d
  linear_3d relu6 hardswish sigmoid pools flatten_linear softmax silu_se)
set(QF_REF_BIG resnet18 mobilenet_v2)

foreach(m ${QF_REF_SMALL} ${QF_REF_BIG})
  set(labels "ref;parity")
  add_test(NAME parity_${m}
    COMMAND ${QF_PYTHON3} ${QF_TEST_DIR}/ref/torch_parity.py $<TARGET_FILE:qfold> ${QF_REF_MODELS} ${m})
  set_tests_properties(parity_${m} PROPERTIES FIXTURES_REQUIRED ref_models LABELS "${labels}" TIMEOUT 300)
  if(QF_NODE)
    string(REPLACE "parity" "roundtrip" rlabels "${labels}")
    add_test(NAME roundtrip_${m}
      COMMAND ${QF_PYTHON3} ${QF_TEST_DIR}/ref/roundtrip.py $<TARGET_FILE:qf_roundtrip> ${QF_NODE}
              ${QF_TEST_DIR}/ref/ort_run.js ${QF_REF_MODELS} ${m})
    set_tests_properties(roundtrip_${m} PROPERTIES FIXTURES_REQUIRED ref_models LABELS "${rlabels}" TIMEOUT 300)
  endif()
endforeach()
if(NOT QF_NODE)
  message(WARNING "node not found: the ONNX Runtime round-trip tests are not registered (scripts/deps.sh)")
endif()

set(QF_BAD_INPUT_CASES control empty_model truncated_model random_bytes missing_model cycle
  missing_initializer unsupported_op custom_domain_op wrong_shape wrong_rank wrong_dtype
  corrupt_npy truncated_npy too_many_inputs)
foreach(c ${QF_BAD_INPUT_CASES})
  add_test(NAME bad_input_${c}
    COMMAND ${QF_PYTHON3} ${QF_TEST_DIR}/ref/bad_input.py $<TARGET_FILE:qfold>
            ${QF_REF_MODELS}/mobilenet_v2.onnx ${c})
  set_tests_properties(bad_input_${c} PROPERTIES FIXTURES_REQUIRED ref_models LABELS "bad_input" TIMEOUT 120)
endforeach()

# The cache of reference results shared by the two passes of `make test`
# (tests/ref/refcache.py): hits give what computing gives, changed inputs miss.
add_test(NAME ref_cache COMMAND ${QF_PYTHON3} ${QF_TEST_DIR}/ref/refcache_test.py ${QF_TEST_WORK}/ref_cache)
set_tests_properties(ref_cache PROPERTIES LABELS "ref" TIMEOUT 60)
