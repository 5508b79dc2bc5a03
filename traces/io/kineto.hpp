// PyTorch profiler import: Kineto JSON (torch.profiler, one file per rank) and the older
// autograd-profiler JSON (torch.autograd.profiler without Kineto) into traces::Trace.
//
// Kineto (REFERENCE.md "Trace formats"): {"traceEvents": [...], "distributedInfo": {"rank": r,
// "world_size": n}, ...}. GPU-side "X" events have cat "kernel", "gpu_memcpy" or "gpu_memset"
// (older releases: "Kernel", "Memcpy", "Memset"), pid = device, tid = stream, args.stream,
// args.correlation; CPU side "cpu_op", "cuda_runtime" (args.correlation of the launch),
// "user_annotation" (ProfilerStep#N). Times are microseconds.
//  * class (Holistic Trace Analysis, hta/utils): communication if the name matches
//    ^nccl|.*ncclKernel.*, memory if ^Memcpy|^Memset, compute otherwise;
//  * collective: from the NCCL kernel name, ncclDevKernel_<Coll>_... (NCCL >= 2.19) or
//    ncclKernel_<Coll>_... (older): AllReduce, AllGather, ReduceScatter, Broadcast, Reduce,
//    SendRecv (also Send, Recv);
//  * step: the ProfilerStep#N whose CPU span contains the kernel's launch (matched by
//    correlation id); without a launch event, the last step that began before the kernel.
// Autograd profiler (torch 1.13 export_chrome_trace without Kineto): a bare array of
// {"name", "ph": "X", "ts", "dur", "tid", "pid": "CPU functions", "args"} CPU operator events,
// nested by time on each thread. ProfilerStep#N events (record_function) are steps; the
// outermost operators on a thread (those no other operator contains) are the kernels, so nested
// calls (aten::matmul > aten::mm) are counted once; classes by the same name rules.
// Errors (spec::SpecError): a missing or mistyped field names the file and the JSON pointer of
// the event ("/traceEvents/12/ts").
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "traces/io/trace_io.hpp"

namespace stagecraft::traces {

KernelClass classify_kernel(std::string_view name);
// "AllReduce" for ncclDevKernel_AllReduce_Sum_f32_RING_LL(...), "" for non-NCCL names.
std::string nccl_collective(std::string_view name);
// 12 for "ProfilerStep#12"; nullopt otherwise.
std::optional<int32_t> profiler_step(std::string_view name);

// Appends one Kineto file's kernels and steps (times in µs, not yet shifted) to `out`;
// `fallback_rank` is used when the file has no distributedInfo.rank. Returns the rank.
int64_t append_kineto(const nlohmann::json& j, const std::string& file, int32_t file_index, int64_t fallback_rank,
                      Trace& out);
int64_t append_autograd(const nlohmann::json& j, const std::string& file, int32_t file_index, int64_t rank,
                        Trace& out);

}  // namespace stagecraft::traces
