# qfold qat: the library (qfold/qat.h: the qat_prepare pipeline with the
# quantizer's pass quant_qat_insert, calibration, the --freeze-bn /
# --freeze-observers schedules, bad BatchNorms; tests/train/test_qat.c) and
# the command end to end (tests/train/qat_cli_test.py: Conv+BN, depthwise
# Conv+BN and Linear+BN1d to an int8 QDQ model that ONNX Runtime runs,
# --keep-qat, the schedules against PyTorch 1.13's freeze_bn_stats /
# disable_observer, every bad input).
qf_add_c_test(NAME unit_qat SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_qat.c LABELS unit train qat TIMEOUT 120)

if(QF_PYTHON3 AND QF_NODE)
  # bn_reestimate_fashion (accuracy on a Fashion-MNIST slice, four qat runs)
  # in the first pass only, as the other accuracy-on-real-data tests: under
  # the sanitizers it took 36 s; bn_reestimate runs the same code there.
  set(qf_qat_cli_cases int8 keep_qat torch_schedules exact bn_reestimate help errors example)
  if(NOT QF_SANITIZE)
    list(APPEND qf_qat_cli_cases bn_reestimate_fashion)
  endif()
  foreach(case ${qf_qat_cli_cases})
    add_test(NAME qat_cli_${case}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/qat_cli_test.py --qfold $<TARGET_FILE:qfold>
              --root ${PROJECT_SOURCE_DIR} --work ${QF_TEST_WORK}/qat_cli ${case})
    set_tests_properties(qat_cli_${case} PROPERTIES LABELS "train;cli;qat" TIMEOUT 300)
  endforeach()
endif()
