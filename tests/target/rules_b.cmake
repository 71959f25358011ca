# The Neutron rules of the element-wise, activation and shape ops and the
# partition rules (src/target/neutron_binary.c, neutron_act.c,
# neutron_shape.c): small QDQ models just inside / just outside each limit,
# both rule generations, through `qfold check --json` (rules_b_test.py: one
# Python process, a few seconds).
if(QF_PYTHON3)
  add_test(NAME target_rules_b
    COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/rules_b_test.py --qfold $<TARGET_FILE:qfold>
            --work ${QF_TEST_WORK}/target_rules_b)
  set_tests_properties(target_rules_b PROPERTIES LABELS "target" TIMEOUT 120 SKIP_RETURN_CODE 77)
endif()
