# Resume through the command line: 10 steps straight must equal 5 steps + --save + --resume + 5
# steps bit for bit (losses as printed by JSON, which round-trips doubles, and the parameter
# checksum); then resuming with another seed, or from a directory without a checkpoint, must
# exit 2 before training with the reason.
#   -DMPIEXEC=<mpiexec> -DNPFLAG=-n -DNP=4 -DSTAGECRAFT=<exe> -DPLAN=<plan> -DDIR=<scratch directory>
function(run_json out_var)
  execute_process(COMMAND ${MPIEXEC} ${NPFLAG} ${NP} --oversubscribe ${STAGECRAFT} run --model tiny --training tiny-cpu
                          --plan ${PLAN} --json ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "stagecraft run ${ARGN} failed (${rc}):\n${err}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

string(RANDOM LENGTH 10 suffix)  # concurrent runs of this test must not share a directory
set(DIR "${DIR}-${suffix}")
run_json(straight --steps 10)
run_json(first --steps 5 --save "${DIR}/ckpt")
run_json(resumed --steps 5 --resume "${DIR}/ckpt")
string(JSON first_step GET "${resumed}" first_step)
if(NOT first_step EQUAL 5)
  message(FATAL_ERROR "resumed run starts at step ${first_step}, expected 5")
endif()
foreach(i RANGE 0 4)
  math(EXPR j "${i} + 5")
  string(JSON a GET "${straight}" losses ${j})
  string(JSON b GET "${resumed}" losses ${i})
  if(NOT a STREQUAL b)
    message(FATAL_ERROR "step ${j}: straight loss ${a}, resumed ${b}")
  endif()
endforeach()
string(JSON sum_a GET "${straight}" params_checksum)
string(JSON sum_b GET "${resumed}" params_checksum)
if(NOT sum_a STREQUAL sum_b)
  message(FATAL_ERROR "final parameters differ: straight ${sum_a}, resumed ${sum_b}")
endif()
message(STATUS "10 steps straight == 5 + save + resume + 5: losses and parameters ${sum_a} equal")

function(expect_refused what expected)
  execute_process(COMMAND ${MPIEXEC} ${NPFLAG} ${NP} --oversubscribe ${STAGECRAFT} run --model tiny --training tiny-cpu
                          --plan ${PLAN} --steps 1 ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(FIND "${err}" "${expected}" pos)
  if(NOT rc EQUAL 2 OR pos EQUAL -1)
    message(FATAL_ERROR "${what}: expected exit 2 and \"${expected}\", got ${rc}:\n${err}")
  endif()
endfunction()
expect_refused("another seed" "/data is" --resume "${DIR}/ckpt" --seed 2)
expect_refused("no checkpoint" "manifest.json: missing" --resume "${DIR}/nothing-here")
file(REMOVE_RECURSE "${DIR}")
