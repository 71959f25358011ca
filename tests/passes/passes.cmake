# Pass manager, canonicalize, dce and the `qfold fuse` / `qfold passes`
# commands (issue 3). The C unit tests build graphs with the IR API; the
# model tests export small torch models and compare `qfold run` of the
# original, `qfold run` of the fused file and ONNX Runtime on the fused file.
set(QF_PASSES_WORK "${QF_TEST_WORK}/passes")
file(MAKE_DIRECTORY "${QF_PASSES_WORK}")
qf_add_c_test(NAME passes_manager SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_pass_manager.c LABELS passes TIMEOUT 60)

# Model and command-line tests (Python drives qfold, ONNX Runtime and torch).
set(QF_PASSES_CASES linear2d linear3d relu6 gemm_attrs passthru cli_verify_fail cli_same_path cli_usage cli_passes)
if(QF_NODE)
  foreach(c ${QF_PASSES_CASES})
    add_test(NAME passes_${c}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/fuse_models.py $<TARGET_FILE:qfold> ${QF_NODE}
              ${QF_TEST_DIR}/ref/ort_run.js ${QF_PASSES_WORK}/${c} ${c})
    set_tests_properties(passes_${c} PROPERTIES LABELS "passes" TIMEOUT 180)
  endforeach()
endif()

# The shared node walk, rewrite actions and the helpers of src/passes/rewrite.h.
qf_add_c_test(NAME passes_rewrite SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_rewrite.c INTERNAL LABELS passes TIMEOUT 60)

# Constant folding (the fold_constants pass, also run by import).
qf_add_c_test(NAME passes_fold_constants SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_fold_constants.c
  LABELS passes TIMEOUT 60)

# QAT's BatchNorm simulation: qat_bn_add then qat_bn_remove is the original,
# bit for bit; remove leaves what it did not make.
qf_add_c_test(NAME passes_qat_bn SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_qat_bn.c LABELS passes qat TIMEOUT 60)

# fuse_hard_swish: torch's opset-13 x * HardSigmoid(x) as one HardSwish, the
# same floats; each guard leaves the pair with a skip naming why.
qf_add_c_test(NAME passes_fuse_hard_swish SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_fuse_hard_swish.c LABELS passes
  TIMEOUT 60)
qf_add_c_test(NAME passes_fuse_hard_swish_ref PROGRAM test_fuse_hard_swish LABELS passes TIMEOUT 60
  ENVIRONMENT QFOLD_ENGINE=ref)

# The Neutron-ready passes (div_to_mul, fuse_linear_add, move_act_before_concat,
# split_group_conv_qdq, fold_dq_q) on IR-built graphs: report counts, skip
# reasons, the same floats (bit for bit where claimed) and, for the QDQ
# passes, the same integers on the int8 executor.
qf_add_c_test(NAME passes_neutron SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_neutron_passes.c LABELS passes neutron
  TIMEOUT 60)
qf_add_c_test(NAME passes_neutron_ref PROGRAM test_neutron_passes LABELS passes neutron TIMEOUT 60
  ENVIRONMENT QFOLD_ENGINE=ref)
# ... and on a PyTorch model through fuse, quantize (on / off / generic), qat,
# finalize and export --target neutron: floats unchanged, integers bit-identical.
if(QF_NODE)
  foreach(c float quantize export qat)
    add_test(NAME passes_neutron_${c}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/neutron_models.py $<TARGET_FILE:qfold> ${QF_NODE}
              ${QF_TEST_DIR}/ref/ort_run.js ${QF_PASSES_WORK}/neutron_${c} ${c})
    set_tests_properties(passes_neutron_${c} PROPERTIES LABELS "passes;neutron" TIMEOUT 180 SKIP_RETURN_CODE 77)
  endforeach()
endif()
