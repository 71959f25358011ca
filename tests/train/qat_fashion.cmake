# qfold qat against PyTorch 1.13 FX QAT on Fashion-MNIST
# (tests/train/qat_fashion_test.py, its PyTorch side tests/ref/fx_qat.py): the
# bundled CNN (Conv+BN, depthwise Conv+BN, Linear+BN1d) fine-tuned with
# fake-quantization on 4,000 training images for three batch orders, the int8
# models evaluated on 5,000 test images by qfold and ONNX Runtime: means not
# below qfold's PTQ or PyTorch's QAT beyond chance, within 0.5 point of float.
# Not in the sanitizer build: it compares accuracies, which depend on the
# engine's rounding (the sanitizer build runs the reference kernels, where one
# of the three batch orders drifts to 0.7 point below the others: 63 steps of
# fake-quantized SGD amplify summation-order differences), and the integer
# executor takes minutes per run under ASan. Its code paths (prepare,
# calibration, schedules, finalize, the int8 run) run under the sanitizers in
# unit_qat, qat_cli_* and torch_qat_fusion.
if(QF_PYTHON3 AND QF_NODE AND NOT QF_SANITIZE)
  add_test(NAME train_qat_fashion
    COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/qat_fashion_test.py --qfold $<TARGET_FILE:qfold>
            --root ${PROJECT_SOURCE_DIR} --work ${QF_TEST_WORK}/qat_fashion)
  set_tests_properties(train_qat_fashion PROPERTIES LABELS "train;qat;ref" TIMEOUT 900)
  # The same with the head reparametrized (fx_qat.py --skew 8, the float
  # function unchanged): PTQ without equalization loses ~1.8 point there,
  # qfold's default PTQ (equalize=auto) must win back a quarter of PyTorch
  # PTQ's loss, QAT >= 0.8 over PTQ without equalization and within 0.5 of
  # float (measured: +1.4 qfold, +0.9 PyTorch, 0.34 under float; means of
  # three batch orders).
  add_test(NAME train_qat_fashion_skew
    COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/qat_fashion_test.py --qfold $<TARGET_FILE:qfold>
            --root ${PROJECT_SOURCE_DIR} --work ${QF_TEST_WORK}/qat_fashion_skew --skew 8 --gain 0.8
            --float-margin 0.5)
  set_tests_properties(train_qat_fashion_skew PROPERTIES LABELS "train;qat;ref" TIMEOUT 900)
endif()
