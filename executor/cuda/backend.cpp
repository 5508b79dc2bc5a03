#include "executor/cuda/backend.hpp"

#include <string>

#include "executor/cuda/buffers.hpp"
#include "executor/cuda/check.hpp"
#include "executor/cuda/device.hpp"
#include "executor/cuda/event_clock.hpp"
#include "executor/cuda/kernels/elementwise.hpp"
#include "executor/errors.hpp"
#include "executor/index.hpp"
#include "executor/zero/ranges.hpp"

namespace stagecraft::executor::cuda {

namespace {

struct DeviceStorage final : Buffer::Storage {
  explicit DeviceStorage(int64_t elems) : buffer(elems) { data = buffer.view(); }
  DeviceBuffer buffer;
};

void same_size(const char* what, std::size_t dst, std::size_t src) {
  if (dst != src) {
    throw ExecutorError(std::string("CudaBackend::") + what + ": " + std::to_string(src) + " elements into " +
                        std::to_string(dst));
  }
}

}  // namespace

std::string plan_unsupported(const spec::Plan& plan) {
  if (plan.tp > 1) return "/tp: the CUDA backend does not run tensor parallelism yet (tp " + std::to_string(plan.tp) + ")";
  if (plan.cp > 1) return "/cp: the CUDA backend does not run context parallelism yet (cp " + std::to_string(plan.cp) + ")";
  if (plan.zero.quantized_weights.on() || plan.zero.quantized_gradients.on()) {
    return "/zero: ZeRO++'s quantized gathers and gradients (qwZ, qgZ) run on the CPU executor only; the NCCL transport "
           "does not carry their host payloads";
  }
  return "";
}

std::string cuda_unsupported(const program::Program& prog) {
  if (std::string why = plan_unsupported(prog.plan); !why.empty()) return why;
  // the units whose math runs on the host kernels only (moe_impl.hpp, units_impl.hpp qk_norm)
  if (prog.model.moe.on()) return "/moe: the CUDA backend does not run mixtures of experts yet (the CPU backend does)";
  if (prog.model.qk_norm) return "/qk_norm: the CUDA backend does not run query and key norms yet (the CPU backend does)";
  if (prog.model.sliding_window > 0 && prog.model.sliding_window < prog.model.seq_len) {
    return "/sliding_window: the CUDA backend does not run sliding-window attention yet (the CPU backend does)";
  }
  std::string why;
  if (!available(&why)) return why;
  return "";
}

CudaBackend::CudaBackend(const StageLayout& layout, bool offload, MemoryTracker& memory, bool forward_only, int64_t slots)
    : caches_(at(slots)) {
  // device memory is ordered on one compute stream per process (buffers.hpp), which every live
  // backend shares (a checkpoint's reload beside the run that saved it, in tests)
  stream_ = acquire_device_stream();
  ops_ = std::make_unique<OpsContext>(stream_);
  kernels_ = std::make_unique<DeviceKernels>(*ops_);
  kernels_->format = layout.precision().store;  // the stores a 16-bit Program rounds
  memory_ = std::make_unique<DeviceMemory>(stream_);
  state_ = std::make_unique<StageState>(layout, offload, memory, forward_only, memory_.get());
  for (int64_t c = 0; c < layout.chunk_count(); ++c) {
    const ParamLayout& l = layout.chunk(c);
    if (l.tp() > 1) throw ExecutorError("the CUDA backend does not run tensor parallelism yet (tp " + std::to_string(l.tp()) + ")");
    std::vector<Unit> units;
    for (int64_t u = l.begin(); u < l.end(); ++u) units.emplace_back(l, u, *kernels_);
    layers_.push_back(std::move(units));
  }
}

CudaBackend::~CudaBackend() {
  if (stream_) cudaStreamSynchronize(stream_);
  caches_.clear();
  layers_.clear();
  state_.reset();
  memory_.reset();
  kernels_.reset();
  ops_.reset();
  if (stream_) release_device_stream();
}

void CudaBackend::sync() { STAGECRAFT_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

void CudaBackend::finish_step() { sync(); }

InstrClock* CudaBackend::clock() { return &event_clock(); }

void CudaBackend::label_next(int32_t instr) {
  if (labelled_ >= 0) event_clock().end(labelled_, stream_);
  labelled_ = instr;
  if (instr >= 0) event_clock().start(instr, stream_);
}

Buffer CudaBackend::alloc(int64_t elems) { return Buffer(std::make_unique<DeviceStorage>(elems)); }

void CudaBackend::copy(std::span<float> dst, std::span<const float> src) {
  same_size("copy", dst.size(), src.size());
  if (!dst.empty()) {
    STAGECRAFT_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), dst.size() * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
  }
}

void CudaBackend::add(std::span<float> dst, std::span<const float> src) {
  same_size("add", dst.size(), src.size());
  cuda::add(dst.data(), src.data(), static_cast<int64_t>(dst.size()), stream_);
}

void CudaBackend::fill(std::span<float> dst, float value) {
  cuda::fill(dst.data(), value, static_cast<int64_t>(dst.size()), stream_);
}

float CudaBackend::read(std::span<const float> src, int64_t index) { return kernels_->load(src.data() + index); }

int64_t CudaBackend::cache_bytes() const {
  int64_t bytes = 0;
  for (const std::vector<Unit::Cache>& slot : caches_) {
    for (const Unit::Cache& c : slot) {
      c.for_each_buffer([&](const auto& v) { bytes += static_cast<int64_t>(v.capacity() * sizeof(*v.data())); });
    }
  }
  return bytes;
}

const CudaBackend::Unit& CudaBackend::layer(int32_t chunk, int32_t unit) const {
  const std::vector<Unit>& units = layers_.at(at(chunk));
  return units.at(at(unit - units.front().unit()));
}

CudaBackend::Unit::Cache& CudaBackend::cache(int32_t chunk, int32_t unit, int64_t slot) {
  std::vector<Unit::Cache>& caches = caches_.at(at(slot));
  const std::vector<Unit>& units = layers_.at(at(chunk));
  if (caches.empty()) caches.resize(units.size());
  return caches.at(at(unit - units.front().unit()));
}

Buffer CudaBackend::forward(int32_t chunk, int32_t unit, int64_t slot, const TokenBatch& batch, std::span<const float> x,
                            bool input_only) {
  const Unit& l = layer(chunk, unit);
  Buffer y = alloc(l.output_size(batch.dims));
  l.forward(batch, state_->chunk_params(chunk), x, y.view(), cache(chunk, unit, slot),
            input_only ? CacheMode::kInputOnly : CacheMode::kFull);
  return y;
}

void CudaBackend::recompute(int32_t chunk, int32_t unit, int64_t slot) {
  layer(chunk, unit).recompute(state_->chunk_params(chunk), cache(chunk, unit, slot));
}

Buffer CudaBackend::backward(int32_t chunk, int32_t unit, int64_t slot, std::span<const float> dy, bool input_only) {
  const Unit& l = layer(chunk, unit);
  Unit::Cache& c = cache(chunk, unit, slot);
  Buffer dx = alloc(l.input_size(c.dims));
  if (input_only) {
    l.backward_input(state_->chunk_params(chunk), dy, dx.view(), c);
  } else {
    l.backward(state_->chunk_params(chunk), dy, dx.view(), state_->chunk_grads(chunk), c);
    if (!c.input_grad_partial) c.clear();
  }
  return dx;
}

void CudaBackend::backward_weight(int32_t chunk, int32_t unit, int64_t slot) {
  Unit::Cache& c = cache(chunk, unit, slot);
  layer(chunk, unit).backward_weight(state_->chunk_grads(chunk), c);
  c.clear();
}

Buffer CudaBackend::finish_input_grad(int32_t, int32_t, int64_t, std::span<const float>, int64_t) {
  throw ExecutorError("the CUDA backend does not run tensor parallelism yet (finish_input_grad)");
}

float CudaBackend::finish_loss(int32_t, int32_t, int64_t, std::span<const float>) {
  throw ExecutorError("the CUDA backend does not run tensor parallelism yet (the vocabulary-parallel loss)");
}

void CudaBackend::vocab_parallel_rescale(std::span<const float>, std::span<const float>, std::span<float>) {
  throw ExecutorError("the CUDA backend does not run tensor parallelism yet (the vocabulary-parallel loss)");
}

bool CudaBackend::slot_idle(int64_t slot) const {
  for (const Unit::Cache& c : caches_.at(at(slot))) {
    if (c.dims.rows() != 0) return false;
  }
  return true;
}

void CudaBackend::clear_slot(int64_t slot) { caches_.at(at(slot)).clear(); }

}  // namespace stagecraft::executor::cuda
