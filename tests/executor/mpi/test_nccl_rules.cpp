// NCCL's rules over the interpreter (executor/comm/nccl_rules.hpp): the tiny model, 8 layers, one
// step of every plan of the lowering sweep (test_framework.cpp's EveryFrameworkSchedule...: every
// framework, the shared-communicator DeepSpeed too, x tied or untied head x (tp, pp, dp) in
// {(1,2,2), (2,2,2), (1,4,2), (2,1,4)} x every schedule x ZeRO 0-3 (Megatron-LM 0-1) x overlap,
// full recompute; the plans of every other framework — deepspeed-0.5, fsdp2 and the shared-communicator
// DeepSpeed — in bf16, whose 16-bit wires carry a datatype of their own), and context-parallel plans (each comm type a framework runs, 4 layouts, their
// schedules, two ZeRO stages), runs on a data MPI communicator through NcclRulesCommunicator, which fails at
// the first collective issued out of order, message taken out of order or wait that would hang
// under NCCL's in-order streams. The launch runs the plans of its own world size (4 or 8 ranks):
// with STAGECRAFT_NCCL_RULES_FULL=1 (bench/nccl_rules.sh) all of them, 352 and 968; otherwise one
// of each (framework, layout, schedule, ZeRO stage)'s four tied x overlap variants, taken in turn
// so that each variant appears (88 and 242 plans: 8 ranks on 2 cores take minutes for all under load),
// and the 50 and 80 cp plans.
// A planted reordering (one rank issuing a bucket's two tensors' all-gathers swapped; one stage
// sending two micro-batches' activations swapped) must be caught and named.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <tuple>

#include <gtest/gtest.h>
#include <mpi.h>

#include "core/program/format.hpp"
#include "core/program/lower.hpp"
#include "executor/comm/forwarding.hpp"
#include "executor/comm/mpi.hpp"
#include "executor/comm/nccl_rules.hpp"
#include "executor/errors.hpp"
#include "executor/runner.hpp"
#include "harness.hpp"

