// Model error from the validation record (sim/model_error.hpp): which checked runs speak to a
// plan, and their least, median and largest ratio of measured to simulated step time.
#include "sim/model_error.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "support.hpp"

namespace stagecraft::sim {
namespace {

std::string write(const std::string& name, const std::string& text) {
  const std::string path = test::temp_path(name);
  std::ofstream(path) << text;
  return path;
}

// Five runs: three deepspeed ZeRO-3 (r 1.2, 1.05, 1.5), one deepspeed ZeRO-1 (r 0.9), one fsdp ZeRO-3.
const char* kRecord = R"({"about": "test", "runs": [
  {"set": "a", "id": "1", "framework": "deepspeed", "gpu": "V100-SXM3-32GB", "gpus": 384, "zero_stage": 3, "measured_over_simulated": 1.2},
  {"set": "a", "id": "2", "framework": "deepspeed", "gpu": "A100 40GB", "gpus": 64, "zero_stage": 3, "measured_over_simulated": 1.05},
  {"set": "b", "id": "3", "framework": "deepspeed", "gpu": "A100-SXM4-80GB", "gpus": 128, "zero_stage": 3, "measured_over_simulated": 1.5},
  {"set": "b", "id": "4", "framework": "deepspeed", "gpu": "A100", "gpus": 8, "zero_stage": 1, "measured_over_simulated": 0.9},
  {"set": "b", "id": "5", "framework": "fsdp", "gpu": "H100", "gpus": 8, "zero_stage": 3, "measured_over_simulated": 1.1}
]})";

TEST(ModelError, TheRunsOfTheFrameworkAndZeroClassGiveTheRangeAndTheMedian) {
  const std::string path = write("record.json", kRecord);
  const ValidationRecord record = read_validation_record(path);
  ASSERT_EQ(record.runs.size(), 5u);

  // deepspeed ZeRO-3: runs 1-3, r = {1.2, 1.05, 1.5}; sorted 1.05, 1.2, 1.5: low 1.05, median the middle 1.2, high 1.5.
  const ModelError z3 = model_error(record, spec::Framework::kDeepSpeed, 3);
  EXPECT_EQ(z3.runs(), 3u);
  EXPECT_EQ(z3.run_ids, (std::vector<std::string>{"a/1", "a/2", "b/3"}));
  EXPECT_DOUBLE_EQ(z3.low, 1.05);
  EXPECT_DOUBLE_EQ(z3.median, 1.2);
  EXPECT_DOUBLE_EQ(z3.high, 1.5);
  EXPECT_EQ(z3.gpu_families, (std::vector<std::string>{"V100", "A100"}));
  EXPECT_EQ(z3.min_gpus, 64);
  EXPECT_EQ(z3.max_gpus, 384);
  const std::string text = model_error_text(z3);
  EXPECT_NE(text.find("3 published deepspeed ZeRO-3 runs (V100, A100; 64-384 GPUs) took 1.05-1.50x (median 1.20x)"),
            std::string::npos)
      << text;

  // ZeRO 0-2 is one class: stage 2 finds the stage-1 run alone.
  const ModelError z2 = model_error(record, spec::Framework::kDeepSpeed, 2);
  ASSERT_EQ(z2.runs(), 1u);
  EXPECT_DOUBLE_EQ(z2.median, 0.9);
  EXPECT_NE(model_error_text(z2).find("1 published deepspeed ZeRO 0-2 run (A100; 8 GPUs) took 0.90x"), std::string::npos)
      << model_error_text(z2);

  // No megatron run: said so, null in JSON, and the class's runs under the other frameworks beside it
  // (deepspeed's stage-1 run, r 0.9; fsdp has none of ZeRO 0-2).
  const ModelError none = model_error(record, spec::Framework::kMegatron, 1);
  EXPECT_EQ(none.runs(), 0u);
  ASSERT_EQ(none.other_frameworks.size(), 1u);
  EXPECT_EQ(none.other_frameworks[0].framework, spec::Framework::kDeepSpeed);
  EXPECT_NE(model_error_text(none).find("no published megatron ZeRO 0-2 run"), std::string::npos);
  EXPECT_NE(model_error_text(none).find("; ZeRO 0-2 under deepspeed (1 run) 0.90x"), std::string::npos) << model_error_text(none);
  EXPECT_TRUE(to_json(none)["measured_over_simulated"].is_null());
  EXPECT_EQ(to_json(none)["other_frameworks"].size(), 1u);
  EXPECT_EQ(to_json(z3)["measured_over_simulated"]["median"].get<double>(), 1.2);
  std::filesystem::remove(path);
}

