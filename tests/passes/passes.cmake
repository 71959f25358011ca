# Pass manager, canonicalize, dce and the `qfold fuse` / `qfold passes`
# commands (issue 3). The C unit tests build graphs with the IR API; the
# model tests export small torch models and compare `qfold run` of the
# original, `qfold run` of the fused file and ONNX Runtime on the fused file.
add_executable(test_pass_manager ${CMAKE_CURRENT_LIST_DIR}/test_pass_manager.c)
target_compile_options(test_pass_manager PRIVATE ${QF_WARNINGS})
target_include_directories(test_pass_manager PRIVATE ${QF_TEST_DIR})
target_link_libraries(test_pass_manager PRIVATE qfold_static m)
set(QF_PASSES_WORK "${QF_TEST_WORK}/passes")
file(MAKE_DIRECTORY "${QF_PASSES_WORK}")
add_test(NAME passes_manager COMMAND test_pass_manager)
set_tests_properties(passes_manager PROPERTIES LABELS "passes" TIMEOUT 60)

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
add_executable(test_rewrite ${CMAKE_CURRENT_SOURCE_DIR}/passes/test_rewrite.c)
target_compile_options(test_rewrite PRIVATE ${QF_WARNINGS})
target_include_directories(test_rewrite PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(test_rewrite PRIVATE qfold_static m)
add_test(NAME passes_rewrite COMMAND test_rewrite)
set_tests_properties(passes_rewrite PROPERTIES LABELS "passes" TIMEOUT 60)

# Constant folding (the fold_constants pass, also run by import).
add_executable(test_fold_constants ${CMAKE_CURRENT_LIST_DIR}/test_fold_constants.c)
target_compile_options(test_fold_constants PRIVATE ${QF_WARNINGS})
target_include_directories(test_fold_constants PRIVATE ${QF_TEST_DIR})
target_link_libraries(test_fold_constants PRIVATE qfold_static)
add_test(NAME passes_fold_constants COMMAND test_fold_constants)
set_tests_properties(passes_fold_constants PROPERTIES LABELS "passes" TIMEOUT 60)

# QAT's BatchNorm simulation: qat_bn_add then qat_bn_remove is the original,
# bit for bit; remove leaves what it did not make.
add_executable(test_qat_bn ${CMAKE_CURRENT_LIST_DIR}/test_qat_bn.c)
target_compile_options(test_qat_bn PRIVATE ${QF_WARNINGS})
target_include_directories(test_qat_bn PRIVATE ${QF_TEST_DIR})
target_link_libraries(test_qat_bn PRIVATE qfold_static m)
add_test(NAME passes_qat_bn COMMAND test_qat_bn)
set_tests_properties(passes_qat_bn PROPERTIES LABELS "passes;qat" TIMEOUT 60)
