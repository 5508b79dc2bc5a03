#include "core/spec/plan.hpp"

#include <numeric>
#include <sstream>

#include "core/spec/error.hpp"
#include "core/spec/json_reader.hpp"
#include "core/spec/limits.hpp"
#include "core/spec/model.hpp"
#include "core/spec/training.hpp"

namespace stagecraft::spec {

using nlohmann::json;

namespace {

// Bucket sizes and thresholds count elements; 2^50 is far above any model's parameter count.
constexpr int64_t kMaxElems = int64_t{1} << 50;

int64_t at_least(ObjectReader& r, std::string_view key, int64_t fallback, int64_t min, int64_t max = kMaxElems,
                 Quantity kind = Quantity::kCount) {
  int64_t v = r.integer_or(key, fallback, kind);
  if (v < min || v > max) {
    r.fail_value(key, "an integer from " + std::to_string(min) + " to " + std::to_string(max));
  }
  return v;
}

Schedule parse_schedule(const std::string& s) {
  if (s == "gpipe") return Schedule::kGpipe;
  if (s == "interleaved") return Schedule::kInterleaved;
  if (s == "zb-h1") return Schedule::kZbH1;
  return Schedule::k1F1B;
}

Recompute parse_recompute(const std::string& s) {
  if (s == "selective") return Recompute::kSelective;
  if (s == "full") return Recompute::kFull;
  return Recompute::kNone;
}

// {"bits": b, "block": n} or true (the default); false or absent: off.
Quantization read_quantization(ObjectReader& r, std::string_view key, Quantization dflt, int bits) {
  if (!r.has(key)) return {};
  const json& v = r.raw(key);
  if (v.is_boolean()) return v.get<bool>() ? dflt : Quantization{};
  if (!v.is_object()) r.fail_value(key, "true, false or {\"bits\": " + std::to_string(bits) + ", \"block\": elements per scale}");
  ObjectReader q(v, r.file(), r.pointer_of(key));
  Quantization out = dflt;
  out.bits = static_cast<int>(q.integer_or("bits", dflt.bits));
  if (out.bits != bits) q.fail_value("bits", std::to_string(bits) + " (DeepSpeed ZeRO++ quantizes " +
                                                 (bits == 8 ? "weights to int8" : "gradients to int4") + ")");
  if (dflt.block > 0) out.block = at_least(q, "block", dflt.block, 16, 15999);  // CUDAQuantizer: groups under 16000
  q.finish();
  return out;
}

// The hierarchical and quantized ZeRO fields (ZeroConfig); what needs the dp size, the framework
// or the dtype is checked by validate_plan.
void read_hierarchy(ObjectReader& r, ZeroConfig& z) {
  // absent: 0 (off); present: a positive count
  const auto count_or_off = [&r](std::string_view key) { return r.has(key) ? at_least(r, key, 0, 1, limits::kGpus) : 0; };
  z.shard_group = count_or_off("shard_group");
  if (r.has("replica_sync")) {
    z.replica_sync = r.choice("replica_sync", {"micro_batch", "step"}) == "step" ? ReplicaSync::kStep : ReplicaSync::kMicroBatch;
    if (z.shard_group == 0) r.fail_value("replica_sync", "no replica_sync without shard_group (replicas exist only then)");
  }
  z.hierarchical_gather = r.boolean_or("hierarchical_gather", false);
  z.hpz_group = count_or_off("hpz_group");
  if (z.hpz_group == 1) z.hpz_group = 0;  // DeepSpeed's zero_hpz_partition_size 1: off
  z.local_group = count_or_off("local_group");
  z.quantized_weights = read_quantization(r, "quantized_weights", kQwzDefault, 8);
  z.quantized_gradients = read_quantization(r, "quantized_gradients", kQgzDefault, 4);
  const bool any = z.shard_group > 0 || z.hpz_group > 0 || z.quantized_weights.on() || z.quantized_gradients.on();
  if (any && z.stage == 0) {
    r.fail_value(z.shard_group > 0 ? "shard_group" : z.hpz_group > 0 ? "hpz_group"
                 : z.quantized_weights.on() ? "quantized_weights" : "quantized_gradients",
                 "unset with ZeRO stage 0 (nothing is partitioned)");
  }
  if (z.hierarchical_gather && z.shard_group == 0) {
    r.fail_value("hierarchical_gather", "false without shard_group (MiCS gathers hierarchically inside its shard group)");
  }
  if (z.hpz_group > 0 && z.shard_group > 0) {
    r.fail_value("hpz_group", "unset with shard_group: hpZ keeps the primary partition over the whole data-parallel group "
                              "and a secondary copy over hpz_group; MiCS or hybrid sharding partitions over shard_group");
  }
  if (z.quantized_weights.on() && z.shard_group > 0) {
    r.fail_value("quantized_weights", "false with shard_group (DeepSpeed's MiCS gathers its shards unquantized: "
                                      "MiCS_Init replaces the gather, and the MiCS optimizer is not given ZeRO++'s settings)");
  }
  if (z.quantized_gradients.on() && z.shard_group > 0) {
    r.fail_value("quantized_gradients", "false with shard_group (qgZ reduces the gradients over the whole data-parallel "
                                        "group, DeepSpeed's ZeRO-3 partition)");
  }
  for (std::string_view key : {"hpz_group", "quantized_weights", "quantized_gradients"}) {
    const bool set = key == "hpz_group" ? z.hpz_group > 0
                     : key == "quantized_weights" ? z.quantized_weights.on() : z.quantized_gradients.on();
    if (set && z.stage != 3) r.fail_value(key, "unset unless ZeRO stage is 3 (DeepSpeed ZeRO++ is a ZeRO-3 feature)");
  }
}

ZeroConfig read_zero(ObjectReader r) {
  ZeroConfig z;
  z.stage = static_cast<int>(r.integer_or("stage", 0));
  if (z.stage < 0 || z.stage > 3) r.fail_value("stage", "a ZeRO stage 0, 1, 2 or 3");
  z.prefetch_bucket = at_least(r, "prefetch_bucket", z.prefetch_bucket, 1);
  z.reduce_bucket = at_least(r, "reduce_bucket", z.reduce_bucket, 1);
  z.allgather_bucket = at_least(r, "allgather_bucket", z.allgather_bucket, 1);
  z.max_live_parameters = at_least(r, "max_live_parameters", z.max_live_parameters, 1);
  z.max_reuse_distance = at_least(r, "max_reuse_distance", z.max_reuse_distance, 0);
  z.param_persistence_threshold = at_least(r, "param_persistence_threshold", z.param_persistence_threshold, 0);
  z.overlap_comm = r.boolean_or("overlap_comm", z.stage == 3);
  z.offload_optimizer = r.choice_or("offload_optimizer", {"none", "cpu"}, "none") == "cpu" ? Offload::kCpu
                                                                                        : Offload::kNone;
  if (z.offload_optimizer == Offload::kCpu && z.stage == 0) {
    r.fail_value("offload_optimizer", "\"none\" with ZeRO stage 0 (optimizer offload needs stage 1, 2 or 3)");
  }
  z.offload_param = r.choice_or("offload_param", {"none", "cpu"}, "none") == "cpu" ? Offload::kCpu : Offload::kNone;
  if (z.offload_param == Offload::kCpu && z.stage != 3) {
    r.fail_value("offload_param", "\"none\" unless ZeRO stage is 3 (parameter offload shards ZeRO-3's parameters)");
  }
  if (z.offload_param == Offload::kCpu && z.offload_optimizer != Offload::kCpu) {
    r.fail_value("offload_param", "\"none\", or \"offload_optimizer\": \"cpu\" with it (parameter offload is modelled "
                                  "as ZeRO-Infinity's CPU offload, the host optimizer writing each shard in place)");
  }
  z.keep_gathered_across_microbatches = r.boolean_or("keep_gathered_across_microbatches", false);
  if (z.keep_gathered_across_microbatches && z.stage != 3) {
    r.fail_value("keep_gathered_across_microbatches", "false unless ZeRO stage is 3");
  }
  read_hierarchy(r, z);
  r.finish();
  return z;
}

std::vector<int64_t> read_stage_layers(ObjectReader& r) {
  if (!r.has("stage_layers")) return {};
  const json& arr = r.raw("stage_layers");
  if (!arr.is_array()) r.fail_value("stage_layers", "an array of layer counts, one per pipeline stage");
  std::vector<int64_t> layers;
  for (std::size_t i = 0; i < arr.size(); ++i) {
    if (!arr[i].is_number_integer() || arr[i].get<int64_t>() < 1 || arr[i].get<int64_t>() > limits::kLayers) {
      throw SpecError(r.file(), r.pointer_of("stage_layers") + "/" + std::to_string(i),
                      "expected a positive layer count, got " + describe(arr[i]));
    }
    layers.push_back(arr[i].get<int64_t>());
  }
  return layers;
}

[[noreturn]] void reject(const Plan& p, const std::string& key, const std::string& detail) {
  throw SpecError(p.file, "/" + key, detail);
}

std::string n(int64_t v) { return std::to_string(v); }

void check_shapes(const Plan& p, const Model& m) {
  const std::string model = " of model " + m.name;
  if (m.heads % p.tp != 0) reject(p, "tp", "expected a divisor of heads (" + n(m.heads) + model + "), got " + n(p.tp));
  if (m.kv_heads % p.tp != 0 && p.tp % m.kv_heads != 0) {
    reject(p, "tp", "expected a divisor or multiple of kv_heads (" + n(m.kv_heads) + model + "), got " + n(p.tp));
  }
  if (m.ffn_hidden % p.tp != 0) {
    reject(p, "tp", "expected a divisor of ffn_hidden (" + n(m.ffn_hidden) + model + "), got " + n(p.tp));
  }
  if (p.cp > 1 && m.seq_len % (2 * p.cp) != 0) {
    reject(p, "cp", "expected 2 × cp dividing seq_len (" + n(m.seq_len) + model +
                        "): each cp rank takes a chunk from the front and one from the back of the sequence "
                        "(Megatron-Core get_batch_on_this_cp_rank), got cp " + n(p.cp));
  }
  if (p.cp > 1 && p.cp_comm == CpComm::kA2a) {
    if ((m.heads / p.tp) % p.cp != 0 || m.kv_heads % (p.tp * p.cp) != 0) {
      reject(p, "cp", "expected cp dividing the heads and the kv_heads of a tp rank (" + n(m.heads) + " and " + n(m.kv_heads) +
                          model + " over tp " + n(p.tp) + ") with \"cp_comm_type\": \"a2a\", which scatters heads over cp, "
                          "got cp " + n(p.cp));
    }
  }
  if (p.sequence_parallel && (m.seq_len / p.cp) % p.tp != 0) {
    reject(p, "sequence_parallel", "expected a rank's sequence, seq_len / cp (" + n(m.seq_len) + " / " + n(p.cp) +
                                       "), divisible by tp (" + n(p.tp) + ")");
  }
  const int64_t chunks = p.pp * p.virtual_stages;
  if (chunks > m.layers) {
    reject(p, p.virtual_stages > 1 ? "virtual_stages" : "pp",
           "expected pp × virtual_stages (" + n(p.pp) + " × " + n(p.virtual_stages) + " = " + n(chunks) +
               ") at most the model's " + n(m.layers) + " layers (one layer per chunk at least)");
  }
  if (p.stage_layers.empty()) return;
  if (static_cast<int64_t>(p.stage_layers.size()) != p.pp) {
    reject(p, "stage_layers", "expected one entry per pipeline stage (pp = " + n(p.pp) + "), got " +
                                  n(static_cast<int64_t>(p.stage_layers.size())));
  }
  const int64_t sum = std::accumulate(p.stage_layers.begin(), p.stage_layers.end(), int64_t{0});
  if (sum != m.layers) {
    reject(p, "stage_layers", "expected layer counts summing to the model's " + n(m.layers) + " layers, got " + n(sum));
  }
  for (std::size_t i = 0; i < p.stage_layers.size(); ++i) {
    if (p.stage_layers[i] < p.virtual_stages) {
      reject(p, "stage_layers/" + std::to_string(i),
             "expected at least virtual_stages (" + n(p.virtual_stages) + ") layers, got " + n(p.stage_layers[i]));
    }
  }
}

bool deepspeed(Framework f) { return f == Framework::kDeepSpeed || f == Framework::kDeepSpeed05; }
bool fsdp(Framework f) { return f == Framework::kFsdp || f == Framework::kFsdp2; }
bool megatron(Framework f) { return f == Framework::kMegatron || f == Framework::kMegatron2021; }

// The hierarchical and quantized ZeRO fields against the data-parallel size, the framework that
// runs them and the dtype (each rule's source: core/spec/framework.hpp, "ZeRO across nodes").
void check_hierarchy(const Plan& p, const Training& t) {
  const ZeroConfig& z = p.zero;
  const Framework f = t.framework;
  const std::string fw = std::string(" (training framework ") + to_string(f) + ")";
  if (p.cp > 1 && (z.shard_group > 0 || z.hpz_group > 0 || z.local_group > 0 || z.quantized_weights.on() ||
                   z.quantized_gradients.on())) {
    reject(p, "cp", "1 with hierarchical or quantized ZeRO (shard_group, hpz_group, local_group, quantized_*): "
                    "their groups with context parallelism are not modelled, got cp " + n(p.cp));
  }
  const auto divides_dp = [&](const std::string& key, int64_t v) {
    if (p.dp % v != 0) reject(p, "zero/" + key, "expected a divisor of dp (" + n(p.dp) + "), got " + n(v));
  };
  if (z.shard_group > 0) {
    divides_dp("shard_group", z.shard_group);
    const std::string key = "zero/shard_group";
    if (f == Framework::kDeepSpeed05 || f == Framework::kMegatron2021) {
      reject(p, key, "unset: hierarchical partitioning is not in " + std::string(to_string(f)) +
                         " (DeepSpeed's MiCS, FSDP's hybrid sharding and Megatron-LM's optimizer instances came later)");
    }
    if (deepspeed(f) && z.stage != 3) reject(p, key, "unset below ZeRO stage 3: DeepSpeed's MiCS is a ZeRO-3 engine" + fw);
    if (fsdp(f) && z.stage < 2) {
      reject(p, key, "ZeRO stage 2 (_HYBRID_SHARD_ZERO2) or 3 (HYBRID_SHARD): FSDP's hybrid sharding shards gradients" + fw);
    }
    if (megatron(f) && z.stage != 1) reject(p, key, "ZeRO stage 1: Megatron-LM's optimizer instances shard the distributed optimizer" + fw);
    const ReplicaSync sync = replica_sync(z, f);
    if ((deepspeed(f) || megatron(f)) && sync != ReplicaSync::kStep) {
      reject(p, "zero/replica_sync", std::string("\"step\": ") +
                                         (deepspeed(f) ? "MiCS all-reduces gradient shards across replicas at the accumulation boundary"
                                                       : "Megatron-LM all-reduces across optimizer instances once a step") + fw);
    }
    if (f == Framework::kFsdp && sync != ReplicaSync::kMicroBatch) {
      reject(p, "zero/replica_sync", "\"micro_batch\": FSDP's HYBRID_SHARD all-reduces every backward that syncs gradients "
                                     "(FSDP2 can defer it, set_requires_all_reduce(False))" + fw);
    }
    if (deepspeed(f) && (z.offload_optimizer != Offload::kNone || z.offload_param != Offload::kNone)) {
      reject(p, key, "unset with offload: DeepSpeed's MiCS has no CPU offload" + fw);
    }
  }
  if (z.hierarchical_gather) {
    if (!deepspeed(f)) reject(p, "zero/hierarchical_gather", "false: the hierarchical gather is MiCS's (DeepSpeed)" + fw);
    if (z.local_group == 0 || z.shard_group % z.local_group != 0 || z.local_group >= z.shard_group) {
      reject(p, "zero/hierarchical_gather", "local_group dividing shard_group (" + n(z.shard_group) + ") and smaller than it: "
                                            "MiCS gathers across the shard group's nodes, then inside each (it asserts more than one node)");
    }
  }
  // hpZ: DeepSpeed ZeRO++, or FSDP2's reshard_after_forward=<int> (a smaller world after forward)
  if (z.hpz_group > 1 && f != Framework::kDeepSpeed && f != Framework::kFsdp2) {
    reject(p, "zero/hpz_group", "unset: a secondary partition is DeepSpeed ZeRO++'s hpZ or FSDP2's reshard_after_forward=<int>" + fw);
  }
  if ((z.quantized_weights.on() || z.quantized_gradients.on()) && f != Framework::kDeepSpeed) {
    reject(p, z.quantized_weights.on() ? "zero/quantized_weights" : "zero/quantized_gradients",
           "false: quantized ZeRO communication is DeepSpeed ZeRO++'s (qwZ, qgZ)" + fw);
  }
  if (z.hpz_group > 1) divides_dp("hpz_group", z.hpz_group);
  if (z.local_group > 0) divides_dp("local_group", z.local_group);
  if (z.quantized_gradients.on() && z.local_group == 0) {
    reject(p, "zero/quantized_gradients", "local_group set too: qgZ all-to-alls inside each node first, then across nodes, "
                                          "so it needs the data-parallel ranks of a node");
  }
}

// Expert parallelism against the model and the framework (Plan::ep; docs/program.md "Mixture of
// experts"). Megatron-Core's folding: the expert grid etp × ep × edp covers a stage's tp · cp · dp
// ranks (parallel_state.py); with tp > 1 it asserts sequence parallelism (arguments.py: "When
// using MoE and tensor parallelism, sequence parallelism must be used"); DeepSpeed-MoE carves its
// expert groups from the data-parallel ranks of one tp index and is not compatible with ZeRO-3.
void check_experts(const Plan& p, const Model& m, const Training& t) {
  const std::string fw = std::string(" (training framework ") + to_string(t.framework) + ")";
  if (!m.moe.on()) {
    if (p.ep > 1) reject(p, "ep", "1: model " + m.name + " has no experts, got ep " + n(p.ep));
    if (p.etp > 1) reject(p, "etp", "1: model " + m.name + " has no experts, got etp " + n(p.etp));
    if (p.moe_dispatcher != MoeDispatcher::kAllToAll) {
      reject(p, "moe_dispatcher", "absent: model " + m.name + " has no experts to dispatch tokens to");
    }
    return;
  }
  if (m.moe.shared_ffn_hidden % p.tp != 0) {
    reject(p, "tp", "a divisor of the shared experts' width (" + n(m.moe.shared_ffn_hidden) + " of model " + m.name +
                    "), which tensor parallelism splits like an MLP, got " + n(p.tp));
  }
  if (m.moe.experts % p.ep != 0) {
    reject(p, "ep", "a divisor of the experts (" + n(m.moe.experts) + " of model " + m.name + "), got ep " + n(p.ep));
  }
  if (m.moe.ffn_hidden % p.etp != 0) {
    reject(p, "etp", "a divisor of the routed experts' width (" + n(m.moe.ffn_hidden) + " of model " + m.name +
                     "), which expert tensor parallelism splits like an MLP, got etp " + n(p.etp));
  }
  if ((p.tp * p.cp * p.dp) % (p.ep * p.etp) != 0) {
    reject(p, p.etp > 1 ? "etp" : "ep",
           "ep × etp a divisor of tp × cp × dp (" + n(p.tp * p.cp * p.dp) + "): the expert grid folds into a stage's "
           "tensor-, context- and data-parallel ranks (Megatron-Core), got ep " + n(p.ep) + " × etp " + n(p.etp));
  }
  if (deepspeed(t.framework) && p.etp > 1) {
    reject(p, "etp", "1: DeepSpeed-MoE keeps each expert whole on its expert-parallel rank" + fw);
  }
  if (p.moe_dispatcher == MoeDispatcher::kAllGather) {
    if (t.framework != Framework::kMegatron) {
      reject(p, "moe_dispatcher", "\"alltoall\": the all-gather token dispatcher is Megatron-Core's" + fw);
    }
    if (m.mlp_bias) {
      reject(p, "moe_dispatcher", "\"alltoall\" for experts with biases: Megatron-Core's all-gather dispatcher does not "
                                  "support them (MoEAllGatherTokenDispatcher: \"Bias is not supported\")");
    }
  }
  if (p.moe_dispatcher == MoeDispatcher::kFlex) {
    if (t.framework != Framework::kMegatron) {
      reject(p, "moe_dispatcher", "\"alltoall\": the flex token dispatcher (DeepEP) is Megatron-Core's" + fw);
    }
    if (p.ep * p.etp < 2) {
      reject(p, "moe_dispatcher", "\"alltoall\" with ep × etp = 1: Megatron-Core asserts \"DeepEP dispatcher requires "
                                  "TPxEP > 1\" (MoEFlexTokenDispatcher)");
    }
    if (!deepep_group_size(p.ep * p.etp)) {
      reject(p, "moe_dispatcher", "\"alltoall\" with ep × etp = " + n(p.ep * p.etp) + ": DeepEP has kernel configs for "
                                  "expert grids of 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 144 and 160 ranks only and "
                                  "asserts \"Unsupported number of EP ranks\" (deep_ep/buffers/legacy.py)");
    }
    if (t.moe_pad_to_capacity) {
      reject(p, "moe_dispatcher", "\"alltoall\" with moe_pad_to_capacity: Megatron-Core refuses \"Flex token dispatcher "
                                  "with deepep backend does not support moe_pad_expert_input_to_capacity\"");
    }
  }
  if (p.tp > 1 && !p.sequence_parallel) {
    reject(p, "sequence_parallel", "true with tp > 1 for a mixture-of-experts model: each tp rank routes its own "
                                   "sequence shard (Megatron-Core asserts it)");
  }
  if (p.zero.stage == 3 && p.expert_dp() != p.dp_cp()) {
    reject(p, "zero/stage", "at most 2 with experts held by other ranks than the dense layers' data-parallel group "
                            "(ep > 1 or tp > 1): ZeRO-3 does not partition experts over their own data-parallel group "
                            "(DeepSpeed-MoE is not compatible with ZeRO-3; Megatron-Core has no ZeRO-3)");
  }
  const ZeroConfig& z = p.zero;
  if (p.expert_dp() != p.dp_cp() && (z.shard_group > 0 || z.hpz_group > 0 || z.quantized_weights.on() || z.quantized_gradients.on())) {
    reject(p, "zero", "plain (no shard_group, hpz_group or quantized communication) where the experts' data-parallel group "
                      "is not the dense one (ep > 1 or tp > 1): hierarchical and quantized ZeRO over it are not modelled");
  }
  if (deepspeed(t.framework) && p.ep > 1 && p.tp > 1) {
    reject(p, "ep", "1 with tp > 1: DeepSpeed-MoE carves expert-parallel groups from the data-parallel ranks of one tp "
                    "index, and does not split a micro-batch's tokens over tp" + fw);
  }
}

// Which frameworks run context parallelism, and how (core/spec/framework.hpp has the sources):
// Megatron-Core every cp_comm_type; DeepSpeed the all-to-all (DeepSpeed-Ulysses); FSDP2 with
// torch's context_parallel (torchtitan) the ring and the all-gather.
void check_context_parallel(const Plan& p, const Training& t) {
  if (p.cp == 1) return;
  const Framework f = t.framework;
  const std::string fw = std::string(" (training framework ") + to_string(f) + ")";
  if (f == Framework::kMegatron) return;
  if (f == Framework::kDeepSpeed && p.cp_comm == CpComm::kA2a) return;
  if (f == Framework::kFsdp2 && p.cp_comm != CpComm::kA2a) return;
  if (f == Framework::kDeepSpeed) {
    reject(p, "cp_comm_type", "\"a2a\": DeepSpeed's context parallelism is DeepSpeed-Ulysses' all-to-all over heads" + fw);
  }
  if (f == Framework::kFsdp2) {
    reject(p, "cp_comm_type", "\"p2p\" or \"all_gather\": torch's context_parallel rotates K/V around a ring or "
                              "all-gathers them" + fw);
  }
  reject(p, "cp", "1: " + std::string(to_string(f)) + " has no context parallelism (Megatron-Core, DeepSpeed-Ulysses and "
                  "torch's context_parallel with FSDP2 do)" + fw + ", got cp " + n(p.cp));
}

}  // namespace

const char* to_string(MoeDispatcher d) {
  switch (d) {
    case MoeDispatcher::kAllGather: return "allgather";
    case MoeDispatcher::kFlex: return "flex";
    default: return "alltoall";
  }
}

const char* to_string(CpComm c) {
  switch (c) {
    case CpComm::kP2p: return "p2p";
    case CpComm::kAllGather: return "all_gather";
    case CpComm::kA2a: return "a2a";
  }
  return "?";
}

ReplicaSync replica_sync(const ZeroConfig& z, Framework framework) {
  if (z.replica_sync) return *z.replica_sync;
  return fsdp(framework) ? ReplicaSync::kMicroBatch : ReplicaSync::kStep;
}

const char* to_string(ReplicaSync s) { return s == ReplicaSync::kStep ? "step" : "micro_batch"; }

const char* to_string(Schedule s) {
  switch (s) {
    case Schedule::kGpipe: return "gpipe";
    case Schedule::k1F1B: return "1f1b";
    case Schedule::kInterleaved: return "interleaved";
    case Schedule::kZbH1: return "zb-h1";
  }
  return "?";
}

const char* to_string(Recompute r) {
  switch (r) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kFull: return "full";
  }
  return "?";
}

