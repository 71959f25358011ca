# The include-order check (docs/ARCHITECTURE.md, "Layers"): every
# #include "..." in src/ and include/qfold/ goes to the includer's layer or
# one below it (core < ir < ops < exec < passes < {quant, train} < io < tflite < cli),
# quant and train never include each other, and a layer's private headers
# stay in that layer. The self-test runs the script on a fake tree with one
# violation of each kind, so the check cannot pass by finding nothing.
add_test(NAME unit_layers COMMAND ${QF_PYTHON3} ${CMAKE_SOURCE_DIR}/scripts/check_layers.py ${CMAKE_SOURCE_DIR})
add_test(NAME unit_layers_self_test COMMAND ${QF_PYTHON3} ${CMAKE_SOURCE_DIR}/scripts/check_layers.py --self-test)
set_tests_properties(unit_layers unit_layers_self_test PROPERTIES LABELS "unit" TIMEOUT 60)
