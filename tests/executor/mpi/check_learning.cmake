# Learning under mpirun: `stagecraft run --json` for STEPS steps on the synthetic corpus; the
# first loss must be near ln(vocab) and every one of the last 10 well below it.
#   -DMPIEXEC=<mpiexec> -DNPFLAG=-n -DNP=4 -DSTAGECRAFT=<exe> -DPLAN=<plan> -DSTEPS=200 -DFIRST_ABOVE=5.0 -DLAST_BELOW=2.0
#   [-DMODEL=<model>, default tiny]
if(NOT DEFINED MODEL)
  set(MODEL tiny)
endif()
execute_process(COMMAND ${MPIEXEC} ${NPFLAG} ${NP} --oversubscribe ${STAGECRAFT} run --model ${MODEL} --training tiny-cpu
                        --plan ${PLAN} --steps ${STEPS} --json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "stagecraft run failed (${rc}):\n${err}")
endif()
string(JSON n LENGTH "${out}" losses)
string(JSON first GET "${out}" losses 0)
if(NOT n EQUAL STEPS OR NOT first GREATER FIRST_ABOVE)
  message(FATAL_ERROR "expected ${STEPS} losses starting above ${FIRST_ABOVE}, got ${n} starting at ${first}")
endif()
math(EXPR from "${n} - 10")
math(EXPR last_index "${n} - 1")
foreach(i RANGE ${from} ${last_index})
  string(JSON loss GET "${out}" losses ${i})
  if(NOT loss LESS LAST_BELOW)
    message(FATAL_ERROR "loss at step ${i} is ${loss}, expected below ${LAST_BELOW} (first ${first})")
  endif()
endforeach()
string(JSON last GET "${out}" losses ${last_index})
string(JSON tps GET "${out}" tokens_per_s)
message(STATUS "loss ${first} -> ${last} over ${n} steps, ${tps} tokens/s")
