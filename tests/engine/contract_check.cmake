# Runs ../shared/tools/contract-check on the tiny fixture; fails when the tool is absent.
if(NOT EXISTS "${CHECK}")
  message(FATAL_ERROR "contract-check not found at ${CHECK} (expected ../shared/tools beside the "
                      "checkout); this test fails rather than skipping")
endif()
execute_process(COMMAND ${PYTHON} ${CHECK} ${HOTLINE} ${ONNX} RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "contract-check failed (exit ${rc})")
endif()
string(FIND "${out}" "FAIL" failed)
if(NOT failed EQUAL -1)
  message(FATAL_ERROR "contract-check reported failures")
endif()
