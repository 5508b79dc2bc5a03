# A rank failing mid-training must take the whole job down quickly: rank FAULT_RANK throws in
# step FAULT_STEP (STAGECRAFT_FAULT_* switch), prints its message and aborts; mpirun must exit
# non-zero within MAX_SECONDS and stderr must carry that rank's message.
#   -DMPIEXEC=<mpiexec> -DNPFLAG=-n -DNP=4 -DSTAGECRAFT=<exe> -DPLAN=<plan> -DFAULT_RANK=1 -DFAULT_STEP=3 -DMAX_SECONDS=10
set(ENV{STAGECRAFT_FAULT_RANK} ${FAULT_RANK})
set(ENV{STAGECRAFT_FAULT_STEP} ${FAULT_STEP})
string(TIMESTAMP t0 "%s")
execute_process(COMMAND ${MPIEXEC} ${NPFLAG} ${NP} --oversubscribe ${STAGECRAFT} run --model tiny --training tiny-cpu
                        --plan ${PLAN} --steps 20
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
string(TIMESTAMP t1 "%s")
math(EXPR elapsed "${t1} - ${t0}")
if(rc EQUAL 0 OR NOT rc MATCHES "^[0-9]+$")
  message(FATAL_ERROR "expected a non-zero exit status, got '${rc}' after ${elapsed} s\n${err}")
endif()
if(elapsed GREATER MAX_SECONDS)
  message(FATAL_ERROR "the job took ${elapsed} s to exit, more than ${MAX_SECONDS} s")
endif()
set(expected "stagecraft: rank ${FAULT_RANK}: error: injected fault in step ${FAULT_STEP}")
string(FIND "${err}" "${expected}" pos)
if(pos EQUAL -1)
  message(FATAL_ERROR "stderr lacks \"${expected}\":\n${err}")
endif()
message(STATUS "exit ${rc} after ${elapsed} s; ${expected}")
