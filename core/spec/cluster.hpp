// Cluster: where a plan runs (SCHEMAS.md, cluster.json). Nodes of identical GPUs joined by
// NVLink/NVSwitch inside a node and rail-aligned NICs into a fat tree between nodes, plus the
// host side used by optimizer offload. Every value is in base units: bytes, bytes/s, ns, FLOP/s.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/spec/dtype.hpp"

namespace stagecraft::spec {

// A fused attention kernel (FlashAttention-2/3, cuDNN's SDPA) as measured on this GPU: the fraction
// of the dense 16-bit peak its forward and its backward reach, by sequence length, at the head
// width of the measurement (128), causal, in the kernels' FLOP convention (forward 4·s²·d per
// head, halved for causal masking; backward 2.5x forward). Sequence lengths strictly increasing;
// interpolated linearly in log2(s) and held flat outside (sim/models/work.hpp).
struct AttentionKernel {
  std::string name;                                 // "fa2", "cudnn", "fa3", ...
  std::vector<std::pair<double, double>> forward;   // (sequence length, fraction of peak)
  std::vector<std::pair<double, double>> backward;
  std::string source;
  // The share of the tabled rate the kernel keeps in training ("sustained", optional, (0, 1],
  // default 1): a table measured on an idle GPU at its boost clock runs at the power-limited
  // clock of a GPU under training load, sustained / boost; both passes are scaled by it.
  double sustained = 1.0;
};

// Memory-bound kernels that do not reach the contiguous rate (memory_efficiency), as fractions of
// hbm_Bps; 0 or empty: that kind runs at memory_efficiency (sim/models/work.hpp, memory-bound work).
struct MemoryKernels {
  double strided = 0;   // TensorIterator's non-vectorised path: broadcast operands, permuted copies, masked_fill
  double dropout = 0;   // dropout's forward (mask generation and scale)
  std::vector<std::pair<double, double>> softmax;  // (row length, fraction): a row softmax's forward
  std::string source;
  bool any() const { return strided > 0 || dropout > 0 || !softmax.empty(); }
};

struct Gpu {
  std::string name;
  int64_t memory_bytes = 0;
  int64_t reserved_bytes = 0;                 // CUDA context + library workspaces, never usable
  std::map<Dtype, double> peak_flops;         // dense FLOP/s per format
  double hbm_Bps = 0;
  double memory_efficiency = 1.0;             // fraction of hbm_Bps memory-bound kernels reach
  // Elements per second the MLP's activation function (GELU's tanh, SiLU's sigmoid) is evaluated
  // at when its arithmetic, not its memory traffic, bounds it (a CPU core calling libm); optional,
  // 0 = absent: the activation then costs only its bytes (sim/models/compute.hpp).
  double activation_elems_per_s = 0;
  // Parameters per second the optimizer's update on the device (Adam's square root and division
  // per parameter) runs at when its arithmetic bounds it; optional, 0 = absent: only its bytes.
  double adam_params_per_s = 0;
  // Streaming multiprocessors (datasheet); optional, 0 = unknown. The simulator takes the SMs
  // NCCL's kernels occupy from concurrent compute (sim/simulation.hpp) only when it is known.
  int64_t sm_count = 0;
  // (FLOPs of one GEMM, fraction of peak), FLOPs strictly increasing; piecewise log-linear.
  std::vector<std::pair<double, double>> matmul_efficiency;
  // The fused attention kernels measured on this GPU, and the one a training's "attention": "flash"
  // means; optional (cluster.json "attention_kernels": {"default": name, "<name>": {...}}). A default
  // of "unfused" says the device has none (a CPU), so "flash" runs unfused on it; without the
  // section, only "attention": "unfused" can be simulated on this GPU.
  std::vector<AttentionKernel> attention_kernels;
  std::string default_attention_kernel;
  MemoryKernels memory_kernels;   // optional (cluster.json "memory_kernels")
  std::string source;
};
// The kernel named `name` ("flash": the default), or nullptr when the GPU lists none of that name.
const AttentionKernel* find_attention_kernel(const Gpu& gpu, const std::string& name);

struct IntraNode {
  double bandwidth_Bps = 0;   // per GPU, per direction, as collectives achieve it (nccl-tests busbw)
  int64_t latency_ns = 0;     // per ring step
  std::string source;
};

struct InterNode {
  int64_t nics_per_node = 0;
  double nic_bandwidth_Bps = 0;   // per NIC, per direction, as NCCL achieves it
  int64_t latency_ns = 0;
  double oversubscription = 1.0;  // fat-tree taper: core bandwidth = edge bandwidth / this
  std::string source;
};

struct Host {
  double pcie_Bps = 0;            // per GPU, host <-> device
  int64_t memory_bytes = 0;       // per node
  double adam_params_per_s = 0;   // CPU Adam update throughput per GPU's share of the host
  std::string source;
};

// How the collective library (NCCL) runs on this cluster: which version's tuning model times
// collectives (sim/models/nccl.hpp), and the facts of the machine that model reads. Optional in
// cluster.json as "nccl": "2.18" or {"version", "channels", "host_cpu", "gpu_arch", "source"}.
enum class GpuArch { kVolta, kAmpere, kHopper, kBlackwell };
enum class HostCpu { kIntel, kAmd, kOther };
std::string to_string(GpuArch a);
std::string to_string(HostCpu c);
// The architecture a GPU name implies ("A100-SXM4-80GB" -> Ampere), kAmpere when the name is not one
// of V100, A100/A800/A30/A10, H100/H200/H800/GH200, B100/B200/GB200.
GpuArch gpu_arch_of_name(const std::string& gpu_name);

struct Nccl {
  std::string version = "2.30";      // "2.X" or "2.X.Y", 2.7 .. 2.30
  int minor = 30;                    // X of the version
  int64_t channels = 16;             // rings (channels) NCCL builds: 2 per NIC on 8-NIC DGX nodes
  HostCpu host_cpu = HostCpu::kIntel;
  GpuArch gpu_arch = GpuArch::kAmpere;
  // Scale on the tuning table's latencies, 1 as NCCL states them ("latency_scale", optional);
  // the parameter an uncertainty on "nccl.latency" moves.
  double latency_scale = 1.0;
  std::string source;
};

// The uncertainty of one profile parameter: a relative standard deviation (1σ) and where it comes
// from (a sourced range read as ±2σ, or the standard error `stagecraft calibrate` fitted).
// cluster.json "uncertainty": {"<parameter>": {"relative": 0.05, "source": "..."}}. Parameters are
// calibrate's names: gpu.matmul_efficiency (every knot together) or gpu.matmul_efficiency@<FLOPs>
// (one knot), gpu.memory_Bps, gpu.activation_elems_per_s, gpu.adam_params_per_s,
// gpu.attention_efficiency (every attention kernel's points together),
// intra_node.bandwidth_Bps, intra_node.latency_ns, inter_node.nic_bandwidth_Bps,
// inter_node.latency_ns, host.pcie_Bps, host.adam_params_per_s, nccl.latency (the tuning table's
// latencies, all together).
struct ParameterUncertainty {
  std::string parameter;
  double relative = 0;   // σ / value, in (0, 1)
  std::string source;
};
// The parameter name of the matmul_efficiency knot at `flops` ("gpu.matmul_efficiency@1e+09"):
// calibrate's name for it, and what an uncertainty names one knot by.
std::string matmul_knot_name(double flops);
// Whether `name` is a parameter an uncertainty may name (knot names must match a knot of `gpu`).
bool is_uncertain_parameter(const std::string& name, const Gpu& gpu);

// Power drawn at most, for an upper bound on a run's energy (sim/run_cost.hpp); optional in
// cluster.json as "power": {"gpu_watts", "node_watts", "source"}, each 0 = unknown. gpu_watts is the
// GPU board's maximum (TDP); node_watts a whole node's maximum input power (GPUs, CPUs, NICs,
// NVSwitches, fans), both datasheet values.
struct Power {
  double gpu_watts = 0;
  double node_watts = 0;
  std::string source;
};

// What one GPU-hour costs (a contract or cloud price: no datasheet gives it, so no bundled profile
// carries one); optional in cluster.json as "price": {"per_gpu_hour", "currency", "source"}, and set
// by --gpu-hour-price. per_gpu_hour 0 = unknown; currency a three-letter code, "USD" by default.
struct Price {
  double per_gpu_hour = 0;
  std::string currency = "USD";
  std::string source;
};

// Whether `code` is three upper-case letters (ISO 4217's form: "USD", "EUR").
bool valid_currency(const std::string& code);

// How often the job is interrupted and what a checkpoint costs (optional in cluster.json as
// "reliability"; sim/goodput.hpp turns it into the time to train with failures). A failure rate per
// GPU-hour or per node-hour (one of them; a job of G GPUs on G/g nodes fails G times, or G/g times,
// as often: independent components), the time from a failure to training again besides reading
// the checkpoint (detection, rescheduling, process start), and the checkpoint store's sustained
// bandwidth (aggregate over the job, for writing and reading back). 0 = unknown.
struct Reliability {
  double failures_per_gpu_hour = 0;
  double failures_per_node_hour = 0;
  double restart_s = 0;
  double checkpoint_Bps = 0;
  std::string source;
  bool known() const { return (failures_per_gpu_hour > 0 || failures_per_node_hour > 0) && checkpoint_Bps > 0; }
};

// A what-if: `count` consecutive components from `first` run `slowdown` times slower than the
// profile says (docs/simulator.md, "Stragglers"): a GPU's compute (kernels take slowdown× their
// time), every GPU of a node, or a NIC's bandwidth (both directions divided by slowdown; NICs
// numbered node · nics_per_node + r). Not a measured value: what a user asks "what if".
struct Straggler {
  enum class Kind : uint8_t { kGpu, kNode, kNic };
  Kind kind = Kind::kGpu;
  int64_t first = 0;
  int64_t count = 1;
  double slowdown = 1;
};
const char* to_string(Straggler::Kind k);
// Whether GPU `gpu` computes slowly under `s` (a straggling GPU, or a GPU of a straggling node;
// never for a NIC).
inline bool computes_slowly(const Straggler& s, int64_t gpu, int64_t gpus_per_node) {
  if (s.kind == Straggler::Kind::kNic) return false;
  const int64_t i = s.kind == Straggler::Kind::kNode ? gpu / gpus_per_node : gpu;
  return i >= s.first && i < s.first + s.count;
}
// "gpu 3 ×1.5", "nodes 2-3 ×2"
std::string describe(const Straggler& s);

struct Cluster {
  std::string name;
  int64_t nodes = 0;
  int64_t gpus_per_node = 0;
  Gpu gpu;
  IntraNode intra_node;
  InterNode inter_node;
  Host host;
  Nccl nccl;
  Power power;
  Price price;
  Reliability reliability;
  std::optional<Straggler> straggler;   // cluster.json "straggler", a what-if (--set cluster.straggler=...)
  std::vector<ParameterUncertainty> uncertainty;   // in file order
  std::string source;
  std::string file;

  int64_t gpus() const { return nodes * gpus_per_node; }
};

Cluster load_cluster(const std::string& path);
Cluster cluster_from_json(const nlohmann::json& j, const std::string& file);
nlohmann::json to_json(const Cluster& c);

}  // namespace stagecraft::spec
