# C unit tests of the core: allocation-failure injection and size arithmetic.

# Uses the small torch model of the ref_models fixture (tests/ref.cmake).
file(MAKE_DIRECTORY "${QF_TEST_WORK}/alloc_fail")
qf_add_c_test(NAME unit_alloc_fail SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_alloc_fail.c
  ARGS ${QF_TEST_WORK}/models/tiny_cnn.onnx ${QF_TEST_WORK}/models/tiny_cnn.in0.npy ${QF_TEST_WORK}/alloc_fail
  FIXTURES_REQUIRED ref_models LABELS unit TIMEOUT 300)

# Size arithmetic on hostile numbers (checked multiply, shape limits).
qf_add_c_test(NAME unit_limits SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_limits.c LABELS unit TIMEOUT 60)


# The one JSON string escaper (src/core/strbuf.c): valid UTF-8 kept, every
# byte that starts no valid sequence as U+FFFD, controls escaped.
qf_add_c_test(NAME unit_strbuf SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_strbuf.c INTERNAL LABELS unit TIMEOUT 60)