const char* to_string(Offload o) { return o == Offload::kCpu ? "cpu" : "none"; }

Plan plan_from_json(const json& j, const std::string& file) {
  ObjectReader r(j, file, "");
  Plan p;
  p.file = file;
  p.tp = at_least(r, "tp", 1, 1, limits::kGpus);
  p.pp = at_least(r, "pp", 1, 1, limits::kGpus);
  p.dp = at_least(r, "dp", 1, 1, limits::kGpus);
  p.cp = at_least(r, "cp", 1, 1, limits::kGpus);
  const std::string comm = r.choice_or("cp_comm_type", {"p2p", "all_gather", "a2a"}, "p2p");
  p.cp_comm = comm == "a2a" ? CpComm::kA2a : comm == "all_gather" ? CpComm::kAllGather : CpComm::kP2p;
  p.ep = at_least(r, "ep", 1, 1, limits::kGpus);
  p.etp = at_least(r, "etp", 1, 1, limits::kGpus);
  const std::string dispatcher = r.choice_or("moe_dispatcher", {"alltoall", "allgather", "flex"}, "alltoall");
  p.moe_dispatcher = dispatcher == "allgather" ? MoeDispatcher::kAllGather
                     : dispatcher == "flex"    ? MoeDispatcher::kFlex
                                               : MoeDispatcher::kAllToAll;
  p.micro_batch = at_least(r, "micro_batch", 1, 1, limits::kGlobalBatch);
  p.micro_batches = at_least(r, "micro_batches", 1, 1, limits::kMicroBatches);
  p.schedule = parse_schedule(r.choice_or("schedule", {"gpipe", "1f1b", "interleaved", "zb-h1"}, "1f1b"));
  p.virtual_stages = at_least(r, "virtual_stages", 1, 1, limits::kLayers);
  if (p.schedule == Schedule::kInterleaved) {
    if (p.virtual_stages < 2) r.fail_value("virtual_stages", "at least 2 with \"schedule\": \"interleaved\"");
    if (p.pp < 2) r.fail_value("pp", "at least 2 with \"schedule\": \"interleaved\"");
    if (p.micro_batches % p.pp != 0) {
      r.fail_value("micro_batches", "a multiple of pp (" + n(p.pp) + ") with the interleaved schedule");
    }
  } else if (p.virtual_stages != 1) {
    r.fail_value("virtual_stages", "1 unless \"schedule\" is \"interleaved\"");
  }
  p.stage_layers = read_stage_layers(r);
  p.sequence_parallel = r.boolean_or("sequence_parallel", false);
  if (p.sequence_parallel && p.tp < 2) r.fail_value("sequence_parallel", "false when tp is 1 (it splits over tp)");
  p.overlap_p2p = r.boolean_or("overlap_p2p", false);
  p.recompute = parse_recompute(r.choice_or("recompute", {"none", "selective", "full"}, "none"));
  if (r.has("zero")) p.zero = read_zero(r.object("zero"));
  p.source = r.string_or("source", "");
  r.finish();
  return p;
}

