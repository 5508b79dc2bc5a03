# The bundled demo plan's shape on 8 CPU ranks (plans/tiny-tp2-pp2-dp2: tp 2 x pp 2 x dp 2,
# sequence parallel, selective recompute, ZeRO-1): `stagecraft run --trace` under mpirun, then
# `stagecraft compare` with the simulated trace of the same plan. The simulated trace holds one
# rank per stage (the tp x dp = 4 ranks of a stage run one instruction list), so every measured
# rank's step must match its stage's simulated instructions by id: matched = 4 x the simulated
# trace's events, none unmatched; and the measured trace must hold the tp collectives by name.
#   -DMPIEXEC=<mpiexec> -DNPFLAG=-n -DSTAGECRAFT=<exe> -DWORK=<scratch folder>
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
include(${CMAKE_CURRENT_LIST_DIR}/../../run_ok.cmake)
set(plan tiny-tp2-pp2-dp2)
run_ok(${MPIEXEC} ${NPFLAG} 8 --oversubscribe ${STAGECRAFT} run --model tiny --training tiny-cpu --plan ${plan}
       --steps 3 --trace ${WORK}/measured.json)
run_ok(${STAGECRAFT} simulate --model tiny --cluster cpu-local --training tiny-cpu --plan ${plan} --nodes 4
       --trace ${WORK}/sim.json)
run_ok(${STAGECRAFT} compare ${WORK}/sim.json ${WORK}/measured.json --json)
string(JSON level GET "${out}" level)
string(JSON matched GET "${out}" matched)
string(JSON unmatched GET "${out}" unmatched_simulated)
file(READ ${WORK}/sim.json sim)
string(REGEX MATCHALL "\"op\":\"" sim_events "${sim}")  # one per instruction event (memory samples have none)
list(LENGTH sim_events n_sim)
math(EXPR expected "4 * ${n_sim}")
if(NOT level STREQUAL "instruction" OR NOT unmatched EQUAL 0 OR NOT matched EQUAL expected)
  message(FATAL_ERROR "expected 4 x ${n_sim} = ${expected} instructions matched by id, got level ${level}, "
                      "${matched} matched, ${unmatched} unmatched")
endif()
file(READ ${WORK}/measured.json measured)
foreach(op TpAllReduce TpAllGather TpReduceScatter)
  string(FIND "${measured}" "\"name\":\"${op}\"" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the measured trace of ${plan} holds no ${op}")
  endif()
endforeach()
message(STATUS "${plan} on 8 ranks: ${matched} instructions matched by id in the measured trace")
