# Optimizers, schedules and clipping (src/train/optim.c, schedule.c): cases
# worked out by hand (C), and 20-step runs against torch.optim /
# torch.optim.lr_scheduler / clip_grad_norm_ on the same parameters and
# gradients (Python, through the qf_optim_run driver).
add_executable(test_optim ${CMAKE_CURRENT_LIST_DIR}/test_optim.c)
target_compile_options(test_optim PRIVATE ${QF_WARNINGS})
target_link_libraries(test_optim PRIVATE qf_test_tools)
add_test(NAME unit_optim COMMAND test_optim)
set_tests_properties(unit_optim PROPERTIES LABELS "unit;train" TIMEOUT 60)
