# The placement in the deployment report and the placement sweep (issue 30,
# item 5 and "how it is checked"): the merge of a TFLite result and a check
# result written by hand (test_deploy_report.c: each op placed as its node,
# the padded MACs of a node written as several ops, an op with no node, the
# sums, the summary line); `export --target neutron --report` on a
# model with an NPU op and a CPU op (deploy_report_test.py: the report's
# per-op placement, its MAC sums, the summary line, and the report without
# --target unchanged); `qfold check` on the bundled examples through
# placement_sweep.py (every CPU node explained by a rule). The full sweep
# over the torchvision models is `make placement` (docs/NEUTRON_PLACEMENT.md).
qf_add_c_test(NAME target_deploy_report SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_deploy_report.c LABELS target
              TIMEOUT 60)
if(QF_PYTHON3)
  foreach(case placement unchanged)
    add_test(NAME target_report_${case}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/deploy_report_test.py --qfold $<TARGET_FILE:qfold>
              --work ${QF_TEST_WORK}/target_report ${case})
    set_tests_properties(target_report_${case} PROPERTIES LABELS "target" TIMEOUT 120 SKIP_RETURN_CODE 77)
  endforeach()
  add_test(NAME target_placement_examples
    COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/placement_sweep.py $<TARGET_FILE:qfold> --examples-only
            --work ${QF_TEST_WORK}/placement_examples --out ${QF_TEST_WORK}/placement_examples/table.md)
  set_tests_properties(target_placement_examples PROPERTIES LABELS "target" TIMEOUT 300)
endif()
