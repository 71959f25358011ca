# qfold train end to end (tests/train/train_cli_test.py): 20-step parity with
# PyTorch 1.13 (SGD with momentum and weight decay, Adam) on a small CNN with
# BatchNorm, the Fashion-MNIST CNN from scratch on a slice against the same
# recipe in PyTorch, and the command line: seeded determinism, --shuffle off,
# --freeze, the CSV log and SVG plot, Ctrl-C, ONNX Runtime on the written
# models, every bad input.
# train_cli_fashion is not in the sanitizer build: it compares accuracies
# after 2 epochs, which depend on the engine's rounding (the sanitizer build
# runs the reference kernels), and it took a minute there (3 seeds of
# `qfold train` on 3,000 images under ASan). Its code paths (`qfold train`,
# `qfold eval`, the Fashion-MNIST CNN's ops) run under the sanitizers in the
# parity, fresh, determinism, freeze and ort cases and in qat_cli_*.
if(QF_PYTHON3 AND QF_NODE)
  set(QF_TRAIN_CLI_CASES parity_sgd parity_adam fresh determinism freeze log_plot progress sigint ort errors diverged)
  if(NOT QF_SANITIZE)
    list(APPEND QF_TRAIN_CLI_CASES fashion)
  endif()
  foreach(case ${QF_TRAIN_CLI_CASES})
    add_test(NAME train_cli_${case}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/train_cli_test.py --qfold $<TARGET_FILE:qfold>
              --root ${PROJECT_SOURCE_DIR} --work ${QF_TEST_WORK}/train_cli ${case})
    set_tests_properties(train_cli_${case} PROPERTIES LABELS "train;cli" TIMEOUT 600)
  endforeach()
endif()
