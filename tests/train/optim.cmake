# Optimizers, schedules and clipping (src/train/optim.c, schedule.c): cases
# worked out by hand (C), and 20-step runs against torch.optim /
# torch.optim.lr_scheduler / clip_grad_norm_ on the same parameters and
# gradients (Python, through the qf_optim_run driver).
qf_add_c_test(NAME unit_optim SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_optim.c LIBS qf_test_tools
  LABELS unit train TIMEOUT 60)

qf_test_program(qf_optim_run SOURCES ${CMAKE_CURRENT_LIST_DIR}/qf_optim_run.c)
add_test(NAME torch_optim
  COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/optim_torch.py
          --tool $<TARGET_FILE:qf_optim_run> --work ${QF_TEST_WORK}/optim)
set_tests_properties(torch_optim PROPERTIES LABELS "ref;train" TIMEOUT 300)