namespace stagecraft::executor {
namespace {

NcclRulesOptions options_for(const program::Program& prog) {
  NcclRulesOptions o;
  o.describe = [&prog](int64_t rank, int32_t instr) {
    const program::RoleProgram& role = prog.role_of(rank);
    return "rank " + std::to_string(rank) + " " + program::describe(prog, role, instr - role.first_id);
  };
  o.wait_deadline_s = 20;
  return o;
}

int world_rank_and_size(int& size) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return rank;
}

struct SweepPlan {
  std::string name;
  program::Program prog;
};

// The lowering sweep's plans for the tiny model at 8 layers (test_framework.cpp), of one world size.
std::vector<SweepPlan> sweep(int world, bool full) {
  const std::vector<nlohmann::json> frameworks = {"deepspeed", "deepspeed-0.5", "fsdp", "fsdp2", "megatron",
                                                  {{"name", "deepspeed"}, {"reduce_communicator", "shared"}}};
  std::vector<SweepPlan> out;
  const std::vector<std::tuple<int, int, int>> layouts = {{1, 2, 2}, {2, 2, 2}, {1, 4, 2}, {2, 1, 4}};
  const std::vector<std::pair<const char*, int>> schedules = {{"1f1b", 1}, {"gpipe", 1}, {"zb-h1", 1}, {"interleaved", 2}};
  for (bool tied : {true, false}) {
    spec::Model model = test::tiny_model();  // at a quarter of its width and sequence: the order of
    model.layers = 8;                         // operations is the question here, not the arithmetic
    model.hidden = 32, model.ffn_hidden = 128, model.seq_len = 16;
    model.tied_embeddings = tied;
    for (std::size_t f = 0; f < frameworks.size(); ++f) {
      const nlohmann::json& framework = frameworks[f];
      nlohmann::json tj = spec::to_json(test::tiny_training());
      tj["framework"] = framework;
      const bool bf16 = f % 2 == 1;  // every other framework's plans in bf16: 16-bit wires, the datatypes compared
      if (bf16) tj["dtype"] = "bf16";
      const spec::Training training = spec::training_from_json(tj, "<sweep training>");
      const int max_zero = framework == "megatron" ? 1 : 3;
      for (std::size_t l = 0; l < layouts.size(); ++l) {
        const auto [tp, pp, dp] = layouts[l];
        if (tp * pp * dp != world) continue;
        for (std::size_t si = 0; si < schedules.size(); ++si) {
          const auto [schedule, v] = schedules[si];
          if (pp == 1 && v > 1) continue;
          for (int zero = 0; zero <= max_zero; ++zero) {
            for (bool overlap : {false, true}) {
              const std::size_t variant = (tied ? 2 : 0) + (overlap ? 1 : 0);
              if (!full && variant != (f + l + si + static_cast<std::size_t>(zero)) % 4) continue;
              const nlohmann::json plan = {{"tp", tp}, {"pp", pp}, {"dp", dp}, {"micro_batches", 8 / dp}, {"schedule", schedule},
                                           {"virtual_stages", v}, {"recompute", "full"},
                                           {"zero", {{"stage", zero}, {"overlap_comm", overlap}, {"reduce_bucket", 20000},
                                                     {"prefetch_bucket", 20000}}}};
              const std::string name = framework.dump() + (tied ? " tied" : " untied") + " tp" + std::to_string(tp) +
                                       " pp" + std::to_string(pp) + " dp" + std::to_string(dp) + " " + schedule +
                                       " zero" + std::to_string(zero) + (overlap ? " overlap" : "") + (bf16 ? " bf16" : "");
              out.push_back({name, program::lower(model, training, spec::plan_from_json(plan, "<sweep plan>"))});
            }
          }
        }
      }
    }
  }
  // Context parallelism: each comm type where a framework runs it, with (tp, cp, pp, dp) in
  // {(1,2,2,1), (1,2,1,2)} on 4 ranks and {(2,2,2,1), (1,2,2,2)} on 8, every schedule of the
  // layout, the framework's lowest and highest ZeRO stage
  spec::Model model = test::tiny_model();
  model.layers = 8, model.hidden = 32, model.ffn_hidden = 128, model.seq_len = 16;
  const std::vector<std::tuple<int, int, int, int>> cp_layouts = {{1, 2, 2, 1}, {1, 2, 1, 2}, {2, 2, 2, 1}, {1, 2, 2, 2}};
  const std::vector<std::tuple<const char*, const char*, int>> cp_frameworks = {
      {"megatron", "p2p", 1}, {"megatron", "all_gather", 1}, {"megatron", "a2a", 1}, {"deepspeed", "a2a", 3}, {"fsdp2", "p2p", 3}};
  for (const auto& [tp, cp, pp, dp] : cp_layouts) {
    if (tp * cp * pp * dp != world) continue;
    for (const auto& [framework, comm, max_zero] : cp_frameworks) {
      nlohmann::json tj = spec::to_json(test::tiny_training());
      tj["framework"] = framework;
      const spec::Training training = spec::training_from_json(tj, "<sweep training>");
      for (std::size_t si = 0; si < schedules.size(); ++si) {
        const auto [schedule, v] = schedules[si];
        if (pp == 1 && si > 0) continue;  // one schedule without a pipeline
        for (int zero : {0, max_zero}) {
          const nlohmann::json plan = {{"tp", tp}, {"cp", cp}, {"cp_comm_type", comm}, {"pp", pp}, {"dp", dp},
                                       {"micro_batches", 8 / dp}, {"schedule", schedule}, {"virtual_stages", v},
                                       {"recompute", "full"}, {"zero", {{"stage", zero}, {"reduce_bucket", 20000}, {"prefetch_bucket", 20000}}}};
          const std::string name = std::string(framework) + " tp" + std::to_string(tp) + " cp" + std::to_string(cp) + "-" + comm +
                                   " pp" + std::to_string(pp) + " dp" + std::to_string(dp) + " " + schedule + " zero" +
                                   std::to_string(zero);
          out.push_back({name, program::lower(model, training, spec::plan_from_json(plan, "<sweep plan>"))});
        }
      }
    }
  }
  return out;
}

struct Checked {
  int64_t collectives = 0, messages = 0;
};

// One step of `prog` through the rules over `data` and `shadow` (MPI communicators of its placement,
// shared by the plans of one layout: every operation of a step completes within it).
Checked one_step_under_rules(const program::Program& prog, MpiCommunicator& data, MpiCommunicator& shadow) {
  NcclRulesCommunicator rules(data, shadow, options_for(prog));
  const Corpus corpus = test::corpus_for(prog);
  RunnerOptions o;
  o.stall_timeout_s = 20;
  Runner runner(prog, rules, corpus, o);
  runner.step();
  return {rules.collectives_checked(), rules.messages_checked()};
}

TEST(NcclRules, EveryPlanOfTheSweepKeepsThem) {
  int world = 0;
  const int rank = world_rank_and_size(world);
  const auto l0 = std::chrono::steady_clock::now();
  const char* full_env = std::getenv("STAGECRAFT_NCCL_RULES_FULL");
  const bool full = full_env != nullptr && std::string(full_env) == "1";
  const std::vector<SweepPlan> plans = sweep(world, full);
  if (rank == 0) std::printf("lowered in %.1f s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - l0).count());
  // per world size: tied or not x (5 frameworks x 4 stages + megatron's 2) x 2 overlaps x the layouts'
  // schedules: 4 ranks (1,2,2): 4; 8 ranks (2,2,2), (1,4,2): 4 each, (2,1,4): 3; without `full`
  // one of the 2 x 2 tied x overlap variants
  // and the cp plans: 5 (framework, comm type) x 2 ZeRO stages x the layouts' schedules: 4 ranks
  // (1,2,2,1): 4, (1,2,1,2): 1; 8 ranks (2,2,2,1), (1,2,2,2): 4 each
  const int schedules = world == 4 ? 4 : 4 + 4 + 3, cp_schedules = world == 4 ? 4 + 1 : 4 + 4;
  ASSERT_EQ(plans.size(), static_cast<std::size_t>((5 * 4 + 2) * schedules * (full ? 2 * 2 : 1) + 5 * 2 * cp_schedules))
      << world << " ranks";
  const auto t0 = std::chrono::steady_clock::now();
  int64_t collectives = 0, messages = 0;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, std::pair<std::unique_ptr<MpiCommunicator>, std::unique_ptr<MpiCommunicator>>>
      comms;
  // under the sanitizers the 8-rank sweep runs every other plan (docs/reliability.md): every path
  // still, at half the cost of the pass's longest launch
#if defined(STAGECRAFT_SANITIZED)
  const std::size_t stride = world == 8 ? 2 : 1;
#else
  const std::size_t stride = 1;
#endif
  for (std::size_t i = 0; i < plans.size(); i += stride) {
    const SweepPlan& p = plans[i];
    SCOPED_TRACE(p.name);
    const program::Placement& pl = p.prog.placement;
    auto& [data, shadow] = comms[{pl.tp, pl.cp, pl.pp, pl.dp}];
    if (!data) data = std::make_unique<MpiCommunicator>(pl), shadow = std::make_unique<MpiCommunicator>(pl);
    Checked c;
    try {
      c = one_step_under_rules(p.prog, *data, *shadow);
    } catch (const std::exception& e) {
      ADD_FAILURE() << p.name << ": " << e.what();
      if (rank == 0) std::printf("FAILED %s: %s\n", p.name.c_str(), e.what());
      continue;
    }
    collectives += c.collectives;
    messages += c.messages;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t all_collectives = static_cast<int64_t>(MpiCommunicator(program::Placement{1, 1, world}).all_reduce_sum(
      static_cast<double>(collectives)));
  if (rank == 0) {
    std::printf("%zu plans on %d ranks, one step each: %lld collectives checked on rank 0 (%lld on all ranks), "
                "%lld messages received in order on rank 0, %.1f s\n",
                plans.size(), world, static_cast<long long>(collectives), static_cast<long long>(all_collectives),
                static_cast<long long>(messages), seconds);
  }
  EXPECT_GT(collectives, 0);
}

// The planted reorderings. Passes every call on to `inner`, except on `rank`, where it swaps two
// operations: kGathers, the first two all-gathers of one instruction with different element counts
// (a bucket's tensors gathered in another order); kSends, the first two activation sends to one
// peer (two micro-batches sent in the wrong order). A held operation is posted right after the one
// it is swapped with (a gather also once its instruction has issued everything, so nothing waits).
class Reordering final : public ForwardingCommunicator {
 public:
  enum class What { kGathers, kSends };
  Reordering(Communicator& inner, int64_t rank, What what) : ForwardingCommunicator(inner), rank_(rank), what_(what) {}
  bool planted() const { return planted_; }

  void label_next(int32_t instr) override {
    if (held_ && what_ == What::kGathers) post_held();
    inner_.label_next(instr);
  }
  Request isend(std::span<const float> d, int64_t peer, int32_t tag, Format wire = Format::kFp32) override {
    auto post = [this, d, peer, tag, wire] { return inner_.isend(d, peer, tag, wire); };
    if (what_ != What::kSends || !armed() || p2p_class(tag) != 0) return wrap(post());
    if (!held_) return hold(post, static_cast<int64_t>(d.size()), peer);
    if (peer != held_peer_) return wrap(post());
    const Request r = wrap(post());
    post_held();
    planted_ = true;
    return r;
  }
  Request irecv(std::span<float> d, int64_t peer, int32_t tag, Format wire = Format::kFp32) override {
    return wrap(inner_.irecv(d, peer, tag, wire));
  }
  Request iall_gather(Channel ch, std::span<float> b, std::span<const int64_t> counts,
                      Format wire = Format::kFp32) override {
    const std::vector<int64_t> c(counts.begin(), counts.end());
    auto post = [this, ch, b, c, wire] { return inner_.iall_gather(ch, b, c, wire); };
    if (what_ != What::kGathers || !armed()) return wrap(post());
    if (!held_) return hold(post, static_cast<int64_t>(b.size()), -1);
    if (static_cast<int64_t>(b.size()) == held_count_) {  // same size: swapping them would not show
      post_held();
      return hold(post, static_cast<int64_t>(b.size()), -1);
    }
    const Request r = wrap(post());
    post_held();
    planted_ = true;
    return r;
  }
  Request ireduce_scatter(Channel ch, std::span<const float> send, std::span<float> recv,
                          std::span<const int64_t> counts, Format wire = Format::kFp32) override {
    return wrap(inner_.ireduce_scatter(ch, send, recv, counts, wire));
  }
  Request iall_reduce(Channel ch, std::span<float> b, Format wire = Format::kFp32) override {
    return wrap(inner_.iall_reduce(ch, b, wire));
  }
  Request iall_reduce(Channel ch, std::span<double> b) override { return wrap(inner_.iall_reduce(ch, b)); }
  Request iall_reduce_max(Channel ch, std::span<float> b) override { return wrap(inner_.iall_reduce_max(ch, b)); }
  Request iall_gather_typed(Channel ch, TypedSpan b, std::span<const int64_t> counts) override {
    return wrap(inner_.iall_gather_typed(ch, b, counts));
  }
  Request iall_to_all(Channel ch, TypedSpan send, std::span<const int64_t> sc, TypedSpan recv,
                      std::span<const int64_t> rc) override {
    return wrap(inner_.iall_to_all(ch, send, sc, recv, rc));
  }
  bool test(Request& r) override {
    Request& in = inner_requests_.at(static_cast<std::size_t>(r.id));
    if (!in.valid() && held_ && held_id_ == r.id) {
      if (what_ == What::kSends) return false;  // held until the next send to its peer
      post_held();
    }
    if (!inner_.test(in)) return false;
    r.id = -1;
    return true;
  }
  void wait(Request& r) override {
    while (!test(r)) {
    }
  }

 private:
  bool armed() const { return inner_.rank() == rank_ && !planted_; }
  Request wrap(Request in) {
    inner_requests_.push_back(in);
    return Request{static_cast<int64_t>(inner_requests_.size()) - 1};
  }
  Request hold(std::function<Request()> post, int64_t count, int64_t peer) {
    held_ = std::move(post);
    held_count_ = count, held_peer_ = peer;
    held_id_ = static_cast<int64_t>(inner_requests_.size());
    inner_requests_.emplace_back();
    return Request{held_id_};
  }
  void post_held() {
    inner_requests_[static_cast<std::size_t>(held_id_)] = held_();
    held_ = nullptr;
  }

  int64_t rank_;
  What what_;
  bool planted_ = false;
  std::function<Request()> held_;
  int64_t held_id_ = -1, held_count_ = 0, held_peer_ = -1;
  std::vector<Request> inner_requests_;
};

// Runs one step of `spec` with `what` planted on rank `at`; returns this rank's error ("" if none).
std::string planted_step(const test::PlanSpec& spec, int64_t at, Reordering::What what, bool& planted) {
  const program::Program prog = test::lower(spec);
  MpiCommunicator data(prog.placement), shadow(prog.placement);
  NcclRulesCommunicator rules(data, shadow, options_for(prog));
  Reordering reorder(rules, at, what);
  const Corpus corpus = test::corpus_for(prog);
  RunnerOptions o;
  o.stall_timeout_s = 5;  // the ranks the violation does not reach stop waiting for the others
  Runner runner(prog, reorder, corpus, o);
  std::string error;
  try {
    runner.step();
  } catch (const std::exception& e) {
    error = e.what();
  }
  planted = reorder.planted();
  return error;
}

// deepspeed-0.5 gathers a ZeRO-3 bucket tensor by tensor: rank 1 issues two of them swapped. Every
// member of the dp group compares the same signatures and stops at the first collective that
// differs, before any data moves.
TEST(NcclRules, CatchAPlantedCollectiveReordering) {
  int world = 0;
  const int rank = world_rank_and_size(world);
  ASSERT_EQ(world, 4);
  bool planted = false;
  const std::string error = planted_step({.dp = 4, .micro_batches = 2, .zero = 3, .framework = spec::Framework::kDeepSpeed05},
                                         1, Reordering::What::kGathers, planted);
  if (rank == 1) {
    EXPECT_TRUE(planted);
  }
  if (rank == 0) std::printf("rank 0: %s\n", error.c_str());
  EXPECT_NE(error.find("NCCL rule: collectives of one communicator run in the order they are issued"), std::string::npos)
      << "rank " << rank << ": " << error;
  EXPECT_NE(error.find("dp communicator of lane dp-gather"), std::string::npos) << error;
  EXPECT_NE(error.find("GatherParams"), std::string::npos) << error;  // the instructions named
  EXPECT_NE(error.find("on rank 1"), std::string::npos) << error;
}

// Stage 0 (rank 0) sends micro-batch 1's activations before micro-batch 0's (sends overlap the
// next forward, so nothing waits for the held one). Over MPI the tags would sort them out; NCCL
// would hand micro-batch 1's activations to micro-batch 0's receive. The receiver names both
// instructions; the sender learns it from the refused acknowledgement.
TEST(NcclRules, CatchAPlantedMessageReordering) {
  int world = 0;
  const int rank = world_rank_and_size(world);
  ASSERT_EQ(world, 4);
  bool planted = false;
  const test::PlanSpec spec{.pp = 2, .dp = 2, .micro_batches = 4, .schedule = "gpipe", .overlap_p2p = true};
  const std::string error = planted_step(spec, 0, Reordering::What::kSends, planted);
  const program::Program prog = test::lower(spec);
  const int64_t receiver = prog.placement.rank(1, 0, 0);
  if (rank == 0) {
    EXPECT_TRUE(planted);
    EXPECT_NE(error.find("rank " + std::to_string(receiver) + " refused rank 0"), std::string::npos) << error;
  }
  if (rank == 0 || rank == receiver) std::printf("rank %d: %s\n", rank, error.c_str());
  if (rank == receiver) {
    EXPECT_NE(error.find("NCCL rule: point-to-point messages of one class are received in the order they are sent"),
              std::string::npos) << error;
    EXPECT_NE(error.find("message #1 of class activations from rank 0 to rank " + std::to_string(receiver)),
              std::string::npos) << error;
    EXPECT_NE(error.find("SendActivation mb=1"), std::string::npos) << error;
    EXPECT_NE(error.find("RecvActivation mb=0"), std::string::npos) << error;
  }
  EXPECT_FALSE(error.empty()) << "rank " << rank << " finished a step its peers could not";
}

// The datatype is part of a collective's signature (ncclDataType_t): an all-reduce over bf16 on
// every member passes and sums the rounded values (1 + 2^-9 goes as 1); the next one over bf16 on
// rank 1 and fp32 elsewhere stops every member before its data moves, naming both. (Named to run
// in the planted-collective launch.)
TEST(NcclRules, CatchAPlantedCollectiveDatatypeMismatch) {
  int world = 0;
  const int rank = world_rank_and_size(world);
  ASSERT_EQ(world, 4);
  const program::Placement pl{1, 1, 4};
  MpiCommunicator data(pl), shadow(pl);
  NcclRulesOptions o;
  o.wait_deadline_s = 20;
  NcclRulesCommunicator rules(data, shadow, o);
  const Channel ch{program::Group::kDp, program::Lane::kDpReduce};
  std::vector<float> agreed = {1 + std::ldexp(1.0f, -9)};
  rules.label_next(6);
  Request ok = rules.iall_reduce(ch, agreed, Format::kBf16);
  rules.wait(ok);
  EXPECT_EQ(agreed[0], 4.0f);
  std::vector<float> planted = {1.0f};
  std::string error;
  try {
    rules.label_next(7);
    Request bad = rules.iall_reduce(ch, planted, rank == 1 ? Format::kBf16 : Format::kFp32);
    rules.wait(bad);
  } catch (const NcclRuleError& e) {
    error = e.what();
  }
  if (rank == 0) std::printf("rank 0: %s\n", error.c_str());
  EXPECT_NE(error.find("NCCL rule: every member of a collective gives it the same datatype; collective #2 on the dp "
                       "communicator of lane dp-reduce"),
            std::string::npos) << "rank " << rank << ": " << error;
  EXPECT_NE(error.find("all-reduce (sum) of 1 bf16 elements (rank 1 instruction 7) on rank 1"), std::string::npos) << error;
  EXPECT_NE(error.find("all-reduce (sum) of 1 fp32 elements (rank " + std::to_string(rank == 1 ? 0 : rank) +
                       " instruction 7)"), std::string::npos) << error;
  EXPECT_EQ(rules.collectives_checked(), 1);
}

// A message's datatype is part of its signature: stage 0 sends each stage-1 peer a message over bf16
// that arrives rounded, then another over bf16 that the peer receives as fp32 — the receiver names
// both, the sender is refused. (Named to run in the planted-message launch.)
TEST(NcclRules, CatchAPlantedMessageDatatypeMismatch) {
  int world = 0;
  const int rank = world_rank_and_size(world);
  ASSERT_EQ(world, 4);
  const program::Placement pl{1, 2, 2};
  MpiCommunicator data(pl), shadow(pl);
  NcclRulesOptions o;
  o.wait_deadline_s = 20;
  NcclRulesCommunicator rules(data, shadow, o);
  const int64_t stage = pl.stage_of(rank), peer = pl.rank(1 - stage, pl.dp_index_of(rank), 0);
  const std::vector<float> out = {1 + std::ldexp(1.0f, -9), 3.0f};
  std::vector<float> in(2, -1.0f);
  rules.label_next(stage == 0 ? 3 : 4);
  Request first = stage == 0 ? rules.isend(out, peer, 0, Format::kBf16) : rules.irecv(in, peer, 0, Format::kBf16);
  rules.wait(first);
  if (stage == 1) {
    EXPECT_EQ(in, (std::vector<float>{1.0f, 3.0f}));
  }
  std::string error;
  try {
    rules.label_next(stage == 0 ? 5 : 6);
    Request bad = stage == 0 ? rules.isend(out, peer, 2, Format::kBf16) : rules.irecv(in, peer, 2);
    rules.wait(bad);
  } catch (const NcclRuleError& e) {
    error = e.what();
  }
  if (rank <= 2) std::printf("rank %d: %s\n", rank, error.c_str());
  if (stage == 1) {
    EXPECT_NE(error.find("NCCL rule: a receive's datatype is its message's; message #2 of class activations from rank " +
                         std::to_string(peer) + " to rank " + std::to_string(rank) + " is rank " + std::to_string(peer) +
                         " instruction 5 (2 floats over bf16, tag 2) but the receive is rank " + std::to_string(rank) +
                         " instruction 6 (receive of 2 floats, tag 2)"),
              std::string::npos) << error;
  } else {
    EXPECT_NE(error.find("rank " + std::to_string(peer) + " refused rank " + std::to_string(rank) +
                         " instruction 5 (send of 2 floats over bf16, tag 2)"),
              std::string::npos) << error;
  }
}

}  // namespace
}  // namespace stagecraft::executor
