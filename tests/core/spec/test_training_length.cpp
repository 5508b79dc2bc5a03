// The training sequence length: a model's max_positions is a limit, the training file's seq_len
// (or --seq-len) the length trained at (UX audit D6: Llama-3.1 was planned at 131072 tokens a
// sequence, taken from max_position_embeddings).
#include <gtest/gtest.h>

#include "core/count/count.hpp"
#include "core/program/lower.hpp"
#include "core/spec/model.hpp"
#include "core/spec/plan.hpp"
#include "core/spec/training.hpp"
#include "support.hpp"

namespace stagecraft::spec {
namespace {

using nlohmann::json;
using test::expect_spec_error;

json llama31_config() {
  // Llama-3.1-8B's config.json shapes (meta-llama/Llama-3.1-8B).
  return {{"model_type", "llama"},        {"num_hidden_layers", 32},   {"hidden_size", 4096},
          {"intermediate_size", 14336},   {"num_attention_heads", 32}, {"num_key_value_heads", 8},
          {"vocab_size", 128256},         {"max_position_embeddings", 131072},
          {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}}};
}

Training training_with(const json& extra) {
  json j = {{"global_batch", 8}, {"dtype", "bf16"}};
  if (!extra.is_null()) j.update(extra);
  return training_from_json(j, "t.json");
}

TEST(TrainingLength, HfMaxPositionsIsALimitNotTheLength) {
  const Model m = model_from_json(llama31_config(), "llama31.json");
  EXPECT_EQ(m.max_positions, 131072);
  EXPECT_EQ(m.seq_len, kDefaultHfSeqLen);  // min(131072, 8192)
  EXPECT_NE(m.length_note.find("/max_position_embeddings: 131072 is the longest sequence the model takes"),
            std::string::npos);

  json short_config = llama31_config();
  short_config["max_position_embeddings"] = 4096;  // Llama-2: trained at its limit, no cut, no warning
  short_config.erase("rope_scaling");
  const Model two = model_from_json(short_config, "llama2.json");
  EXPECT_EQ(two.seq_len, 4096);
  EXPECT_TRUE(two.warnings.empty());
  EXPECT_TRUE(two.length_note.empty());
}

TEST(TrainingLength, TrainingFileSetsTheLengthWithinTheLimit) {
  const Model m = model_from_json(llama31_config(), "llama31.json");
  EXPECT_EQ(with_training_length(m, training_with({{"seq_len", 32768}})).seq_len, 32768);
  EXPECT_EQ(with_training_length(m, training_with({})).seq_len, kDefaultHfSeqLen);  // unset: the model's
  expect_spec_error([&] { with_training_length(m, training_with({{"seq_len", 131073}})); }, "/seq_len",
                    "expected at most 131072, the longest sequence");
  // The command line's value is blamed on the option, not on the file.
  const Training cli = with_overrides(training_with({}), TrainingOverrides{int64_t{200000}, {}, {}});
  try {
    with_training_length(m, cli);
    ADD_FAILURE() << "no error";
  } catch (const SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("--seq-len"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("t.json"), std::string::npos) << e.what();
  }
}

TEST(TrainingLength, LearnedTableKeepsItsRowsAtAShorterLength) {
  // GPT-2 small: wte 50257 × 768 + wpe 1024 × 768, 12 blocks of
  //   2 LayerNorms (2 × 2 × 768) + c_attn (768 × 2304 + 2304) + c_proj (768 × 768 + 768)
  //   + c_fc (768 × 3072 + 3072) + mlp c_proj (3072 × 768 + 768),
  // and ln_f (2 × 768); the head is tied. 124,439,808, as transformers counts it.
  const int64_t h = 768, v = 50257, positions = 1024;
  const int64_t block = 2 * 2 * h + (h * 3 * h + 3 * h) + (h * h + h) + (h * 4 * h + 4 * h) + (4 * h * h + h);
  const int64_t expected = v * h + positions * h + 12 * block + 2 * h;
  ASSERT_EQ(expected, 124439808);
  const Model gpt2 = load_model(test::data_path("hf/gpt2/config.json"));
  EXPECT_EQ(gpt2.max_positions, positions);
  EXPECT_EQ(count::parameters(gpt2), expected);
  // Trained at 512 tokens, the model still has its 1024-row position table.
  const Model short_run = with_training_length(gpt2, training_with({{"seq_len", 512}}));
  EXPECT_EQ(short_run.seq_len, 512);
  EXPECT_EQ(short_run.position_rows(), positions);
  EXPECT_EQ(count::parameters(short_run), expected);
  expect_spec_error([&] { with_training_length(gpt2, training_with({{"seq_len", 1025}})); }, "/seq_len",
                    "expected at most 1024");
}

TEST(TrainingLength, ModelJsonMaxPositionsRoundTrips) {
  json j = {{"name", "r"},  {"layers", 2},         {"hidden", 64}, {"heads", 4}, {"vocab", 100}, {"seq_len", 32},
            {"mlp", "swiglu"}, {"ffn_hidden", 160}, {"position", "rope"}};
  const Model rope = model_from_json(j, "r.json");
  EXPECT_EQ(rope.max_positions, 0);                                                 // RoPE: no limit unless said
  EXPECT_EQ(with_training_length(rope, training_with({{"seq_len", 4096}})).seq_len, 4096);
  j["max_positions"] = 64;
  const Model limited = model_from_json(j, "r.json");
  EXPECT_EQ(to_json(limited).at("max_positions"), 64);
  EXPECT_EQ(model_from_json(to_json(limited), "again.json").max_positions, 64);
  expect_spec_error([&] { with_training_length(limited, training_with({{"seq_len", 65}})); }, "/seq_len",
                    "expected at most 64");
  j["max_positions"] = 0;  // said, it must be a length
  expect_spec_error([&] { model_from_json(j, "r.json"); }, "/max_positions", "a positive number of tokens");
  j["max_positions"] = 64;
  j["seq_len"] = 128;  // the default length beyond the limit
  expect_spec_error([&] { model_from_json(j, "r.json"); }, "/seq_len", "expected at most max_positions (64");
  // A learned model written back without max_positions: its table is seq_len rows, the default.
  json learned = {{"name", "l"}, {"layers", 2}, {"hidden", 64}, {"heads", 4}, {"vocab", 100}, {"seq_len", 32}};
  EXPECT_FALSE(to_json(model_from_json(learned, "l.json")).contains("max_positions"));
}

TEST(TrainingLength, TrainingFileSeqLenIsCheckedAndWritten) {
  const Training t = training_with({{"seq_len", 2048}});
  ASSERT_TRUE(t.seq_len.has_value());
  EXPECT_EQ(*t.seq_len, 2048);
  EXPECT_EQ(to_json(t).at("seq_len"), 2048);
  EXPECT_FALSE(to_json(training_with({})).contains("seq_len"));
  expect_spec_error([&] { training_with({{"seq_len", 0}}); }, "/seq_len", "a positive number of tokens per sequence");
  expect_spec_error([&] { training_with({{"seq_len", "2k"}}); }, "/seq_len", "");
}

TEST(TrainingLength, OverridesSayWhereEachValueCameFrom) {
  const Training t = with_overrides(training_with({{"seq_len", 64}}),
                                    TrainingOverrides{int64_t{128}, int64_t{32}, Dtype::kFp16});
  EXPECT_EQ(*t.seq_len, 128);
  EXPECT_EQ(t.global_batch, 32);
  EXPECT_EQ(t.dtype, Dtype::kFp16);
  EXPECT_EQ(t.origin_of("global_batch"), (std::pair<std::string, std::string>{"--global-batch", ""}));
  EXPECT_EQ(t.origin_of("optimizer"), (std::pair<std::string, std::string>{"t.json", "/optimizer"}));
  EXPECT_EQ(t.label(), "t.json with --seq-len 128 --global-batch 32 --dtype fp16");
  EXPECT_EQ(training_with({}).label(), "t.json");
}

TEST(TrainingLength, LoweringUsesTheTrainingLength) {
  // Two stages: the activation sent between them is micro_batch × seq_len × hidden elements of
  // bf16 (2 bytes). At the model's 16 tokens: 2 × 16 × 64 × 2 = 4096 bytes; at 8 tokens, half.
  const Model m = model_from_json({{"name", "g"}, {"layers", 2}, {"hidden", 64}, {"heads", 4}, {"vocab", 128},
                                   {"seq_len", 16}, {"max_positions", 32}},
                                  "g.json");
  const Plan p = plan_from_json({{"pp", 2}, {"micro_batch", 2}, {"micro_batches", 2}}, "p.json");
  auto send_bytes = [&](const Training& t) {
    const program::Program prog = program::lower(m, t, p);
    for (const program::Instr& in : prog.roles[0].instrs) {
      if (in.op == program::Op::kSendActivation) return in.bytes;
    }
    return int64_t{-1};
  };
  EXPECT_EQ(send_bytes(training_with({{"global_batch", 4}})), 2 * 16 * 64 * 2);
  EXPECT_EQ(send_bytes(training_with({{"global_batch", 4}, {"seq_len", 8}})), 2 * 8 * 64 * 2);
  const program::Program prog = program::lower(m, training_with({{"global_batch", 4}, {"seq_len", 32}}), p);
  EXPECT_EQ(prog.model.seq_len, 32);
  EXPECT_EQ(prog.tokens_per_step(), 4 * 32);
  expect_spec_error([&] { program::lower(m, training_with({{"global_batch", 4}, {"seq_len", 33}}), p); }, "/seq_len",
                    "expected at most 32");
}

}  // namespace
}  // namespace stagecraft::spec
