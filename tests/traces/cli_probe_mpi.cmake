# stagecraft probe under mpirun: 2 ranks print the nccl-tests table with no wrong element and
# write a trace; stagecraft calibrate accepts it; the calibrated profile drives a simulation.
# Variables: MPIEXEC, NPFLAG, STAGECRAFT, WORK.
file(MAKE_DIRECTORY ${WORK})
execute_process(COMMAND ${MPIEXEC} ${NPFLAG} 2 --oversubscribe ${STAGECRAFT} probe -e 256KiB -f 4 --gemm 64,128,256
                        --stream 1MiB,4MiB -n 3 --trace ${WORK}/probe.json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "probe failed (${rc}):\n${out}\n${err}")
endif()
foreach(key "#wrong" "busbw" "all_gather" "reduce_scatter" "all_reduce" "sendrecv" "# Out of bounds values : 0 OK" "gemm")
  string(FIND "${out}" "${key}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "probe output lacks \"${key}\":\n${out}")
  endif()
endforeach()
execute_process(COMMAND ${STAGECRAFT} calibrate ${WORK}/probe.json --cluster cpu-local -o ${WORK}/calibrated.json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "calibrate rejected the probe trace (${rc}):\n${out}\n${err}")
endif()
foreach(key "intra_node.latency_ns" "fitted")
  string(FIND "${out}" "${key}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "calibrate output lacks \"${key}\":\n${out}")
  endif()
endforeach()
execute_process(COMMAND ${STAGECRAFT} simulate --model tiny --cluster ${WORK}/calibrated.json --training tiny-cpu
                        --plan tiny-pp2-dp2 --nodes 2
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the calibrated profile does not simulate (${rc}):\n${out}\n${err}")
endif()
