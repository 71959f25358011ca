# The deployment target check (src/target/): the engine of `qfold check` on
# graphs built in C with the test's own rule rows (test_target_check.c), and
# the CLI on PyTorch-made and bundled models (check_test.py).
qf_add_c_test(NAME target_check_unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_target_check.c INTERNAL
              LABELS target TIMEOUT 60)

