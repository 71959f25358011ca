# The end of QAT: the BatchNorm fold through the weight fake_quant,
# qat_convert (fake_quants to QDQ) and qat_export (PyTorch's exported form).
qf_add_c_test(NAME quant_qat_convert SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_qat_convert.c INTERNAL
  LABELS quant qat TIMEOUT 60)

# Against PyTorch 1.13's QAT modules and convert, and ONNX Runtime on both
# files written (qat_convert_torch.py through the qat_state_tool loader).
qf_test_program(qat_state_tool SOURCES ${CMAKE_CURRENT_LIST_DIR}/qat_state_tool.c)
if(QF_PYTHON3 AND QF_NODE)
  foreach(case convbn_obs1 convbn_nobias_obs1 convbn_obs0 convbn_w128_obs1 convtbn linearbn_obs1 linearbn_obs0
               linearbn_w128_obs0)
    add_test(NAME quant_qat_convert_torch_${case}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/qat_convert_torch.py --qfold $<TARGET_FILE:qat_state_tool>
              --root ${PROJECT_SOURCE_DIR} --work ${QF_TEST_WORK}/qat_convert_torch ${case})
    set_tests_properties(quant_qat_convert_torch_${case} PROPERTIES LABELS "quant;qat;ref" TIMEOUT 300)
  endforeach()
endif()
