#include "cli/cuda_link.hpp"

namespace stagecraft::cli {

namespace {
const char* kNoCuda = "this build of stagecraft has no CUDA (STAGECRAFT_WITH_CUDA=OFF or the toolkit was not found)";
}

std::unique_ptr<traces::ProbeCompute> make_cuda_probe_compute(std::string& why) {
  why = kNoCuda;
  return nullptr;
}

std::string cuda_plan_unsupported(const spec::Plan&) { return kNoCuda; }

std::string use_cuda_backend(const program::Program&, double, executor::RunnerOptions&) { return kNoCuda; }

std::unique_ptr<executor::Communicator> make_cuda_communicator(const program::Program&, executor::Communicator&, std::string& why) {
  why = kNoCuda;
  return nullptr;
}

}  // namespace stagecraft::cli
