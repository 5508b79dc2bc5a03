#include "cli/probe_compute.hpp"

namespace stagecraft::cli {

std::unique_ptr<traces::ProbeCompute> make_cuda_probe_compute(std::string& why) {
  why = "this build of stagecraft has no CUDA (STAGECRAFT_WITH_CUDA=OFF or the toolkit was not found)";
  return nullptr;
}

}  // namespace stagecraft::cli
