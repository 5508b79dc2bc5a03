# Runs scripts/check_layering.py on ROOT and checks its exit status (EXPECT_RC) and that its
# output names every violation in EXPECT (a list of "path:line: folder may not include ..."
# prefixes), and nothing else when EXPECT_COUNT is given. Variables: PYTHON, SCRIPT, ROOT,
# EXPECT_RC, EXPECT, EXPECT_COUNT.
execute_process(COMMAND ${PYTHON} ${SCRIPT} ${ROOT} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "exit ${rc}:\n${out}${err}")
if(NOT rc EQUAL EXPECT_RC)
  message(FATAL_ERROR "expected exit status ${EXPECT_RC}, got ${rc}")
endif()
foreach(line IN LISTS EXPECT)
  string(FIND "${out}" "${line}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the output lacks \"${line}\"")
  endif()
endforeach()
if(DEFINED EXPECT_COUNT)
  string(REGEX MATCHALL "may not include|without a layering rule" found "${out}")
  list(LENGTH found n)
  if(NOT n EQUAL EXPECT_COUNT)
    message(FATAL_ERROR "expected ${EXPECT_COUNT} reported problems, got ${n}")
  endif()
endif()
