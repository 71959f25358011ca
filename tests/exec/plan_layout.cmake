# The plan's layout planning and post-op fusion (src/exec/plan_layout.c): layouts,
# reorders and fused nodes on small graphs, outputs and hooks against the
# reference engine's plan.
qf_add_c_test(NAME exec_plan_layout SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_plan_layout.c INTERNAL
  LABELS exec TIMEOUT 120)

# The plans of two torch reference models (tests/ref.cmake's fixture) under
# the oneDNN backend (NHWC with one reorder, or blocked with none; post-ops), and `qfold run`
# with them against the reference kernels, BatchNorm kept and fused.
# Only in builds with oneDNN (a build without it has no backend plan to check).
if(QF_HAVE_DNNL)
foreach(m resnet18 mobilenet_v2)
  add_test(NAME exec_engine_parity_${m}
    COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/engine_parity.py $<TARGET_FILE:qfold> ${QF_TEST_WORK}/models ${m}
            ${QF_TEST_WORK}/engine_parity)
  set_tests_properties(exec_engine_parity_${m} PROPERTIES FIXTURES_REQUIRED ref_models LABELS "exec"
                       TIMEOUT 300 SKIP_RETURN_CODE 77)
endforeach()
endif()
# Its skip decision on stand-ins for qfold: only the documented refusal of
# `--engine dnnl` is a skip; a crash or another exit status fails.
add_test(NAME exec_engine_parity_self_test
  COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/engine_parity.py --self-test ${QF_TEST_WORK}/engine_parity_self_test)
set_tests_properties(exec_engine_parity_self_test PROPERTIES LABELS "exec" TIMEOUT 60)