Plan load_plan(const std::string& path) { return plan_from_json(read_json_file(path), path); }

void validate_plan(const Plan& p, const Model& model, const Training& t, int64_t gpus) {
  const Model m = with_training_length(model, t);
  const auto world = checked_mul(p.tp * p.cp, p.pp, p.dp);
  if (p.tp * p.cp > limits::kGpus || !world || *world > limits::kGpus) {
    reject(p, "dp", "expected tp × cp × pp × dp (" + n(p.tp) + " × " + n(p.cp) + " × " + n(p.pp) + " × " + n(p.dp) +
                        ") to equal the GPU count, " + n(gpus));
  }
  const auto micro_total = checked_mul(p.micro_batch, p.micro_batches, p.dp);
  if (!micro_total) {
    reject(p, "micro_batches", "expected micro_batch × micro_batches × dp (" + n(p.micro_batch) + " × " +
                                   n(p.micro_batches) + " × " + n(p.dp) + ") to equal global_batch " + n(t.global_batch));
  }
  if (const auto tokens = checked_mul(t.global_batch, m.seq_len); !tokens || *tokens > limits::kTokensPerStep) {
    const auto [file, pointer] = t.origin_of("global_batch");
    throw SpecError(file, pointer, "expected global_batch × seq_len (" + n(t.global_batch) + " × " + n(m.seq_len) +
                                       ") at most " + n(limits::kTokensPerStep) + " tokens per step");
  }
  if (p.world() != gpus) {
    reject(p, "dp", (p.cp > 1 ? "expected tp × cp × pp × dp (" + n(p.tp) + " × " + n(p.cp) + " × "
                              : "expected tp × pp × dp (" + n(p.tp) + " × ") +
                        n(p.pp) + " × " + n(p.dp) + " = " + n(p.world()) + ") to equal the GPU count, " + n(gpus));
  }
  const int64_t batch = p.micro_batch * p.micro_batches * p.dp;
  if (batch != t.global_batch) {
    reject(p, "micro_batches", "expected micro_batch × micro_batches × dp (" + n(p.micro_batch) + " × " +
                                   n(p.micro_batches) + " × " + n(p.dp) + " = " + n(batch) +
                                   ") to equal global_batch " + n(t.global_batch) +
                                   (t.label().empty() ? "" : " of " + t.label()));
  }
  check_shapes(p, m);
  if (m.mla.on() && p.cp > 1) {
    reject(p, "cp", "1 with multi-head latent attention (model " + m.name + "): its context-parallel exchanges are not "
                    "modelled yet, got cp " + n(p.cp));
  }
  check_experts(p, m, t);
  check_context_parallel(p, t);
  check_hierarchy(p, t);
  if (p.zero.stage > t.max_zero_stage()) {
    reject(p, "zero/stage", "at most ZeRO stage " + n(t.max_zero_stage()) + " " + t.zero_stage_reason() +
                                (t.label().empty() ? "" : " (" + t.label() + ")"));
  }
}

