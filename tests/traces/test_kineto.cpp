// PyTorch profiler import: Holistic Trace Analysis classes, NCCL collectives from kernel names,
// ProfilerStep#N steps, per-rank files, the torch 1.13 autograd-profiler file, and errors.
#include "traces/io/kineto.hpp"

#include <gtest/gtest.h>

#include "support.hpp"
#include "traces/io/trace_io.hpp"

namespace stagecraft::traces {
namespace {

std::string kineto(const std::string& name) { return test::data_path("kineto/" + name); }

TEST(Kineto, ClassifiesKernelsAsHolisticTraceAnalysis) {
  // communication ^nccl|.*ncclKernel.*, memory ^Memcpy|^Memset, everything else compute
  EXPECT_EQ(classify_kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
            KernelClass::kCommunication);
  EXPECT_EQ(classify_kernel("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)"), KernelClass::kCommunication);
  EXPECT_EQ(classify_kernel("void ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)"), KernelClass::kCommunication);
  EXPECT_EQ(classify_kernel("Memcpy HtoD (Pageable -> Device)"), KernelClass::kMemory);
  EXPECT_EQ(classify_kernel("Memset (Device)"), KernelClass::kMemory);
  EXPECT_EQ(classify_kernel("ampere_sgemm_128x64_nn"), KernelClass::kCompute);
  EXPECT_EQ(classify_kernel("void at::native::elementwise_kernel<128, 2>(int)"), KernelClass::kCompute);
  EXPECT_EQ(classify_kernel("aten::copy_"), KernelClass::kCompute);  // a CPU op named like a copy is not a Memcpy
  EXPECT_EQ(classify_kernel("my_Memcpy_kernel"), KernelClass::kCompute);  // ^Memcpy anchors at the start
}

TEST(Kineto, NamesNcclCollectivesAndSteps) {
  EXPECT_EQ(nccl_collective("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"), "AllReduce");
  EXPECT_EQ(nccl_collective("ncclKernel_ReduceScatter_RING_SIMPLE_Sum_bf16(ncclWorkElem)"), "ReduceScatter");
  EXPECT_EQ(nccl_collective("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"), "SendRecv");
  EXPECT_EQ(nccl_collective("ampere_sgemm_128x64_nn"), "");
  EXPECT_EQ(profiler_step("ProfilerStep#12"), 12);
  EXPECT_FALSE(profiler_step("ProfilerStep#"));
  EXPECT_FALSE(profiler_step("ProfilerStep#1a"));
  EXPECT_FALSE(profiler_step("aten::mm"));
}

// tests/data/kineto/handwritten_rank{0,1}.json (README.md there): per rank, ProfilerStep#4 at
// [1000, 1300] µs and #5 at [1400, 1700]; in each step a GEMM (100 µs on rank 0, 125 on rank 1),
// an add (12), a memcpy (10), a memset (2) and an NCCL kernel (60) launched at 1290 / 1690, which
// runs after its step's CPU span: the correlation id puts it in that step. A fill kernel at 900 µs
// with no launch event lies outside every step.
TEST(Kineto, ImportsOneFilePerRankWithStepsAndClasses) {
  const Trace t = read_trace_files({kineto("handwritten_rank0.json"), kineto("handwritten_rank1.json")});
  EXPECT_EQ(t.format, Format::kKineto);
  EXPECT_EQ(t.ranks(), (std::vector<int64_t>{0, 1}));
  ASSERT_EQ(t.kernels.size(), 22u);  // 11 per rank: 1 outside, 5 in each of 2 steps
  ASSERT_EQ(t.steps.size(), 4u);
  EXPECT_EQ(t.step_count(), 2);
  // Times are shifted so the earliest event (the fill kernel at 900 µs) is at 0.
  int64_t earliest = INT64_MAX;
  for (const Kernel& k : t.kernels) earliest = std::min(earliest, k.start_ns);
  EXPECT_EQ(earliest, 0);
  std::map<std::tuple<int64_t, int32_t, KernelClass>, int64_t> ns;
  int outside = 0;
  for (const Kernel& k : t.kernels) {
    if (k.step < 0) {
      ++outside;
      continue;
    }
    ns[{k.rank, k.step, k.cls}] += k.end_ns - k.start_ns;
  }
  EXPECT_EQ(outside, 2);
  for (int32_t step : {4, 5}) {
    EXPECT_EQ((ns[{0, step, KernelClass::kCompute}]), (100 + 12) * 1000);
    EXPECT_EQ((ns[{1, step, KernelClass::kCompute}]), (125 + 12) * 1000);
    EXPECT_EQ((ns[{0, step, KernelClass::kMemory}]), (10 + 2) * 1000);
    EXPECT_EQ((ns[{0, step, KernelClass::kCommunication}]), 60 * 1000);
  }
  bool late_all_gather = false;
  for (std::size_t i = 0; i < t.kernels.size(); ++i) {
    const Kernel& k = t.kernels[i];
    if (k.collective == "AllGather") {
      late_all_gather = true;
      EXPECT_EQ(k.step, 5);
      EXPECT_EQ(k.rank, 0);
      EXPECT_EQ(k.stream, 20);
      EXPECT_EQ(k.start_ns - (1400 - 900) * 1000, 310 * 1000);  // starts after ProfilerStep#5's CPU span ends (300)
      EXPECT_EQ(t.kernel_file(i), kineto("handwritten_rank0.json"));
    }
    if (k.name.starts_with("Memcpy")) {
      EXPECT_EQ(k.bytes, 4096);
    }
  }
  EXPECT_TRUE(late_all_gather);
}

// tests/data/kineto/torch113_autograd_matmul.json, written by Debian's python3-torch 1.13 (no
// Kineto) with the recipe in tests/data/kineto/README.md: 3 ProfilerStep#N record_function
// ranges, each with aten::empty, two aten::matmul (each containing aten::mm), aten::relu, aten::sum.
TEST(Kineto, ImportsTheTorch113AutogradProfilerFile) {
  const Trace t = read_trace_files({kineto("torch113_autograd_matmul.json")});
  EXPECT_EQ(t.format, Format::kAutograd);
  EXPECT_EQ(t.ranks(), (std::vector<int64_t>{0}));
  ASSERT_EQ(t.steps.size(), 3u);
  EXPECT_EQ(t.steps[1].end_ns - t.steps[1].start_ns, 496 * 1000);  // "ProfilerStep#1", "dur": 496
  std::map<int32_t, std::vector<std::string>> names;
  std::map<int32_t, int64_t> busy;
  for (const Kernel& k : t.kernels) {
    EXPECT_EQ(k.cls, KernelClass::kCompute);
    names[k.step].push_back(k.name);
    if (k.step >= 0) busy[k.step] += k.end_ns - k.start_ns;
  }
  EXPECT_EQ(names[-1], (std::vector<std::string>{"aten::zeros", "aten::zeros", "aten::zeros"}));
  for (int32_t s : {0, 1, 2}) {
    EXPECT_EQ(names[s], (std::vector<std::string>{"aten::empty", "aten::matmul", "aten::matmul", "aten::relu", "aten::sum"}))
        << "step " << s;  // outermost operators only: aten::mm is inside aten::matmul
  }
  EXPECT_EQ(busy[1], (0 + 225 + 221 + 15 + 11) * 1000);  // durations from the file, step 1
}

TEST(Kineto, BadFilesNameTheFileAndPosition) {
  test::expect_spec_error([] { read_trace_files({kineto("bad/truncated_rank0.json")}); }, "", "truncated JSON");
  try {
    read_trace_files({kineto("bad/truncated_rank0.json")});
  } catch (const spec::SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("truncated_rank0.json"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("line "), std::string::npos);
  }
  test::expect_spec_error([] { read_trace_files({kineto("bad/missing_ts_rank0.json")}); }, "/traceEvents/7/ts", "missing");
  test::expect_spec_error([] { read_trace_files({kineto("bad/not_a_trace.json")}); }, "", "expected a Chrome trace");
  test::expect_spec_error(
      [] { read_trace_files({kineto("handwritten_rank0.json"), kineto("handwritten_rank0.json")}); },
      "/distributedInfo/rank", "appears in two files");
  test::expect_spec_error(
      [] { read_trace_files({kineto("handwritten_rank0.json"), kineto("torch113_autograd_matmul.json")}); }, "",
      "expected a kineto trace");
}

}  // namespace
}  // namespace stagecraft::traces
