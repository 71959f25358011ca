# ONNX external data (tests/io/extdata_test.py): models saved by onnx with
# their weights in side files, run and fused against ONNX Runtime; the side
# file qfold writes read back by onnx; hostile locations and ranges refused.
# A case that cannot run here (hostile_device: no device node can be made
# without privileges) exits 77, which ctest reports as skipped, not passed.
if(QF_NODE)
  set(QF_EXTDATA_CASES read_run fuse_roundtrip auto all_or_nothing from_memory_and_inline_mix
    hostile_dotdot hostile_dotdot_inner hostile_absolute hostile_symlink hostile_fifo hostile_directory
    hostile_device hostile_missing hostile_offset_past_end hostile_offset_overflow hostile_offset_too_big
    hostile_offset_negative hostile_length_mismatch hostile_no_location)
  foreach(case ${QF_EXTDATA_CASES})
    add_test(NAME io_extdata_${case}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/extdata_test.py --qfold $<TARGET_FILE:qfold>
              --node ${QF_NODE} --ort-run ${QF_TEST_DIR}/ref/ort_run.js --work ${QF_TEST_WORK}/extdata ${case})
    set_tests_properties(io_extdata_${case} PROPERTIES LABELS "io" TIMEOUT 120 SKIP_RETURN_CODE 77)
  endforeach()
endif()