TEST(ModelError, TheRunsOnThePlansGpuFamilyComeFirstAndApart) {
  const std::string path = write("family.json", kRecord);
  const ValidationRecord record = read_validation_record(path);
  EXPECT_EQ(gpu_family("A100-SXM4-80GB"), "A100");
  EXPECT_EQ(gpu_family("A100 40GB"), "A100");
  EXPECT_EQ(gpu_family("H200"), "H200");
  EXPECT_EQ(gpu_family(""), "");

  // deepspeed ZeRO-3 on an A100: runs 2 (A100 40GB, 64 GPUs, r 1.05) and 3 (A100-SXM4-80GB, 128 GPUs,
  // r 1.5) are on the family; run 1 (V100) is not. Theirs: low 1.05, high 1.5, median (1.05 + 1.5) / 2.
  const ModelError a100 = model_error(record, spec::Framework::kDeepSpeed, 3, "A100-SXM4-80GB");
  EXPECT_EQ(a100.plan_gpu_family, "A100");
  EXPECT_EQ(a100.runs(), 3u);  // every GPU, as without a GPU
  ASSERT_EQ(a100.same_gpu.size(), 1u);
  const ModelError& same = a100.same_gpu.front();
  EXPECT_EQ(same.run_ids, (std::vector<std::string>{"a/2", "b/3"}));
  EXPECT_DOUBLE_EQ(same.low, 1.05);
  EXPECT_DOUBLE_EQ(same.high, 1.5);
  EXPECT_DOUBLE_EQ(same.median, (1.05 + 1.5) / 2);
  EXPECT_EQ(same.min_gpus, 64);
  EXPECT_EQ(same.max_gpus, 128);
  std::string text = model_error_text(a100);
  EXPECT_EQ(text.find("2 published deepspeed ZeRO-3 runs on A100 (64-128 GPUs) took 1.05-1.50x"), 0u) << text;
  EXPECT_NE(text.find("; on every GPU, 3 runs (V100, A100; 64-384 GPUs): 1.05-1.50x (median 1.20x) (docs/validation.md)"),
            std::string::npos)
      << text;
  nlohmann::json j = to_json(a100);
  EXPECT_EQ(j["gpu_family"], "A100");
  EXPECT_EQ(j["same_gpu"]["runs"], 2);
  EXPECT_DOUBLE_EQ(j["same_gpu"]["measured_over_simulated"]["median"].get<double>(), (1.05 + 1.5) / 2);
  EXPECT_EQ(j["runs"], 3);

  // on a V100: run 1 alone, r 1.2
  text = model_error_text(model_error(record, spec::Framework::kDeepSpeed, 3, "V100-SXM3-32GB"));
  EXPECT_EQ(text.find("1 published deepspeed ZeRO-3 run on V100 (384 GPUs) took 1.20x their simulated step time; on every GPU"),
            0u)
      << text;

  // on a family with no checked run: said so, the runs of every GPU after it, null in JSON
  const ModelError h200 = model_error(record, spec::Framework::kDeepSpeed, 3, "H200-SXM-141GB");
  EXPECT_TRUE(h200.same_gpu.empty());
  text = model_error_text(h200);
  EXPECT_EQ(text.find("no checked run on H200; 3 published deepspeed ZeRO-3 runs (V100, A100; 64-384 GPUs) took 1.05-1.50x"),
            0u)
      << text;
  EXPECT_TRUE(to_json(h200)["same_gpu"].is_null());

  // every run on the plan's family (fsdp ZeRO-3: run 5 on H100): one range, as without a GPU
  const ModelError h100 = model_error(record, spec::Framework::kFsdp, 3, "H100-SXM5-80GB");
  EXPECT_EQ(model_error_text(h100), model_error_text(model_error(record, spec::Framework::kFsdp, 3)));
  // no GPU given: no family in JSON
  EXPECT_FALSE(to_json(model_error(record, spec::Framework::kFsdp, 3)).contains("gpu_family"));
  std::filesystem::remove(path);
}

