// Where `stagecraft probe --backend cuda` runs its GEMM and memory rows (traces::ProbeCompute):
// the CUDA device, in an executable built with the toolkit (cli/probe_compute_cuda.cpp: cuBLASLt
// bf16 GEMMs with fp32 accumulation, a triad kernel, both timed by CUDA events), none in one
// without (cli/probe_compute_none.cpp). Each executable links one of the two files. It lives in
// cli/ because it joins traces/ (the harness) and executor/cuda (the device code).
#pragma once

#include <memory>
#include <string>

#include "traces/probe.hpp"

namespace stagecraft::cli {

// nullptr, with `why` set, when this executable has no CUDA or the machine no device.
std::unique_ptr<traces::ProbeCompute> make_cuda_probe_compute(std::string& why);

}  // namespace stagecraft::cli
