// What the command line runs on a CUDA device, in an executable built with the toolkit
// (cli/cuda_link_cuda.cpp), and nothing in one without (cli/cuda_link_none.cpp, which says why).
// Each executable links one of the two files (cli/CMakeLists.txt). It lives in cli/ because it
// joins layers that may not include each other: traces/ (the probe harness), executor/ (the
// runner) and executor/cuda (the device code).
#pragma once

#include <memory>
#include <string>

#include "core/program/program.hpp"
#include "executor/runner.hpp"
#include "traces/probe.hpp"

namespace stagecraft::cli {

// `stagecraft probe --backend cuda`'s GEMM and memory rows: cuBLASLt bf16 GEMMs with fp32
// accumulation and a triad kernel, both timed by CUDA events. nullptr, with `why` set, when this
// executable has no CUDA or the machine no device.
std::unique_ptr<traces::ProbeCompute> make_cuda_probe_compute(std::string& why);

// Why `run --backend cuda` cannot run `plan` whatever the machine (checked before the world size),
// or "": no CUDA in this build, or a plan the backend does not run.
std::string cuda_plan_unsupported(const spec::Plan& plan);

// `stagecraft run --backend cuda`: sets o.make_backend to the CUDA backend (fp32) for `prog`, or
// returns why it cannot run it here — no CUDA in this build, no device, a plan it does not run,
// or a simulated peak (`needed_bytes`, the simulator's memory model of this Program) above the
// device's free memory, checked before anything is allocated.
std::string use_cuda_backend(const program::Program& prog, double needed_bytes, executor::RunnerOptions& o);

// `run --backend cuda`'s transport: NCCL (executor/cuda/nccl_communicator.hpp), bootstrapped over
// `control` (the world's communicator, which keeps the control plane and must outlive it), one rank
// per GPU; nullptr, with `why`, where this executable has no CUDA.
std::unique_ptr<executor::Communicator> make_cuda_communicator(const program::Program& prog, executor::Communicator& control,
                                                               std::string& why);

}  // namespace stagecraft::cli
