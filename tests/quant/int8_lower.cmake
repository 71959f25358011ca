# The integer executor's ConvTranspose, MatMul, Mul, AveragePool,
# GlobalAveragePool, ReduceMean and Concat groups: lowered (or not), against a
# direct integer reference and the float simulation (test_lower_ops.c); run
# on both engines (the reference kernels under QFOLD_ENGINE=ref).
add_executable(test_lower_ops ${CMAKE_CURRENT_LIST_DIR}/test_lower_ops.c)
target_include_directories(test_lower_ops PRIVATE ${QF_TEST_DIR} ${CMAKE_SOURCE_DIR}/src)
target_compile_options(test_lower_ops PRIVATE ${QF_WARNINGS})
target_link_libraries(test_lower_ops PRIVATE qfold_static m)
add_test(NAME quant_lower_ops COMMAND test_lower_ops)
set_tests_properties(quant_lower_ops PROPERTIES LABELS "quant" TIMEOUT 60)
add_test(NAME quant_lower_ops_ref COMMAND test_lower_ops)
set_tests_properties(quant_lower_ops_ref PROPERTIES LABELS "quant" TIMEOUT 60 ENVIRONMENT "QFOLD_ENGINE=ref")

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
    add_test(NAME quant_lower_decoder_${target}
      COMMAND test_lower ${QF_TEST_WORK}/quantize/decoder/q_${target}.onnx 3 2 7 1
              qconv_transpose,qconcat,qavg_pool,qmul,qmean,qlinear_matmul,qadd)
    set_tests_properties(quant_lower_decoder_${target} PROPERTIES FIXTURES_REQUIRED quantized_decoder
                         LABELS "quant" TIMEOUT 60)
  endforeach()
endif()