json to_json(const ZeroConfig& z) {
  json j = {{"stage", z.stage},
          {"prefetch_bucket", z.prefetch_bucket},
          {"reduce_bucket", z.reduce_bucket},
          {"allgather_bucket", z.allgather_bucket},
          {"max_live_parameters", z.max_live_parameters},
          {"max_reuse_distance", z.max_reuse_distance},
          {"param_persistence_threshold", z.param_persistence_threshold},
          {"overlap_comm", z.overlap_comm},
          {"offload_optimizer", to_string(z.offload_optimizer)},
          {"offload_param", to_string(z.offload_param)},
          {"keep_gathered_across_microbatches", z.keep_gathered_across_microbatches}};
  // the hierarchical and quantized fields only when set, so plain plans read as before
  if (z.shard_group > 0) j["shard_group"] = z.shard_group;
  if (z.replica_sync) j["replica_sync"] = to_string(*z.replica_sync);
  if (z.hierarchical_gather) j["hierarchical_gather"] = true;
  if (z.hpz_group > 0) j["hpz_group"] = z.hpz_group;
  if (z.local_group > 0) j["local_group"] = z.local_group;
  if (z.quantized_weights.on()) j["quantized_weights"] = {{"bits", z.quantized_weights.bits}, {"block", z.quantized_weights.block}};
  if (z.quantized_gradients.on()) j["quantized_gradients"] = {{"bits", z.quantized_gradients.bits}};
  return j;
}