TEST(ModelError, AnEvenNumberOfRunsTakesTheMeanOfTheMiddleTwo) {
  // fsdp ZeRO-3 with a second run: r = {1.1, 1.4}, median (1.1 + 1.4) / 2 = 1.25.
  const std::string path = write("even.json", R"({"runs": [
    {"set": "s", "id": "1", "framework": "fsdp", "gpus": 8, "zero_stage": 3, "measured_over_simulated": 1.4},
    {"set": "s", "id": "2", "framework": "fsdp", "gpus": 16, "zero_stage": 3, "measured_over_simulated": 1.1}]})");
  const ModelError e = model_error(read_validation_record(path), spec::Framework::kFsdp, 3);
  EXPECT_DOUBLE_EQ(e.median, 1.25);
  EXPECT_TRUE(e.gpu_families.empty());  // no "gpu" given
  EXPECT_NE(model_error_text(e).find("(8-16 GPUs) took 1.10-1.40x (median 1.25x)"), std::string::npos) << model_error_text(e);
  std::filesystem::remove(path);
}

TEST(ModelError, RunsOfZeroAcrossNodesSpeakOnlyToPlansOfTheirVariant) {
  // a plain deepspeed ZeRO-3 run (r 1.2) and two ZeRO++ runs (r 2.0, 1.5)
  const std::string path = write("variant.json", R"({"runs": [
    {"set": "s", "id": "1", "framework": "deepspeed", "gpus": 8, "zero_stage": 3, "measured_over_simulated": 1.2},
    {"set": "s", "id": "2", "framework": "deepspeed", "gpus": 8, "zero_stage": 3, "measured_over_simulated": 2.0, "variant": "zeropp"},
    {"set": "s", "id": "3", "framework": "deepspeed", "gpus": 8, "zero_stage": 3, "measured_over_simulated": 1.5, "variant": "zeropp"}]})");
  const ValidationRecord record = read_validation_record(path);
  const ModelError plain = model_error(record, spec::Framework::kDeepSpeed, 3);
  EXPECT_EQ(plain.runs(), 1u);
  EXPECT_DOUBLE_EQ(plain.median, 1.2);
  const ModelError zeropp = model_error(record, spec::Framework::kDeepSpeed, 3, "", "zeropp");
  EXPECT_EQ(zeropp.runs(), 2u);
  EXPECT_DOUBLE_EQ(zeropp.median, (1.5 + 2.0) / 2);
  EXPECT_NE(model_error_text(zeropp).find("ZeRO-3 with ZeRO++"), std::string::npos) << model_error_text(zeropp);
  // no sharded run: none, and no other framework has one either
  EXPECT_EQ(model_error(record, spec::Framework::kDeepSpeed, 3, "", "shard").runs(), 0u);
  std::filesystem::remove(path);
}

