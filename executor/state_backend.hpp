// StateBackend: the part of a Backend that is the model state, forwarded to a StageState
// (zero/stage_state.hpp) whose StateMemory is the backend's (host for CpuBackend, device for
// CudaBackend). A backend derives from it and says where its StageState is.
#pragma once

#include <vector>

#include "executor/backend.hpp"
#include "executor/zero/ranges.hpp"
#include "executor/zero/stage_state.hpp"

namespace stagecraft::executor {

class StateBackend : public Backend {
 public:
  void init_params(uint64_t seed) override { state().init_params(seed); }
  void init_params(ParamSource& source) override { state().init_params(source); }
  std::span<float> params() override { return state().params(); }
  std::span<float> grads() override { return state().grads(); }
  std::span<float> shard_grads() override { return state().shard_grads(); }
  std::span<float> persistent_grads() override { return state().persistent_grads(); }
  void zero_grads() override { state().zero_grads(); }
  double owned_grad_norm_sq() override { return state().owned_grad_norm_sq(); }
  void optimizer_step(const AdamWConfig& cfg, int64_t step, float clip) override { state().optimizer_step(cfg, step, clip); }
  void copy_grads_to_host() override { state().copy_grads_to_host(); }
  void host_optimizer_step(const AdamWConfig& cfg, int64_t step, float clip) override {
    state().host_optimizer_step(cfg, step, clip);
  }
  void copy_params_from_host() override { state().copy_params_from_host(); }
  void release(Range r) override { state().release(r); }
  void nudge_params(Range r, std::span<const float> delta) override { state().nudge(r, delta); }
  Buffer pack_reduced_grads(const std::vector<Range>& ranges) override {
    Buffer out = alloc(total(ranges));
    state().pack_reduced_grads(ranges, out.view());
    return out;
  }
  void unpack_reduced_grads(const std::vector<Range>& ranges, std::span<const float> values) override {
    state().unpack_reduced_grads(ranges, values);
  }
  std::vector<float> owned_state() override { return state().owned_state(); }
  void load_owned_state(std::span<const float> s) override { state().load_owned_state(s); }
  void load_peer_shard(int64_t set, int64_t shard, std::span<const float> peer) override {
    state().load_peer_shard(set, shard, peer);
  }
  void download(std::span<const float> src, std::span<float> host) override { state().storage().download(src, host); }
  void upload(std::span<const float> host, std::span<float> dst) override { state().storage().upload(host, dst); }
  int64_t owned_state_elems() const override { return state().owned_state_elems(); }
  std::vector<float> params_host() override {
    const std::span<float> p = state().params();
    std::vector<float> out(p.size());
    state().storage().download(p, out);
    return out;
  }

 protected:
  virtual StageState& state() = 0;
  virtual const StageState& state() const = 0;
};

}  // namespace stagecraft::executor
