# The op table and schema: every op has its rows and required columns.
qf_add_c_test(NAME unit_op_table SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_op_table.c INTERNAL LABELS unit TIMEOUT 60)

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
  add_library(qfold_extra_ops STATIC ${QF_LIB_SOURCES_NO_DNNL} ${QF_EXTRA_OP_SOURCES}
              $<TARGET_OBJECTS:qfold_pb> $<TARGET_OBJECTS:qfold_tflite_cxx>)
  target_include_directories(qfold_extra_ops
    PUBLIC ${CMAKE_SOURCE_DIR}/include ${CMAKE_CURRENT_LIST_DIR}/extra_op
    PRIVATE ${CMAKE_SOURCE_DIR}/src ${QF_GEN_DIR})
  target_compile_definitions(qfold_extra_ops PUBLIC QF_TEST_EXTRA_OPS PRIVATE QF_VERSION="${PROJECT_VERSION}")
  target_compile_options(qfold_extra_ops PRIVATE ${QF_WARNINGS} -O0)
  target_link_libraries(qfold_extra_ops PUBLIC ${QF_LINK_LIBS})
  add_dependencies(qfold_extra_ops qfold_pb)

  qf_add_c_test(NAME unit_extra_op SOURCES ${CMAKE_CURRENT_LIST_DIR}/extra_op/test_extra_op.c
    LIBS qfold_extra_ops LABELS unit TIMEOUT 60)
  qf_add_c_test(NAME unit_op_table_extra SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_op_table.c
    PROGRAM test_op_table_extra INTERNAL LIBS qfold_extra_ops LABELS unit TIMEOUT 60)

  # Its TFLite mapping (one row, QF_EXTRA_TFLITE_ROWS, and one emitter,
  # extra_op/square_plus_tflite.c): the C test exports DQ -> SquarePlus -> Q
  # and checks the report; the script reads the file back with the schema's
  # Python reader (a CUSTOM operator "SquarePlus", its tensors and options).
  qf_test_program(test_extra_op_tflite SOURCES ${CMAKE_CURRENT_LIST_DIR}/extra_op/test_extra_op_tflite.c
    LIBS qfold_extra_ops)
  if(QF_PYTHON3)
    add_dependencies(test_extra_op_tflite qfold_tflite_py)
    add_test(NAME unit_extra_op_tflite
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/extra_op/square_plus_tflite_test.py
              --exe $<TARGET_FILE:test_extra_op_tflite> --reader ${CMAKE_BINARY_DIR}/gen/tflite_py
              --work ${QF_TEST_WORK}/extra_op_tflite)
    set_tests_properties(unit_extra_op_tflite PROPERTIES LABELS "unit;tflite" TIMEOUT 60 SKIP_RETURN_CODE 77)
  endif()

  # Its int8 form (extra_op/square_plus_int8.c, rows in qf_test_extra_quant.h):
  # quantized, lowered to qsquare_plus and run exactly; the quant rows of this
  # build walked as the library's.
  qf_add_c_test(NAME unit_extra_op_int8 SOURCES ${CMAKE_CURRENT_LIST_DIR}/extra_op/test_extra_op_int8.c
    LIBS qfold_extra_ops LABELS unit TIMEOUT 60)
  qf_add_c_test(NAME unit_op_quant_extra SOURCES ${CMAKE_SOURCE_DIR}/tests/quant/test_op_quant.c
    PROGRAM test_op_quant_extra INTERNAL LIBS qfold_extra_ops LABELS unit TIMEOUT 60)
endif()
