// StateMemory: where StageState's buffers live and the element operations on them run. StageState
// (stage_state.hpp) holds the ZeRO rules — which positions are kept, stepped, released, counted in
// the norm — once, and asks this for the elements: host memory (HostMemory, the CPU backend) or a
// device's (the CUDA backend), whose spans then point at device addresses and are only ever
// handed back to it, to the Communicator or to the backend's kernels.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "executor/model/adamw.hpp"
#include "executor/precision.hpp"

namespace stagecraft::executor {

class StateMemory {
 public:
  virtual ~StateMemory() = default;
  // `elems` zero-filled elements that live as long as this object.
  virtual std::span<float> allocate(int64_t elems) = 0;
  virtual void fill(std::span<float> dst, float value) = 0;
  virtual void copy(std::span<float> dst, std::span<const float> src) = 0;  // equal sizes
  // adamw_step (model/adamw.hpp) on a shard whose spans are this memory's.
  virtual void adamw(const AdamWConfig& cfg, int64_t step, const AdamWShard& shard, std::span<const Range> decayed,
                     float grad_scale) = 0;
  // sum += the squares of `values`, in double (on the host, element by element in order).
  virtual void add_sum_sq(std::span<const float> values, double& sum) = 0;
  // Host copies in and out.
  virtual void download(std::span<const float> src, std::span<float> host) = 0;
  virtual void upload(std::span<const float> host, std::span<float> dst) = 0;
  // dst = src rounded to `f` (precision.hpp; equal sizes, dst may be src): the 16-bit working
  // parameters from the fp32 masters. This default goes through a host copy.
  virtual void round_copy(std::span<float> dst, std::span<const float> src, Format f) {
    std::vector<float> host(src.size());
    download(src, host);
    round_all(f, std::span<float>(host));
    upload(host, dst);
  }
};

class HostMemory final : public StateMemory {
 public:
  std::span<float> allocate(int64_t elems) override;
  void fill(std::span<float> dst, float value) override;
  void copy(std::span<float> dst, std::span<const float> src) override;
  void adamw(const AdamWConfig& cfg, int64_t step, const AdamWShard& shard, std::span<const Range> decayed,
             float grad_scale) override {
    adamw_step(cfg, step, shard, decayed, grad_scale);
  }
  void add_sum_sq(std::span<const float> values, double& sum) override;
  void download(std::span<const float> src, std::span<float> host) override { copy(host, src); }
  void upload(std::span<const float> host, std::span<float> dst) override { copy(dst, host); }
  void round_copy(std::span<float> dst, std::span<const float> src, Format f) override;

 private:
  std::deque<std::vector<float>> blocks_;  // a deque never moves what it holds
};

}  // namespace stagecraft::executor
