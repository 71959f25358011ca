# TFLite's 16-bit fixed-point helpers, its int8 HardSwish (src/ops/math/fixed_point.h)
# and the int8 table op QF_OP_QLUT (src/ops/int8/qlut.c). Bit-exactness against
# TensorFlow Lite 2.2 itself: tests/tflite/armnn_test.py activations_sweep.
qf_add_c_test(NAME int8_fixed_point SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_fixed_point.c INTERNAL
  LIBS qf_test_tools LABELS int8 TIMEOUT 60)
