# `qfold run` on the oneDNN kernels against the reference kernels (1e-5
# relative), on every model of make_models.py, as exported and fused.
add_test(NAME engine_parity
  COMMAND ${QF_PYTHON3} ${QF_TEST_DIR}/ref/engine_parity.py $<TARGET_FILE:qfold> ${QF_REF_MODELS}
          ${QF_REF_SMALL} ${QF_REF_BIG})
set_tests_properties(engine_parity PROPERTIES FIXTURES_REQUIRED ref_models LABELS "ref;dnnl" TIMEOUT 300)
