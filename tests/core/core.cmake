# C unit tests of the core: allocation-failure injection and size arithmetic.

# Uses the small torch model of the ref_models fixture (tests/ref.cmake).
add_executable(test_alloc_fail ${CMAKE_CURRENT_LIST_DIR}/test_alloc_fail.c)
target_include_directories(test_alloc_fail PRIVATE ${QF_TEST_DIR})
target_compile_options(test_alloc_fail PRIVATE ${QF_WARNINGS})
target_link_libraries(test_alloc_fail PRIVATE qfold_static)
file(MAKE_DIRECTORY "${QF_TEST_WORK}/alloc_fail")
add_test(NAME unit_alloc_fail
  COMMAND test_alloc_fail ${QF_TEST_WORK}/models/tiny_cnn.onnx ${QF_TEST_WORK}/models/tiny_cnn.in0.npy
          ${QF_TEST_WORK}/alloc_fail)
set_tests_properties(unit_alloc_fail PROPERTIES FIXTURES_REQUIRED ref_models LABELS "unit" TIMEOUT 300)

# Size arithmetic on hostile numbers (checked multiply, shape limits).
add_executable(test_limits ${CMAKE_CURRENT_LIST_DIR}/test_limits.c)
target_compile_options(test_limits PRIVATE ${QF_WARNINGS})
target_include_directories(test_limits PRIVATE ${QF_TEST_DIR})
target_link_libraries(test_limits PRIVATE qfold_static)
add_test(NAME unit_limits COMMAND test_limits)
set_tests_properties(unit_limits PROPERTIES LABELS "unit" TIMEOUT 60)


# The one JSON string escaper (src/core/strbuf.c): valid UTF-8 kept, every
# byte that starts no valid sequence as U+FFFD, controls escaped.
add_executable(test_strbuf ${CMAKE_CURRENT_LIST_DIR}/test_strbuf.c)
target_compile_options(test_strbuf PRIVATE ${QF_WARNINGS})
target_include_directories(test_strbuf PRIVATE ${CMAKE_SOURCE_DIR}/src ${QF_TEST_DIR})
target_link_libraries(test_strbuf PRIVATE qfold_static)
add_test(NAME unit_strbuf COMMAND test_strbuf)
set_tests_properties(unit_strbuf PROPERTIES LABELS "unit" TIMEOUT 60)
