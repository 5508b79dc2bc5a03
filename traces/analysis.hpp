// What compare (and the timeline) read from a trace, the same way for simulated, measured and
// imported traces: activities (intervals with a category) and, per rank and step, the partition
// of the step the simulator reports (sim/simulator.hpp "Breakdown"):
//   compute        = |C|,  C = union of the compute intervals of the rank
//   exposed comm   = |M| − |M ∩ C|,  M = union of its communication intervals
//   bubble         = step − compute − exposed comm
// where step = the step's span over every rank (first start to last end).
// Instruction level (Stagecraft traces): compute = the compute lane (forward, backward,
// recompute, optimizer); communication = the tp, pp and dp lanes except ReleaseParams; a receive
// counts as communication only from when its send began (matched through the Program), as the
// simulator counts it. Kernel level (Kineto, autograd): compute = compute and memory kernels,
// communication = NCCL kernels; steps are the ProfilerStep#N spans when the trace has them.
// Several steps (a measured run): each quantity is the median over steps.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "traces/io/trace_io.hpp"
#include "traces/program_context.hpp"

namespace stagecraft::traces {

enum class Level { kInstruction, kKernelClass };
enum class Category : uint8_t { kCompute, kCommunication, kOther };

struct Activity {
  int64_t rank = 0;
  int32_t step = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int64_t busy_from_ns = 0;    // where it starts to count as communication (receives: once the send began)
  Category category = Category::kOther;
  int32_t key = -1;            // instruction id (instruction level) or KernelClass (kernel level)
  const char* kind = "";       // trace kind ("forward", "all_reduce", ...) or kernel class name
  int64_t row = 0;             // lane (instruction level) or stream (kernel level)
  std::size_t source = 0;      // index into data.events or kernels
};

// A Stagecraft trace at kernel level maps compute lane -> compute, comm lanes -> communication,
// offload -> memory. Activities outside every step (kernels before the first ProfilerStep) are
// dropped. `pc` (optional) matches receives to their sends.
std::vector<Activity> activities(const Trace& t, Level level, const ProgramContext* pc = nullptr);

struct Breakdown {
  double step_s = 0;
  double compute_s = 0;
  double exposed_comm_s = 0;
  double bubble_s = 0;
};

// The category of an instruction-level event, as the simulator accounts its lanes: the compute
// lane is compute, the traffic lanes (program::traffic_of) communication, the rest (offload
// copies, releases) neither.
Category category_of(program::Lane lane, program::Op op);

// The partition of a window [t0, t1) of one rank: compute = |C|, exposed = |M| − |M ∩ C|, bubble =
// the rest, with C and M the rank's compute and communication intervals (receives from their
// send's start) clipped to the window. breakdown_by_rank applies it to each step's span without
// clipping (`clip` false: a measured kernel may run past its ProfilerStep annotation and still
// counts).
Breakdown partition(const std::vector<std::pair<int64_t, int64_t>>& compute,
                    const std::vector<std::pair<int64_t, int64_t>>& comm, int64_t t0, int64_t t1, bool clip = true);

// Span of each step over every rank (ProfilerStep spans when the trace has them).
std::map<int32_t, std::pair<int64_t, int64_t>> step_spans(const Trace& t, const std::vector<Activity>& acts);
double step_time_s(const Trace& t, const std::vector<Activity>& acts);  // median over steps
std::map<int64_t, Breakdown> breakdown_by_rank(const Trace& t, const std::vector<Activity>& acts);

double median(std::vector<double> v);

}  // namespace stagecraft::traces
