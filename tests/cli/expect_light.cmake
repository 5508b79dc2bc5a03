# The plain `stagecraft` executable loads neither MPI nor Qt nor CUDA (cli/main.cpp): none of
# their libraries among the shared libraries ldd lists for CMD. It keeps the start-up of the plain
# commands fast; how fast is measured by bench/startup.sh, not here.
execute_process(COMMAND ldd ${CMD} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ldd ${CMD} failed (${rc}): ${err}")
endif()
string(REGEX MATCHALL "lib(mpi|open-rte|open-pal|pmix|hwloc|Qt6|cuda|cublas|nccl)[^ ]*" heavy "${out}")
if(heavy)
  message(FATAL_ERROR "${CMD} loads ${heavy}:\n${out}")
endif()
message(STATUS "${out}")
