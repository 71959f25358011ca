# qfold finalize (issue 10, item 4): QAT models exported from PyTorch 1.13
# (ConvBn, ConvBnReLU, LinearBn1d, depthwise ConvBn) against convert_fx's int8
# weights and top-1, ONNX Runtime and qfold's own int8 executor; bad input.
if(QF_PYTHON3 AND QF_NODE)
  foreach(case convbn convbnrelu linearbn depthwise nofold no_div no_div_linear
          bad_scale bad_qdq_mismatch bad_div bad_div_zero bad_bn_training bad_eps bad_var bad_nan bad_zero_point bad_float)
    add_test(NAME finalize_${case}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/torch_qat_export.py $<TARGET_FILE:qfold> ${QF_NODE}
              ${CMAKE_CURRENT_LIST_DIR}/ort_run.js ${QF_TEST_WORK}/finalize ${case})
    set_tests_properties(finalize_${case} PROPERTIES LABELS "quant;finalize" TIMEOUT 300)
  endforeach()
endif()

# The finalized models run in qfold's integer executor: every Conv / Gemm group
# is lowered to an integer conv (test_lower: counts and both requantizations).
if(QF_PYTHON3 AND QF_NODE AND TARGET test_lower)
  foreach(spec "convbnrelu;2;1" "depthwise;3;1" "linearbn;0;2")
    list(GET spec 0 m)
    list(GET spec 1 nconv)
    list(GET spec 2 ngemm)
    set_tests_properties(finalize_${m} PROPERTIES FIXTURES_SETUP finalized_${m})
    qf_add_c_test(NAME finalize_lower_${m} PROGRAM test_lower ARGS ${QF_TEST_WORK}/finalize/${m}/final.onnx ${nconv} ${ngemm}
      FIXTURES_REQUIRED finalized_${m} LABELS quant finalize TIMEOUT 60)
  endforeach()
endif()

# The README's DDP QAT recipe run for real (issue 29, item 5): two gloo
# processes train a model with AvgPool2d(padding) and a residual Add + ReLU,
# rank 0 exports; finalize -> ONNX Runtime with its default optimizations ->
# export -> TFLite 2.2, bit-exact with QFOLD_ENGINE=ref qfold run. Skipped
# (77) without torch.distributed / gloo, ONNX Runtime or TFLite 2.2.
if(QF_PYTHON3 AND QF_NODE)
  add_test(NAME finalize_ddp
    COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/ddp_qat.py $<TARGET_FILE:qfold> ${QF_NODE}
            ${CMAKE_CURRENT_LIST_DIR}/ort_run.js ${CMAKE_CURRENT_LIST_DIR}/tflite_run.py ${QF_TEST_WORK}/finalize_ddp)
  set_tests_properties(finalize_ddp PROPERTIES LABELS "quant;finalize" TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()
