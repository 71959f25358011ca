# Resize exported to TFLite (src/tflite/tflite_resize.c) and run by TFLite 2.2
# and ArmNN against qfold's integer reference: every form one op at a time,
# the refused forms, and a small U-Net from PyTorch at opsets 13 and 17
# (resize_test.py). Needs the schema reader of armnn.cmake (fixture tflite_py).
if(QF_PYTHON3 AND QF_FLATC)
  foreach(case sweep refusals unet_13 unet_17)
    add_test(NAME tflite_resize_${case}
      COMMAND ${QF_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/resize_test.py --qfold $<TARGET_FILE:qfold>
              --root ${PROJECT_SOURCE_DIR} --work ${QF_TEST_WORK}/tflite_resize --schema-py ${QF_TFLITE_TEST_PY} ${case})
    set_tests_properties(tflite_resize_${case} PROPERTIES FIXTURES_REQUIRED tflite_py LABELS "tflite" TIMEOUT 300)
  endforeach()
endif()
