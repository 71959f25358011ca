# Any ONNX model in, the same model out (tests/io/keep_test.py): ops qfold
# does not know pass through fuse byte for byte (checked with onnx, and run
# in ONNX Runtime), inspect lists every problem at once, metadata / doc
# strings / dim names / value_info survive fuse, fuse --verify sizes dynamic
# dims. Models are made at test time with onnx.helper.
if(QF_NODE)
  foreach(c opaque_fold opaque_ort inspect_grouped metadata_kept verify_dynamic)
    add_test(NAME io_keep_${c}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/keep_test.py $<TARGET_FILE:qfold> ${QF_NODE}
              ${QF_TEST_DIR}/ref/ort_run.js ${QF_TEST_WORK}/keep ${c})
    set_tests_properties(io_keep_${c} PROPERTIES LABELS "io" TIMEOUT 120)
  endforeach()
endif()

# The installed library from a prefix of one's own: `cmake --install` into a
# temporary directory, a small C program built against it with pkg-config
# (PKG_CONFIG_PATH) and run with LD_LIBRARY_PATH, as the README says. Not in
# the sanitizer build (its library needs the sanitizer runtimes to link).
if(NOT QF_SANITIZE)
  add_test(NAME io_install_prefix
    COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/install_prefix.sh ${CMAKE_BINARY_DIR} ${QF_TEST_WORK}/install_prefix
            ${CMAKE_C_COMPILER})
  set_tests_properties(io_install_prefix PROPERTIES LABELS "io" TIMEOUT 120)
endif()
