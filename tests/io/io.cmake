# C tests of the io module: the zero-copy ONNX import (weights borrowed in
# the buffer the file was read into). Uses the torch models of the
# ref_models fixture (tests/ref.cmake).
add_executable(test_zero_copy ${CMAKE_CURRENT_LIST_DIR}/test_zero_copy.c)
target_include_directories(test_zero_copy PRIVATE ${QF_TEST_DIR})
target_compile_options(test_zero_copy PRIVATE ${QF_WARNINGS})
target_link_libraries(test_zero_copy PRIVATE qfold_static)
file(MAKE_DIRECTORY "${QF_TEST_WORK}/zero_copy")
add_test(NAME io_zero_copy COMMAND test_zero_copy ${QF_TEST_WORK}/models ${QF_TEST_WORK}/zero_copy)
set_tests_properties(io_zero_copy PROPERTIES FIXTURES_REQUIRED ref_models LABELS "unit;io" TIMEOUT 300)

# The big-model write (O_DIRECT past the first MiBs, on a writer thread):
# same bytes, same failures as through the page cache; the file writer
# (src/io/io_internal.h) on its own. resnet18 of the ref_models fixture.
add_executable(test_big_write ${CMAKE_CURRENT_LIST_DIR}/test_big_write.c)
target_include_directories(test_big_write PRIVATE ${QF_TEST_DIR} ${PROJECT_SOURCE_DIR}/src)
target_compile_options(test_big_write PRIVATE ${QF_WARNINGS})
target_link_libraries(test_big_write PRIVATE qfold_static)
file(MAKE_DIRECTORY "${QF_TEST_WORK}/big_write")
add_test(NAME io_big_write COMMAND test_big_write ${QF_TEST_WORK}/models ${QF_TEST_WORK}/big_write)
set_tests_properties(io_big_write PROPERTIES FIXTURES_REQUIRED ref_models LABELS "unit;io" TIMEOUT 300)

# Payloads left in the model file (`qfold fuse`'s load): same bytes as the
# eager load, and an input changed before the save is an error.
add_executable(test_defer ${CMAKE_CURRENT_LIST_DIR}/test_defer.c)
target_include_directories(test_defer PRIVATE ${QF_TEST_DIR})
target_compile_options(test_defer PRIVATE ${QF_WARNINGS})
target_link_libraries(test_defer PRIVATE qfold_static)
file(MAKE_DIRECTORY "${QF_TEST_WORK}/defer")
add_test(NAME io_defer COMMAND test_defer ${QF_TEST_WORK}/models ${QF_TEST_WORK}/defer)
set_tests_properties(io_defer PROPERTIES FIXTURES_REQUIRED ref_models LABELS "unit;io" TIMEOUT 300)
