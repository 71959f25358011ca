# The equalize pass (cross-layer equalization, src/quant/equalize.c): the
# function kept (ONNX Runtime on the written model), the pairs balanced, the
# chains it must leave alone left alone, the same through a kept BatchNorm (as
# qat_prepare runs it), the profile rule of qfold quantize (auto by default:
# the best measured rule that clears its margin kept, auto_all; a better
# measured one that misses it named, auto_refused).
if(QF_PYTHON3 AND QF_NODE)
  foreach(case function batchnorm quantize auto_all auto_refused)
    add_test(NAME quant_equalize_${case}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/equalize_test.py --qfold $<TARGET_FILE:qfold>
              --root ${PROJECT_SOURCE_DIR} --work ${QF_TEST_WORK}/equalize ${case})
    set_tests_properties(quant_equalize_${case} PROPERTIES LABELS "quant;ref" TIMEOUT 300)
  endforeach()
endif()
