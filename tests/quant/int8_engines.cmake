# The integer executor on oneDNN against the reference integer kernels, end
# to end on the quantized Fashion-MNIST CNN (int8_engines.py).
if(QF_PYTHON3 AND QF_HAVE_DNNL)
  foreach(case onnx tflite fast models)
    add_test(NAME quant_int8_engines_${case}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/int8_engines.py --qfold $<TARGET_FILE:qfold>
              --root ${PROJECT_SOURCE_DIR} --work ${QF_TEST_WORK}/int8_engines ${case})
    set_tests_properties(quant_int8_engines_${case} PROPERTIES LABELS "quant;dnnl" TIMEOUT 300)
  endforeach()
endif()
