# qfold finalize (issue 10, item 4): QAT models exported from PyTorch 1.13
# (ConvBn, ConvBnReLU, LinearBn1d, depthwise ConvBn) against convert_fx's int8
# weights and top-1, ONNX Runtime and qfold's own int8 executor; bad input.
if(QF_PYTHON3 AND QF_NODE)
  foreach(case convbn convbnrelu linearbn depthwise no_div no_div_linear
          bad_scale bad_div bad_bn_training bad_var bad_nan bad_zero_point)
    add_test(NAME finalize_${case}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/torch_qat_export.py $<TARGET_FILE:qfold> ${QF_NODE}
              ${CMAKE_CURRENT_LIST_DIR}/ort_run.js ${QF_TEST_WORK}/finalize ${case})
    set_tests_properties(finalize_${case} PROPERTIES LABELS "quant;finalize" TIMEOUT 300)
  endforeach()
endif()
