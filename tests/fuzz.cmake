# The fuzz targets (fuzz/) without libFuzzer: fuzz/replay.c runs each
# target's LLVMFuzzerTestOneInput once on every seed (fuzz/seeds: the
# reproducers of earlier findings; the examples; the reference models of the
# ref_models fixture), built with the ordinary compiler. Both passes of `make
# test`, the second under ASan + UBSan: the targets' code cannot rot and the
# seeds keep the bad-input contract (a status and a message, no crash, no
# leak through the capped allocation hook). Mutation is `make fuzz`'s (clang
# and libFuzzer, fuzz/run.sh; its 10-s-per-target smoke run was in `make
# test` until session 20: its clang build of the library cost ~3.5 minutes
# of the 2-core CI's 20).
foreach(t onnx npy)
  add_executable(fuzz_replay_${t} ${PROJECT_SOURCE_DIR}/fuzz/fuzz_${t}.c ${PROJECT_SOURCE_DIR}/fuzz/replay.c)
  target_compile_options(fuzz_replay_${t} PRIVATE ${QF_WARNINGS})
  target_include_directories(fuzz_replay_${t} PRIVATE ${PROJECT_SOURCE_DIR}/fuzz)
  target_link_libraries(fuzz_replay_${t} PRIVATE qfold_static)
endforeach()
add_test(NAME fuzz_replay_onnx
  COMMAND fuzz_replay_onnx --suffix .onnx --max-bytes 65536 ${PROJECT_SOURCE_DIR}/fuzz/seeds
          ${PROJECT_SOURCE_DIR}/examples ${QF_TEST_WORK}/models)
add_test(NAME fuzz_replay_npy
  COMMAND fuzz_replay_npy --suffix .npy --max-bytes 16384 ${PROJECT_SOURCE_DIR}/fuzz/seeds
          ${PROJECT_SOURCE_DIR}/examples ${QF_TEST_WORK}/models)
set_tests_properties(fuzz_replay_onnx fuzz_replay_npy PROPERTIES LABELS "fuzz" TIMEOUT 300
  SKIP_RETURN_CODE 77 FIXTURES_REQUIRED ref_models)
