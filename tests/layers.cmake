# The include-order check (docs/ARCHITECTURE.md, "Layers"): every
# #include "..." in src/ and include/qfold/ goes to the includer's layer or
# one below it (core < ir < ops < backend < exec < passes < {quant, train} < io < tflite < cli),
# quant and train never include each other, and a layer's private headers
# stay in that layer. The self-test runs the script on a fake tree with one
# violation of each kind, so the check cannot pass by finding nothing.
add_test(NAME unit_layers COMMAND ${QF_PYTHON3} ${CMAKE_SOURCE_DIR}/scripts/check_layers.py ${CMAKE_SOURCE_DIR})
add_test(NAME unit_layers_self_test COMMAND ${QF_PYTHON3} ${CMAKE_SOURCE_DIR}/scripts/check_layers.py --self-test)
set_tests_properties(unit_layers unit_layers_self_test PROPERTIES LABELS "unit" TIMEOUT 60)

# The file-level cycle check (scripts/check_layers.py --cycles): no two files
# of the library or the CLI depend on each other, directly or around a longer
# circle, where a file depends on another when it uses a function or global
# the other defines (nm on the objects the build made, listed here by CMake).
file(GENERATE OUTPUT "${CMAKE_CURRENT_BINARY_DIR}/qf_cycle_objects.txt"
     CONTENT "$<JOIN:$<TARGET_OBJECTS:qfold_obj>;$<TARGET_OBJECTS:qfold_tflite_cxx>;$<TARGET_OBJECTS:qfold>,\n>\n")
add_test(NAME unit_file_cycles
  COMMAND ${QF_PYTHON3} ${CMAKE_SOURCE_DIR}/scripts/check_layers.py --cycles ${CMAKE_CURRENT_BINARY_DIR}/qf_cycle_objects.txt)
set_tests_properties(unit_file_cycles PROPERTIES LABELS "unit" TIMEOUT 60)
