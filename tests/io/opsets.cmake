# Opsets 7..21 (issue 7, item 1): models exported by PyTorch 1.13 at opsets
# 9, 11, 13, 17 and built with onnx.helper at 11 (Softmax's 2-D coercion) and
# 18..21, run, fused and quantized by qfold, checked against PyTorch and ONNX
# Runtime; models outside the supported forms refused. The models are made
# in the build directory at test time.
if(QF_PYTHON3 AND QF_NODE)
  foreach(case torch9 torch11 torch13 torch17 hand11_softmax hand18 hand19 hand20 hand21
          bad_spatial bad_opset6 bad_opset22)
    add_test(NAME opsets_${case}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/opsets_test.py $<TARGET_FILE:qfold> ${QF_NODE}
              ${QF_TEST_DIR}/ref/ort_run.js ${QF_TEST_WORK}/opsets ${case})
    set_tests_properties(opsets_${case} PROPERTIES LABELS "io;opsets" TIMEOUT 300)
  endforeach()
endif()