TEST(ModelError, FromFourRunsTheMiddleHalfIsTheMediansOfTheHalves) {
  // r = 2.0, 1.0, 1.6, 1.3, 1.1: sorted 1.0 1.1 | 1.3 | 1.6 2.0, the middle value in neither half:
  // q1 = (1.0 + 1.1) / 2, q3 = (1.6 + 2.0) / 2, median 1.3.
  const std::string path = write("five.json", R"({"runs": [
    {"set": "s", "id": "1", "framework": "fsdp", "gpus": 8, "zero_stage": 3, "measured_over_simulated": 2.0},
    {"set": "s", "id": "2", "framework": "fsdp", "gpus": 8, "zero_stage": 3, "measured_over_simulated": 1.0},
    {"set": "s", "id": "3", "framework": "fsdp", "gpus": 8, "zero_stage": 3, "measured_over_simulated": 1.6},
    {"set": "s", "id": "4", "framework": "fsdp", "gpus": 8, "zero_stage": 3, "measured_over_simulated": 1.3},
    {"set": "s", "id": "5", "framework": "fsdp", "gpus": 8, "zero_stage": 3, "measured_over_simulated": 1.1}]})");
  const ValidationRecord record = read_validation_record(path);
  const ModelError five = model_error(record, spec::Framework::kFsdp, 3);
  EXPECT_DOUBLE_EQ(five.q1, (1.0 + 1.1) / 2);
  EXPECT_DOUBLE_EQ(five.q3, (1.6 + 2.0) / 2);
  EXPECT_DOUBLE_EQ(five.median, 1.3);
  EXPECT_NE(model_error_text(five).find("took 1.00-2.00x (median 1.30x, middle half 1.05-1.80x)"), std::string::npos)
      << model_error_text(five);
  EXPECT_DOUBLE_EQ(to_json(five)["measured_over_simulated"]["q3"].get<double>(), 1.8);

  // four runs (run 1 dropped): 1.0 1.1 | 1.3 1.6: q1 = 1.05, q3 = (1.3 + 1.6) / 2, median (1.1 + 1.3) / 2
  ValidationRecord four = record;
  four.runs.erase(four.runs.begin());
  const ModelError e4 = model_error(four, spec::Framework::kFsdp, 3);
  EXPECT_DOUBLE_EQ(e4.q1, (1.0 + 1.1) / 2);
  EXPECT_DOUBLE_EQ(e4.q3, (1.3 + 1.6) / 2);
  EXPECT_DOUBLE_EQ(e4.median, (1.1 + 1.3) / 2);

  // three runs: no middle half (the hinges would be the least and the largest)
  ValidationRecord three = four;
  three.runs.erase(three.runs.begin());
  const ModelError e3 = model_error(three, spec::Framework::kFsdp, 3);
  EXPECT_EQ(model_error_text(e3).find("middle half"), std::string::npos) << model_error_text(e3);
  EXPECT_FALSE(to_json(e3)["measured_over_simulated"].contains("q1"));
  std::filesystem::remove(path);
}

TEST(ModelError, AMalformedRecordNamesTheFileAndTheField) {
  const std::string path = write("bad.json", R"({"runs": [
    {"set": "s", "id": "1", "framework": "fsdp", "gpus": 8, "zero_stage": 3, "measured_over_simulated": 1.4},
    {"set": "s", "id": "2", "framework": "fsdp", "zero_stage": 3, "measured_over_simulated": 1.1}]})");
  const std::string msg = test::expect_spec_error([&] { read_validation_record(path); }, "/runs/1/gpus", "");
  EXPECT_NE(msg.find(path), std::string::npos) << msg;

  const std::string ratio = write("ratio.json", R"({"runs": [
    {"set": "s", "id": "1", "framework": "fsdp", "gpus": 8, "zero_stage": 3, "measured_over_simulated": 0}]})");
  test::expect_spec_error([&] { read_validation_record(ratio); }, "/runs/0/measured_over_simulated", "positive ratio");

  const std::string framework = write("framework.json", R"({"runs": [
    {"set": "s", "id": "1", "framework": "jax", "gpus": 8, "zero_stage": 3, "measured_over_simulated": 1}]})");
  test::expect_spec_error([&] { read_validation_record(framework); }, "/runs/0/framework", "megatron-2021");

  const std::string stage = write("stage.json", R"({"runs": [
    {"set": "s", "id": "1", "framework": "fsdp", "gpus": 8, "zero_stage": 4, "measured_over_simulated": 1}]})");
  test::expect_spec_error([&] { read_validation_record(stage); }, "/runs/0/zero_stage", "0 to 3");

  const std::string runs = write("runs.json", R"({"runs": {}})");
  test::expect_spec_error([&] { read_validation_record(runs); }, "/runs", "array");
  for (const std::string& p : {path, ratio, framework, stage, runs}) std::filesystem::remove(p);
}

// The bundled record is what the validation scripts wrote: every run names a known framework and a
// positive ratio (read_validation_record checks both), and each set the scripts write is present.
TEST(ModelError, TheBundledRecordHoldsEveryValidationSet) {
  const std::optional<ValidationRecord> record = bundled_validation_record();
  ASSERT_TRUE(record.has_value()) << bundled_validation_record_path();
  for (const char* set : {"table1", "korthikanti", "zero3", "flash", "fp8", "h100_bf16"}) {
    const auto n = std::count_if(record->runs.begin(), record->runs.end(), [&](const CheckedRun& r) { return r.set == set; });
    EXPECT_GT(n, 0) << set;
  }
}

}  // namespace
}  // namespace stagecraft::sim
