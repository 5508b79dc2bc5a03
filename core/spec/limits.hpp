// The bounds every input is checked against, in one place (docs/reliability.md lists them with the
// error each gives). Each is far above any published model or machine, and chosen so that every
// product the counting, lowering and simulation compute stays exact in int64_t: e.g. parameters
// per layer <= 4·hidden² + 3·hidden·ffn_hidden < 2^41, times layers < 2^55, times 16 bytes of
// model state < 2^59; tokens per micro-batch × hidden × bytes < 2^32 · 2^18 · 2^4 = 2^54.
#pragma once

#include <cstdint>
#include <optional>

namespace stagecraft::spec::limits {

// Models (largest published dense models: 128 layers, hidden 25600, FFN 102400, vocabulary 256K).
inline constexpr int64_t kLayers = int64_t{1} << 14;      // 16,384
inline constexpr int64_t kHidden = int64_t{1} << 18;      // 262,144
inline constexpr int64_t kFfnHidden = int64_t{1} << 20;   // 1,048,576
inline constexpr int64_t kExperts = int64_t{1} << 14;    // 16,384 routed experts a layer (DeepSeek-V3: 256)
inline constexpr int64_t kVocab = int64_t{1} << 24;       // 16,777,216
inline constexpr int64_t kSeqLen = int64_t{1} << 24;      // 16,777,216 tokens

// Training: sequences per step, and tokens per step (global batch × sequence length).
inline constexpr int64_t kGlobalBatch = int64_t{1} << 24;
inline constexpr int64_t kTokensPerStep = int64_t{1} << 32;  // 4.3 G tokens (Llama 3 405B: 16 M)
// Micro-batches per step and pipeline: a Program holds O(micro-batches × layers) instructions, and
// 16,384 already means tens of millions (real runs use tens to a few thousand).
inline constexpr int64_t kMicroBatches = int64_t{1} << 14;

// Machines.
inline constexpr int64_t kGpus = int64_t{1} << 20;        // GPUs in a cluster or a plan
inline constexpr int64_t kGpusPerNode = 1024;
inline constexpr int64_t kNicsPerNode = 1024;
inline constexpr int64_t kSmCount = 1 << 16;
inline constexpr double kMinBandwidthBps = 1e3;   // 1 kB/s
inline constexpr double kMaxBandwidthBps = 1e15;  // 1 PB/s
inline constexpr double kMaxLatencyNs = 1e11;     // 100 s
inline constexpr double kMinFlops = 1e6;
inline constexpr double kMaxFlops = 1e18;         // 1 EFLOP/s on one GPU
inline constexpr double kMinRate = 1e3;           // elements or parameters per second
inline constexpr double kMaxRate = 1e16;
// Power of one GPU or node (W) and the price of a GPU-hour: a megawatt or a million is a typo.
inline constexpr double kMaxWatts = 1e6;
inline constexpr double kMaxGpuHourPrice = 1e6;
inline constexpr double kMaxFailuresPerHour = 1.0;   // per GPU or node: one an hour is no machine
inline constexpr double kMaxRestartSeconds = 1e6;    // 11.6 days
// Tokens a --tokens budget may name (1e18: a million times today's largest runs).
inline constexpr double kMaxTrainTokens = 1e18;
inline constexpr int64_t kMinMemoryBytes = int64_t{1} << 20;  // 1 MiB
inline constexpr int64_t kMaxMemoryBytes = int64_t{1} << 50;  // 1 PiB
inline constexpr double kMaxOversubscription = 1024;

// Threads a search may start.
inline constexpr int64_t kThreads = 1024;

}  // namespace stagecraft::spec::limits

namespace stagecraft::spec {

// a × b, or nullopt when the product does not fit in int64_t.
inline std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

inline std::optional<int64_t> checked_mul(int64_t a, int64_t b, int64_t c) {
  const std::optional<int64_t> ab = checked_mul(a, b);
  return ab ? checked_mul(*ab, c) : std::nullopt;
}

}  // namespace stagecraft::spec