json to_json(const Plan& p) {
  json j = {{"tp", p.tp},
            {"pp", p.pp},
            {"dp", p.dp},
            {"micro_batch", p.micro_batch},
            {"micro_batches", p.micro_batches},
            {"schedule", to_string(p.schedule)},
            {"virtual_stages", p.virtual_stages},
            {"sequence_parallel", p.sequence_parallel},
            {"overlap_p2p", p.overlap_p2p},
            {"recompute", to_string(p.recompute)},
            {"zero", to_json(p.zero)}};
  if (p.cp > 1) {  // only when set, so plans without context parallelism read as before
    j["cp"] = p.cp;
    j["cp_comm_type"] = to_string(p.cp_comm);
  }
  if (p.ep > 1) j["ep"] = p.ep;   // likewise for expert parallelism
  if (p.etp > 1) j["etp"] = p.etp;
  if (p.moe_dispatcher != MoeDispatcher::kAllToAll) j["moe_dispatcher"] = to_string(p.moe_dispatcher);
  if (!p.stage_layers.empty()) j["stage_layers"] = p.stage_layers;
  if (!p.source.empty()) j["source"] = p.source;
  return j;
}

std::string across_nodes_class(const ZeroConfig& z, int64_t dp) {
  if (secondary_partition(z, dp) || z.quantized_weights.on() || z.quantized_gradients.on()) return "zeropp";
  return hierarchical(z, dp) ? "shard" : "";
}

