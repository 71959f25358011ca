# Optimizers, schedules and clipping (src/train/optim.c, schedule.c): cases
# worked out by hand (C), and 20-step runs against torch.optim /
# torch.optim.lr_scheduler / clip_grad_norm_ on the same parameters and
# gradients (Python, through the qf_optim_run driver).
add_executable(test_optim ${CMAKE_CURRENT_LIST_DIR}/test_optim.c)
target_compile_options(test_optim PRIVATE ${QF_WARNINGS})
target_link_libraries(test_optim PRIVATE qf_test_tools)
add_test(NAME unit_optim COMMAND test_optim)
set_tests_properties(unit_optim PROPERTIES LABELS "unit;train" TIMEOUT 60)

add_executable(qf_optim_run ${CMAKE_CURRENT_LIST_DIR}/qf_optim_run.c)
target_compile_options(qf_optim_run PRIVATE ${QF_WARNINGS})
target_link_libraries(qf_optim_run PRIVATE qfold_static)
add_test(NAME torch_optim
  COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/optim_torch.py
          --tool $<TARGET_FILE:qf_optim_run> --work ${QF_TEST_WORK}/optim)
set_tests_properties(torch_optim PROPERTIES LABELS "ref;train" TIMEOUT 300)
