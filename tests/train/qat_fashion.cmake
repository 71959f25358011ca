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
  # PTQ's loss, QAT >= 0.8 over PTQ without equalization, not below qfold's
  # PTQ and within 0.3 of float (issue 31's bar for QAT with BatchNorm
  # re-estimation). equalize=auto keeps `all` there (it used to keep
  # per-tensor): qfold PTQ 88.64 %, float 88.80 %. QAT with --bn-reestimate
  # 4000 (the training images): 88.80 / 88.78 / 88.78 %; without it
  # 88.54 / 88.40 / 88.60 %, below that PTQ (PyTorch FX QAT 88.42 / 87.92 /
  # 87.38 %).
  add_test(NAME train_qat_fashion_skew
    COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/qat_fashion_test.py --qfold $<TARGET_FILE:qfold>
            --root ${PROJECT_SOURCE_DIR} --work ${QF_TEST_WORK}/qat_fashion_skew --skew 8 --gain 0.8
            --float-margin 0.3 --qat-arg=--bn-reestimate --qat-arg=4000)
  set_tests_properties(train_qat_fashion_skew PROPERTIES LABELS "train;qat;ref" TIMEOUT 900)
  # The hard depthwise-separable model of issue 10 (fx_qat.py --spread 8: the
  # blocks' channel ranges spread apart by up to 8x either way, float
  # unchanged): PyTorch's PTQ loses more than two points (86.58 %, float
  # 88.80 %); qfold's default equalize=auto keeps `all` there (output SQNR
  # +12.6 dB: the per-channel pairs balanced before calibration / training),
  # PTQ 88.58 % (86.14 % with equalize=off). qfold qat with its defaults, the
  # recipe at lr 1e-4 (at 3e-4 the BatchNorm freeze costs both sides: a
  # frozen BN scales the step on W * s by s^2, and the spread makes s up to
  # 8x larger; PyTorch ~82 %): measured 88.66 / 88.74 / 88.50 %, PyTorch FX
  # QAT 87.10 / 87.32 / 86.86 %. The test wants both PTQs of the spread
  # model without equalization to lose more than a point, qfold's QAT mean
  # >= its PTQ with equalization off + 1.5 points, >= its default PTQ - 0.1,
  # >= PyTorch's - 0.2 and within 0.3 point of float (issue 10's bar;
  # measured 0.17, three seeds within 0.24 of each other).
  add_test(NAME train_qat_fashion_spread
    COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/qat_fashion_test.py --qfold $<TARGET_FILE:qfold>
            --root ${PROJECT_SOURCE_DIR} --work ${QF_TEST_WORK}/qat_fashion_spread --spread 8 --lr 0.0001
            --gain 1.5 --float-margin 0.3)
  set_tests_properties(train_qat_fashion_spread PROPERTIES LABELS "train;qat;ref" TIMEOUT 900)
endif()
