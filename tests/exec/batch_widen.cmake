# A fixed batch size widened (src/exec/batch_widen.c): the ops' rules, the
# shapes' check, the Reshape [1, -1] rewrite put back, the batcher's runs.
qf_add_c_test(NAME exec_batch_widen SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_batch_widen.c LABELS exec TIMEOUT 60)
