# stagecraft compare end to end: simulate a plan to a trace, compare it with itself (--json keys of
# SCHEMAS.md "compare --json"), with the hand-written Kineto files (kernel classes), optionally
# draw the PNG, and refuse a trace of another plan (exit 2). Variables: STAGECRAFT, PLAN (a plan
# file), WORK (a scratch folder), PNG (ON when the build has Qt).
file(MAKE_DIRECTORY ${WORK})
include(${CMAKE_CURRENT_LIST_DIR}/../run_ok.cmake)

run_ok(${STAGECRAFT} simulate --model tiny --cluster cpu-local --training tiny-cpu --plan ${PLAN} --nodes 2
       --trace ${WORK}/sim.json)
run_ok(${STAGECRAFT} compare ${WORK}/sim.json ${WORK}/sim.json --json)
foreach(key "\"step_time_s\"" "\"kinds\"" "\"worst\"" "\"simulated_s\"" "\"measured_s\"" "\"error\": 0.0" "\"instr\"")
  string(FIND "${out}" "${key}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "compare --json lacks ${key}:\n${out}")
  endif()
endforeach()

run_ok(${STAGECRAFT} compare ${WORK}/sim.json ${DATA}/kineto/handwritten_rank0.json ${DATA}/kineto/handwritten_rank1.json)
foreach(key "aligned by rank, step and kernel class" "communication" "memory")
  string(FIND "${out}" "${key}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "compare against Kineto files lacks \"${key}\":\n${out}")
  endif()
endforeach()

if(PNG)
  run_ok(${STAGECRAFT} compare ${WORK}/sim.json ${WORK}/sim.json --png ${WORK}/timeline.png)
  if(NOT EXISTS ${WORK}/timeline.png)
    message(FATAL_ERROR "compare --png wrote no ${WORK}/timeline.png")
  endif()
endif()

# The same model and GPUs under another schedule: a different plan, exit 2, naming the key.
file(READ ${PLAN} plan_text)
string(REPLACE "\"1f1b\"" "\"gpipe\"" plan_text "${plan_text}")
file(WRITE ${WORK}/gpipe.json "${plan_text}")
run_ok(${STAGECRAFT} simulate --model tiny --cluster cpu-local --training tiny-cpu --plan ${WORK}/gpipe.json --nodes 2
       --trace ${WORK}/gpipe-trace.json)
execute_process(COMMAND ${STAGECRAFT} compare ${WORK}/sim.json ${WORK}/gpipe-trace.json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "expected exit 2 for traces of different plans, got ${rc}\n${err}")
endif()
string(FIND "${err}" "gpipe-trace.json: /stagecraft/plan/schedule: expected the simulated trace's plan" at)
if(at EQUAL -1)
  message(FATAL_ERROR "unclear message for different plans:\n${err}")
endif()
message(STATUS "${err}")

# A trace whose header names another Program than its model, training and plan lower to (here:
# the fingerprint edited) is refused by compare and calibrate, exit 2, naming the file and the key.
file(READ ${WORK}/sim.json sim_text)
string(REGEX REPLACE "\"fingerprint\":\"[0-9a-f]+\"" "\"fingerprint\":\"0123456789abcdef\"" edited "${sim_text}")
if(edited STREQUAL sim_text)
  message(FATAL_ERROR "the simulated trace names no Program fingerprint")
endif()
file(WRITE ${WORK}/edited.json "${edited}")
foreach(cmd "compare;${WORK}/sim.json;${WORK}/edited.json" "calibrate;${WORK}/edited.json;--cluster;cpu-local;-o;${WORK}/never.json")
  execute_process(COMMAND ${STAGECRAFT} ${cmd} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 2)
    message(FATAL_ERROR "expected exit 2 for a trace of another Program (${cmd}), got ${rc}\n${err}")
  endif()
  string(FIND "${err}" "edited.json: /stagecraft/program/fingerprint: expected " at)
  if(at EQUAL -1)
    message(FATAL_ERROR "unclear message for a trace of another Program (${cmd}):\n${err}")
  endif()
endforeach()
