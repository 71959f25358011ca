# C tests of the io module: the zero-copy ONNX import (weights borrowed in
# the buffer the file was read into). Uses the torch models of the
# ref_models fixture (tests/ref.cmake).
file(MAKE_DIRECTORY "${QF_TEST_WORK}/zero_copy")
qf_add_c_test(NAME io_zero_copy SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_zero_copy.c
  ARGS ${QF_TEST_WORK}/models ${QF_TEST_WORK}/zero_copy FIXTURES_REQUIRED ref_models LABELS unit io TIMEOUT 300)

# The big-model write (O_DIRECT past the first MiBs, on a writer thread):
# same bytes, same failures as through the page cache; the file writer
# (src/io/io_internal.h) on its own. resnet18 of the ref_models fixture.
file(MAKE_DIRECTORY "${QF_TEST_WORK}/big_write")
qf_add_c_test(NAME io_big_write SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_big_write.c INTERNAL
  ARGS ${QF_TEST_WORK}/models ${QF_TEST_WORK}/big_write FIXTURES_REQUIRED ref_models LABELS unit io TIMEOUT 300)

# Payloads left in the model file (`qfold fuse`'s load): same bytes as the
# eager load, and an input changed before the save is an error.
file(MAKE_DIRECTORY "${QF_TEST_WORK}/defer")
qf_add_c_test(NAME io_defer SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_defer.c
  ARGS ${QF_TEST_WORK}/models ${QF_TEST_WORK}/defer FIXTURES_REQUIRED ref_models LABELS unit io TIMEOUT 300)

# The model as ONNX bytes in memory (qf_onnx_save_buffer): the file's bytes,
# deferred payloads included, read back by qf_onnx_load_buffer; 2 GiB refused.
file(MAKE_DIRECTORY "${QF_TEST_WORK}/save_buffer")
qf_add_c_test(NAME io_save_buffer SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_save_buffer.c
  ARGS ${QF_TEST_WORK}/models ${QF_TEST_WORK}/save_buffer FIXTURES_REQUIRED ref_models LABELS unit io TIMEOUT 300)
