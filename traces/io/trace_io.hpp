// traces::Trace: one in-memory trace for simulated, measured, probe and imported PyTorch traces,
// and the readers that fill it (docs/traces.md).
//  * Stagecraft schema (SCHEMAS.md "Trace", core/trace/trace.hpp): Program instruction events,
//    memory samples and the header (source, plan, model, cluster). Read by core's reader; this
//    layer adds where each event sits in its file (for error messages) and its step: a measured
//    run of S steps repeats every instruction id S times, so the k-th occurrence of (rank, instr)
//    in time order belongs to step k.
//  * PyTorch profiler (Kineto) JSON, one file per rank (kineto.hpp): GPU kernels, memcpy and
//    memset become Kernels classified as Holistic Trace Analysis does; ProfilerStep#N
//    annotations become StepSpans; distributedInfo.rank names the rank.
//  * The older autograd-profiler JSON (torch built without Kineto, e.g. Debian's 1.13): a bare
//    array of "X" events on pid "CPU functions"; the outermost operators become Kernels.
// Not a writer of Kineto files: Stagecraft writes only its own schema (write_stagecraft).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/trace/trace.hpp"

namespace stagecraft::traces {

enum class Format { kStagecraft, kKineto, kAutograd };
// Holistic Trace Analysis kernel types: COMMUNICATION (^nccl|.*ncclKernel.*), MEMORY
// (^Memcpy|^Memset), COMPUTATION (everything else).
enum class KernelClass : uint8_t { kCompute, kCommunication, kMemory };

const char* to_string(Format f);
const char* to_string(KernelClass c);

// One kernel-level event of an imported trace.
struct Kernel {
  int64_t rank = 0;
  int32_t step = -1;           // ProfilerStep#N it ran in; -1 outside every step
  int64_t stream = 0;          // GPU stream (Kineto), CPU thread (autograd profiler)
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  KernelClass cls = KernelClass::kCompute;
  std::string name;
  std::string collective;      // NCCL kernels: "AllReduce", "AllGather", "ReduceScatter", "SendRecv", ...
  int64_t bytes = 0;           // memcpy / memset bytes when the trace gives them
};

// A ProfilerStep#N annotation on one rank.
struct StepSpan {
  int64_t rank = 0;
  int32_t step = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
};

// Where an event came from: file index into Trace::files and its index in the file's event array.
struct Origin {
  int32_t file = 0;
  int64_t index = -1;
};

struct Trace {
  Format format = Format::kStagecraft;
  std::vector<std::string> files;
  trace::Trace data;                        // header, instruction events, memory samples
  nlohmann::json meta = nlohmann::json::object();  // the raw "stagecraft" header (probe metadata, ...)
  std::vector<int32_t> event_step;          // per data.events
  std::vector<Origin> event_origin;         // per data.events
  std::vector<Kernel> kernels;              // imported traces
  std::vector<Origin> kernel_origin;        // per kernels
  std::vector<StepSpan> steps;              // imported traces: ProfilerStep#N spans

  bool kernel_level() const { return format != Format::kStagecraft; }
  bool is_probe() const { return meta.contains("probe"); }
  // JSON pointer of an event in its file: "/traceEvents/17" (Stagecraft, Kineto), "/17" (autograd array)
  std::string event_pointer(std::size_t i) const;
  std::string kernel_pointer(std::size_t i) const;
  const std::string& event_file(std::size_t i) const;    // "<in memory>" when it has none
  const std::string& kernel_file(std::size_t i) const;
  std::vector<int64_t> ranks() const;       // sorted, distinct
  int32_t step_count() const;               // distinct steps of events or kernels (>= 1 when any)
};

// Reads and parses a JSON file. Malformed JSON is a spec::SpecError naming the file, the line,
// column and byte offset; a file that ends early says it looks truncated.
nlohmann::json read_json(const std::string& path);

Format detect_format(const nlohmann::json& j, const std::string& file);

// One Stagecraft trace file, or one or more Kineto / autograd files (one per rank; the rank comes
// from distributedInfo, else from the file's position in `paths`). Mixing formats, or giving two
// Stagecraft files, is a SpecError.
Trace read_trace_files(const std::vector<std::string>& paths);
Trace from_stagecraft_json(const nlohmann::json& j, const std::string& file);
// A trace built in memory (simulator, probe), as if written and read back as `name`; `extra_meta`
// keys join the header.
Trace from_core(const trace::Trace& data, const std::string& name,
                const nlohmann::json& extra_meta = nlohmann::json::object());

// Writes the Stagecraft schema: core's Chrome JSON plus `meta`'s extra keys in the header.
nlohmann::json to_stagecraft_json(const Trace& t);
void write_stagecraft(const Trace& t, const std::string& path);

// k-th occurrence of (rank, instr) in start-time order -> step k.
std::vector<int32_t> occurrence_steps(const std::vector<trace::Event>& events);

}  // namespace stagecraft::traces
