# Inputs with a default (tests/io/default_input_test.py; issue 33, item 7c):
# an initializer named like a graph input is the input's overridable default
# from ONNX IR version 4 (a constant below), listed by inspect, run fed or
# not against ONNX Runtime, kept by fuse (not folded) and written back.
if(QF_PYTHON3 AND QF_NODE)
  foreach(c run fuse ir3 mismatch)
    add_test(NAME io_default_input_${c}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/default_input_test.py --qfold $<TARGET_FILE:qfold>
              --node ${QF_NODE} --ort-run ${QF_TEST_DIR}/ref/ort_run.js --work ${QF_TEST_WORK}/default_input ${c})
    set_tests_properties(io_default_input_${c} PROPERTIES LABELS "io" TIMEOUT 120)
  endforeach()
endif()
