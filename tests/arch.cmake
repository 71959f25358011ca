# Extra architectures end to end (issues 2 and 3, "how it will be checked"):
# a few cheap torchvision models beyond resnet18 / mobilenet_v2, each built
# with random BN statistics, exported with BN kept, then `qfold run` vs
# PyTorch, `qfold fuse` (every BN after a foldable producer gone, onnx.checker)
# and ONNX Runtime on the fused file vs PyTorch. The full sweep over every
# torchvision classifier is the manual tool tests/ref/arch_sweep.py.
set(QF_ARCH_MODELS efficientnet_b0 shufflenet_v2_x0_5 regnet_x_400mf mobilenet_v3_small convnext_tiny)
if(QF_NODE)
  set(QF_ARCH_ORT --node ${QF_NODE})
else()
  set(QF_ARCH_ORT --no-ort)
endif()
foreach(m ${QF_ARCH_MODELS})
  add_test(NAME arch_${m}
    COMMAND ${QF_PYTHON3} ${QF_TEST_DIR}/ref/arch_sweep.py $<TARGET_FILE:qfold> ${m} --strict
            --work ${QF_TEST_WORK}/arch ${QF_ARCH_ORT})
  set_tests_properties(arch_${m} PROPERTIES LABELS "ref;arch" TIMEOUT 300)
endforeach()
