# TFLite's 16-bit fixed-point helpers, its int8 HardSwish (src/ops/math/fixed_point.h)
# and the int8 table op QF_OP_QLUT (src/ops/int8/qlut.c). Bit-exactness against
# TensorFlow Lite 2.2 itself: tests/tflite/armnn_test.py activations_sweep.
add_executable(test_fixed_point ${CMAKE_CURRENT_LIST_DIR}/test_fixed_point.c)
target_include_directories(test_fixed_point PRIVATE ${CMAKE_SOURCE_DIR}/src ${QF_TEST_DIR})
target_compile_options(test_fixed_point PRIVATE ${QF_WARNINGS})
target_link_libraries(test_fixed_point PRIVATE qf_test_tools qfold_static m)
add_test(NAME int8_fixed_point COMMAND test_fixed_point)
set_tests_properties(int8_fixed_point PROPERTIES LABELS "int8" TIMEOUT 60)
