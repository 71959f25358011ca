# The op table and schema: every op has its rows and required columns.
add_executable(test_op_table ${CMAKE_CURRENT_LIST_DIR}/test_op_table.c)
target_compile_options(test_op_table PRIVATE ${QF_WARNINGS})
target_include_directories(test_op_table PRIVATE ${QF_TEST_DIR} ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(test_op_table PRIVATE qfold_static)
add_test(NAME unit_op_table COMMAND test_op_table)
set_tests_properties(unit_op_table PROPERTIES LABELS "unit" TIMEOUT 60)

# The made-up op: a variant of the library built with QF_TEST_EXTRA_OPS, whose
# op list gains its schema rows (extra_op/qf_test_extra_ops.h), whose op
# table its kernel files (extra_op/*.c but the tests: square_plus.c, the
# float op; square_plus_int8.c, its int8 op and lowering entry) and whose
# quantization table its rows (extra_op/qf_test_extra_quant.h). Nothing else
# in the tree names the op: test_extra_op runs it on a one-node graph,
# test_extra_op_int8 quantizes, lowers and runs it in int8, and
# test_op_table and test_op_quant walk this variant's tables too. Not in the sanitizer build: the variant
# compiles the whole library a second time (a third of that build's time) to
# check what the compiler checks, that one schema row and one kernel file add
# an op; the sanitizers have nothing to add to that. Compiled at -O0: the
# tests run one tiny graph and walk the table, and the same sources' -O2
# warnings come from qfold_obj; -O0 compiles them ~3x faster (24 sources of
# src/ops and src/passes: 4.8 CPU s at -O0 -g, 15.8 at -O2 -g), the largest
# part of the first build's time after the library itself.
if(NOT QF_SANITIZE)
  file(GLOB QF_EXTRA_OP_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/extra_op/*.c)
  list(FILTER QF_EXTRA_OP_SOURCES EXCLUDE REGEX "/test_[^/]*\\.c$")
  add_library(qfold_extra_ops STATIC ${QF_LIB_SOURCES} ${QF_EXTRA_OP_SOURCES} $<TARGET_OBJECTS:qfold_pb>)
  target_include_directories(qfold_extra_ops
    PUBLIC ${CMAKE_SOURCE_DIR}/include ${CMAKE_CURRENT_LIST_DIR}/extra_op
    PRIVATE ${CMAKE_SOURCE_DIR}/src ${QF_GEN_DIR})
  target_compile_definitions(qfold_extra_ops PUBLIC QF_TEST_EXTRA_OPS PRIVATE QF_VERSION="${PROJECT_VERSION}")
  target_compile_options(qfold_extra_ops PRIVATE ${QF_WARNINGS} -O0)
  target_link_libraries(qfold_extra_ops PUBLIC ${QF_LINK_LIBS})
  add_dependencies(qfold_extra_ops qfold_pb)

  add_executable(test_extra_op ${CMAKE_CURRENT_LIST_DIR}/extra_op/test_extra_op.c)
  target_include_directories(test_extra_op PRIVATE ${QF_TEST_DIR})
  target_compile_options(test_extra_op PRIVATE ${QF_WARNINGS})
  target_link_libraries(test_extra_op PRIVATE qfold_extra_ops)
  add_test(NAME unit_extra_op COMMAND test_extra_op)
  set_tests_properties(unit_extra_op PROPERTIES LABELS "unit" TIMEOUT 60)

  add_executable(test_extra_op_int8 ${CMAKE_CURRENT_LIST_DIR}/extra_op/test_extra_op_int8.c)
  target_include_directories(test_extra_op_int8 PRIVATE ${QF_TEST_DIR})
  target_compile_options(test_extra_op_int8 PRIVATE ${QF_WARNINGS})
  target_link_libraries(test_extra_op_int8 PRIVATE qfold_extra_ops)
  add_test(NAME unit_extra_op_int8 COMMAND test_extra_op_int8)
  set_tests_properties(unit_extra_op_int8 PROPERTIES LABELS "unit" TIMEOUT 60)

  add_executable(test_op_quant_extra ${CMAKE_SOURCE_DIR}/tests/quant/test_op_quant.c)
  target_include_directories(test_op_quant_extra PRIVATE ${QF_TEST_DIR} ${CMAKE_SOURCE_DIR}/src)
  target_compile_options(test_op_quant_extra PRIVATE ${QF_WARNINGS})
  target_link_libraries(test_op_quant_extra PRIVATE qfold_extra_ops)
  add_test(NAME unit_op_quant_extra COMMAND test_op_quant_extra)
  set_tests_properties(unit_op_quant_extra PROPERTIES LABELS "unit" TIMEOUT 60)

  add_executable(test_op_table_extra ${CMAKE_CURRENT_LIST_DIR}/test_op_table.c)
  target_include_directories(test_op_table_extra PRIVATE ${QF_TEST_DIR} ${CMAKE_SOURCE_DIR}/src)
  target_compile_options(test_op_table_extra PRIVATE ${QF_WARNINGS})
  target_link_libraries(test_op_table_extra PRIVATE qfold_extra_ops)
  add_test(NAME unit_op_table_extra COMMAND test_op_table_extra)
  set_tests_properties(unit_op_table_extra PROPERTIES LABELS "unit" TIMEOUT 60)
endif()