std::string validation_class(const Plan& p, const Model& m) {
  return m.moe.on() ? "moe" : across_nodes_class(p.zero, p.dp);
}

std::string zero_variant(const ZeroConfig& z, int64_t dp) {
  std::string out;
  if (hierarchical(z, dp)) out += " shard" + n(z.shard_group);
  if (z.replica_sync) out += std::string(" sync=") + to_string(*z.replica_sync);
  if (z.hierarchical_gather) out += " hgather";
  if (z.hpz_group > 0) out += " hpz" + n(z.hpz_group);
  if (z.quantized_weights.on()) out += " qwz";
  if (z.quantized_gradients.on()) out += " qgz";
  return out;
}

std::string summary(const Plan& p) {
  std::ostringstream out;
  out << "tp" << p.tp;
  if (p.cp > 1) out << " cp" << p.cp << (p.cp_comm == CpComm::kP2p ? "" : p.cp_comm == CpComm::kA2a ? "-a2a" : "-ag");
  if (p.ep > 1) out << " ep" << p.ep;
  if (p.etp > 1) out << " etp" << p.etp;
  if (p.moe_dispatcher == MoeDispatcher::kAllGather) out << " ag-dispatch";
  if (p.moe_dispatcher == MoeDispatcher::kFlex) out << " flex-dispatch";
  out << " pp" << p.pp << " dp" << p.dp << " mb" << p.micro_batch << "x" << p.micro_batches << " "
      << to_string(p.schedule);
  if (p.virtual_stages > 1) out << " v" << p.virtual_stages;
  out << " zero" << p.zero.stage;
  if (p.sequence_parallel) out << " sp";
  if (p.recompute != Recompute::kNone) out << " recompute=" << to_string(p.recompute);
  if (p.zero.offload_optimizer == Offload::kCpu) out << " offload=cpu";
  if (p.zero.offload_param == Offload::kCpu) out << " offload_param=cpu";
  out << zero_variant(p.zero, p.dp);
  return out.str();
}

}  // namespace stagecraft::spec
