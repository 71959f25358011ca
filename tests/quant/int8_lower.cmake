# The integer executor's ConvTranspose, MatMul, Mul, AveragePool,
# GlobalAveragePool, ReduceMean and Concat groups: lowered (or not), against a
# direct integer reference and the float simulation (test_lower_ops.c); run
# on both engines (the reference kernels under QFOLD_ENGINE=ref).
qf_add_c_test(NAME quant_lower_ops SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_lower_ops.c INTERNAL LABELS quant TIMEOUT 60)
qf_add_c_test(NAME quant_lower_ops_ref PROGRAM test_lower_ops LABELS quant TIMEOUT 60 ENVIRONMENT QFOLD_ENGINE=ref)

# qfold's integer executor against ONNX Runtime on a model with ConvTranspose,
# Gemm, Concat, AveragePool, Mul, ReduceMean and a MatMul of two activations
# (quantize_test.py's decoder case, both targets), and the lowering of every
# one of those groups in the files it wrote.
if(QF_PYTHON3 AND QF_NODE)
  add_test(NAME quant_quantize_decoder
    COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/quantize_test.py --qfold $<TARGET_FILE:qfold>
            --root ${PROJECT_SOURCE_DIR} --work ${QF_TEST_WORK}/quantize decoder)
  set_tests_properties(quant_quantize_decoder PROPERTIES FIXTURES_SETUP quantized_decoder LABELS "quant" TIMEOUT 600)
  foreach(target neutron generic)
    qf_add_c_test(NAME quant_lower_decoder_${target} PROGRAM test_lower
      ARGS ${QF_TEST_WORK}/quantize/decoder/q_${target}.onnx 3 2 7 1
           qconv_transpose,qconcat,qavg_pool,qmul,qmean,qlinear_matmul,qadd
      FIXTURES_REQUIRED quantized_decoder LABELS quant TIMEOUT 60)
  endforeach()
endif()
