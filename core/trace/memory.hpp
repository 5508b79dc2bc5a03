// What a GPU (or a CPU rank of the executor) holds, by kind — one vocabulary for the simulator's
// memory model, the executor's bookkeeping, traces and reports (SCHEMAS.md "simulate --json",
// "memory"):
//   params       the rank's own persistent parameters (ZeRO model states: its shard, plus
//                persistent tensors kept whole)
//   grads        its gradient storage (the full gradients, or the shard with ZeRO >= 2)
//   optimizer    optimizer state (fp32 master weights, momentum, variance — or its shard)
//   activations  what the forward keeps for the backward, and recomputed blocks
//   buffers      communication buffers: gathered ZeRO-3 parameter buckets, gradient buckets,
//                pipeline message buffers
//   reserved     memory the runtime keeps for itself (CUDA context, workspaces)
// A memory sample is what a rank holds from one moment on, by kind, and the Program instruction
// whose start or end changed it (-1 when none: the state before the step).
#pragma once

#include <array>
#include <cstdint>
#include <numeric>
#include <vector>

namespace stagecraft::trace {

enum class MemoryKind : uint8_t { kParams, kGrads, kOptimizer, kActivations, kBuffers, kReserved };
inline constexpr int kMemoryKindCount = 6;
inline constexpr std::array<MemoryKind, kMemoryKindCount> kMemoryKinds = {
    MemoryKind::kParams,      MemoryKind::kGrads,   MemoryKind::kOptimizer,
    MemoryKind::kActivations, MemoryKind::kBuffers, MemoryKind::kReserved};

// The JSON key of a kind: "params", "grads", "optimizer", "activations", "buffers", "reserved".
const char* to_string(MemoryKind kind);

// Bytes by kind; trivially copyable.
struct MemoryBytes {
  std::array<int64_t, kMemoryKindCount> by_kind{};

  int64_t& operator[](MemoryKind k) { return by_kind[static_cast<std::size_t>(k)]; }
  int64_t operator[](MemoryKind k) const { return by_kind[static_cast<std::size_t>(k)]; }
  int64_t total() const { return std::accumulate(by_kind.begin(), by_kind.end(), int64_t{0}); }
  bool operator==(const MemoryBytes&) const = default;
};

struct MemorySample {
  int64_t rank = 0;
  int64_t time_ns = 0;
  int32_t instr = -1;       // the Program instruction that changed it; -1: none (start of the step)
  MemoryBytes bytes;        // held from time_ns on

  int64_t total() const { return bytes.total(); }
};

// The sample with the most bytes in total (the first of equal ones), or nullptr for none.
const MemorySample* peak_sample(const std::vector<MemorySample>& samples);

}  // namespace stagecraft::trace
