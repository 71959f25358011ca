# x.view(x.size(0), -1) with a dynamic batch (tests/passes/view_batch_test.py):
# PyTorch 1.13 exports at opset 13 and 17 run at batch 1 and 5, fuse (checked
# by onnx.checker, run by ONNX Runtime), quantize and export; a dim taken at
# another position or from another tensor is still refused.
if(QF_NODE)
  foreach(case torch13 torch17 slice mismatch other_tensor)
    add_test(NAME passes_view_batch_${case}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/view_batch_test.py --qfold $<TARGET_FILE:qfold>
              --node ${QF_NODE} --ort-run ${QF_TEST_DIR}/ref/ort_run.js
              --tflite-run ${QF_TEST_DIR}/ref/tflite_run.py --work ${QF_TEST_WORK}/view_batch ${case})
    set_tests_properties(passes_view_batch_${case} PROPERTIES LABELS "passes" TIMEOUT 300 SKIP_RETURN_CODE 77)
  endforeach()
endif()
