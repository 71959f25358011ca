# The Python package (python/qfold) against the CLI: every function's models,
# arrays and reports equal to what build/qfold writes for the same inputs,
# the error mapping, ownership (arrays outlive their model), batches of
# different sizes, the ABI mirror against the headers (abi_layout), a venv
# install from `pip install ./python`, and the example script
# (examples/python/quickstart.py).
# The sanitizer pass loads the sanitized libqfold.so into Debian's python3,
# which needs ASan's runtime first in the process (LD_PRELOAD); the
# interpreter's own allocations at exit are not qfold's, so LeakSanitizer is
# off for this test (ASan and UBSan stay on).
qf_test_program(abi_layout SOURCES ${CMAKE_CURRENT_LIST_DIR}/abi_layout.c)
if(QF_PYTHON3)
  set(QF_PY_ENV
    "QFOLD_LIBRARY=$<TARGET_FILE:qfold_shared>" "QF_TEST_QFOLD=$<TARGET_FILE:qfold>"
    "QF_TEST_ABI=$<TARGET_FILE:abi_layout>" "QF_TEST_WORK=${QF_TEST_WORK}/python" "QF_TEST_ROOT=${PROJECT_SOURCE_DIR}"
    "PYTHONPATH=${PROJECT_SOURCE_DIR}/python" "PYTHONDONTWRITEBYTECODE=1")
  if(QF_SANITIZE)
    execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so OUTPUT_VARIABLE QF_LIBASAN
                    OUTPUT_STRIP_TRAILING_WHITESPACE)
    list(APPEND QF_PY_ENV "QF_SANITIZED=1" "QF_LIBASAN=${QF_LIBASAN}")
  endif()
  add_test(NAME python_package
    COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/run_pytest.py ${CMAKE_CURRENT_LIST_DIR})
  set_tests_properties(python_package PROPERTIES LABELS "python" TIMEOUT 600 SKIP_RETURN_CODE 77
    ENVIRONMENT "${QF_PY_ENV}")
endif()

# The example script of the README's Python section (examples/python/
# quickstart.py: PyTorch fine-tuning -> fuse -> quantize -> eval -> export),
# a few steps: it exits 1 when qfold's float top-1 is not PyTorch's. Not in
# the sanitizer pass: PyTorch in a process with ASan's runtime preloaded
# tests PyTorch, not qfold (the package's own tests run there).
if(QF_PYTHON3 AND NOT QF_SANITIZE)
  add_test(NAME python_example
    COMMAND ${QF_PYTHON3} ${PROJECT_SOURCE_DIR}/examples/python/quickstart.py --steps 20
            --out ${QF_TEST_WORK}/python_example)
  set_tests_properties(python_example PROPERTIES LABELS "python;examples" TIMEOUT 300
    ENVIRONMENT "QFOLD_LIBRARY=$<TARGET_FILE:qfold_shared>;PYTHONPATH=${PROJECT_SOURCE_DIR}/python;PYTHONDONTWRITEBYTECODE=1")
endif()
