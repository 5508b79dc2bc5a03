#include "traces/io/kineto.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <unordered_map>

#include "core/spec/error.hpp"
#include "core/spec/json_reader.hpp"

namespace stagecraft::traces {

using nlohmann::json;

namespace {


std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

bool is_gpu_category(const std::string& cat) {
  const std::string c = lower(cat);
  return c == "kernel" || c == "gpu_memcpy" || c == "gpu_memset" || c == "memcpy" || c == "memset";
}

// A field of one event, checked; `at` is the event's JSON pointer.
const json& field(const json& e, const char* key, const std::string& file, const std::string& at) {
  if (!e.contains(key)) throw spec::SpecError(file, at + "/" + key, "missing (every \"X\" event needs name, ts and dur)");
  return e[key];
}

double number_field(const json& e, const char* key, const std::string& file, const std::string& at) {
  const json& v = field(e, key, file, at);
  if (!v.is_number()) throw spec::SpecError(file, at + "/" + key, "expected a number of microseconds, got " + spec::describe(v));
  return v.get<double>();
}

// "ts" or "dur" of event `e`, in nanoseconds, range-checked (trace::trace_us_to_ns).
int64_t time_field_ns(const json& e, const char* key, const std::string& file, const std::string& at) {
  return trace::trace_us_to_ns(number_field(e, key, file, at), std::string_view(key) == "dur", file, at + "/" + key);
}

std::string string_field(const json& e, const char* key, const std::string& file, const std::string& at) {
  const json& v = field(e, key, file, at);
  if (!v.is_string()) throw spec::SpecError(file, at + "/" + key, "expected a string, got " + spec::describe(v));
  return v.get<std::string>();
}

// A stream or thread id: an integer, or the digits of a string such as "stream 7".
int64_t id_of(const json& v) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    const auto first = s.find_first_of("0123456789");
    if (first != std::string::npos) return std::stoll(s.substr(first, s.find_first_not_of("0123456789", first) - first));
  }
  return 0;
}

std::string at_of(std::size_t i, bool wrapped) {
  std::string at = wrapped ? "/traceEvents/" : "/";  // appended, not operator+: sidesteps a GCC 12 -Wrestrict false positive
  at += std::to_string(i);
  return at;
}

struct Span {
  int32_t step;
  int64_t start_ns, end_ns;
};

int32_t step_containing(const std::vector<Span>& spans, int64_t t) {
  for (const Span& s : spans) {
    if (s.start_ns <= t && t <= s.end_ns) return s.step;
  }
  return -1;
}

int32_t step_begun_before(const std::vector<Span>& spans, int64_t t) {
  int32_t best = -1;
  int64_t best_start = 0;
  for (const Span& s : spans) {
    if (s.start_ns <= t && (best < 0 || s.start_ns > best_start)) {
      best = s.step;
      best_start = s.start_ns;
    }
  }
  return best;
}

int64_t kineto_rank(const json& j, const std::string& file, int64_t fallback) {
  if (!j.contains("distributedInfo")) return fallback;
  const json& d = j["distributedInfo"];
  if (!d.is_object()) throw spec::SpecError(file, "/distributedInfo", "expected an object, got " + spec::describe(d));
  if (!d.contains("rank")) return fallback;
  if (!d["rank"].is_number_integer() || d["rank"].get<int64_t>() < 0) {
    throw spec::SpecError(file, "/distributedInfo/rank", "expected a non-negative integer, got " + spec::describe(d["rank"]));
  }
  return d["rank"].get<int64_t>();
}

std::optional<int64_t> correlation_of(const json& e) {
  if (!e.contains("args") || !e["args"].is_object()) return std::nullopt;
  const json& a = e["args"];
  if (a.contains("correlation") && a["correlation"].is_number_integer()) return a["correlation"].get<int64_t>();
  return std::nullopt;
}

}  // namespace

KernelClass classify_kernel(std::string_view name) {
  if (name.starts_with("nccl") || name.find("ncclKernel") != std::string_view::npos) return KernelClass::kCommunication;
  if (name.starts_with("Memcpy") || name.starts_with("Memset")) return KernelClass::kMemory;
  return KernelClass::kCompute;
}

std::string nccl_collective(std::string_view name) {
  for (std::string_view prefix : {std::string_view("ncclDevKernel_"), std::string_view("ncclKernel_")}) {
    const auto at = name.find(prefix);
    if (at == std::string_view::npos) continue;
    const std::string_view rest = name.substr(at + prefix.size());
    return std::string(rest.substr(0, rest.find_first_of("_(<")));
  }
  return "";
}

std::optional<int32_t> profiler_step(std::string_view name) {
  constexpr std::string_view prefix = "ProfilerStep#";
  if (!name.starts_with(prefix) || name.size() == prefix.size() || name.size() > prefix.size() + 9) return std::nullopt;
  int32_t n = 0;
  for (char c : name.substr(prefix.size())) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  return n;
}

int64_t append_kineto(const json& j, const std::string& file, int32_t file_index, int64_t fallback_rank, Trace& out) {
  const int64_t rank = kineto_rank(j, file, fallback_rank);
  const json& events = j.at("traceEvents");
  std::vector<Span> cpu_steps, gpu_steps;
  std::unordered_map<int64_t, int64_t> launch_ns;  // correlation -> runtime call start
  std::vector<std::size_t> kernels;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const json& e = events[i];
    const std::string at = at_of(i, true);
    if (!e.is_object()) throw spec::SpecError(file, at, "expected a trace event object, got " + spec::describe(e));
    if (!e.contains("ph") || !e["ph"].is_string() || e["ph"].get<std::string>() != "X") continue;
    const std::string cat = e.contains("cat") && e["cat"].is_string() ? e["cat"].get<std::string>() : "";
    if (is_gpu_category(cat)) {
      kernels.push_back(i);
      continue;
    }
    const std::string name = string_field(e, "name", file, at);
    if (const auto step = profiler_step(name)) {
      const int64_t start = time_field_ns(e, "ts", file, at);
      const Span s{*step, start, start + time_field_ns(e, "dur", file, at)};
      (lower(cat) == "gpu_user_annotation" ? gpu_steps : cpu_steps).push_back(s);
      continue;
    }
    const std::string c = lower(cat);
    if (c == "cuda_runtime" || c == "runtime" || c == "cuda_driver") {
      if (const auto corr = correlation_of(e)) launch_ns[*corr] = time_field_ns(e, "ts", file, at);
    }
  }
  for (const Span& s : cpu_steps) out.steps.push_back({rank, s.step, s.start_ns, s.end_ns});
  for (std::size_t i : kernels) {
    const json& e = events[i];
    const std::string at = at_of(i, true);
    Kernel k;
    k.rank = rank;
    k.name = string_field(e, "name", file, at);
    k.start_ns = time_field_ns(e, "ts", file, at);
    k.end_ns = k.start_ns + time_field_ns(e, "dur", file, at);
    k.cls = classify_kernel(k.name);
    k.collective = nccl_collective(k.name);
    const json* args = e.contains("args") && e["args"].is_object() ? &e["args"] : nullptr;
    k.stream = args && args->contains("stream") ? id_of((*args)["stream"]) : (e.contains("tid") ? id_of(e["tid"]) : 0);
    if (args && args->contains("bytes") && (*args)["bytes"].is_number()) k.bytes = (*args)["bytes"].get<int64_t>();
    const auto corr = correlation_of(e);
    const auto launch = corr ? launch_ns.find(*corr) : launch_ns.end();
    if (launch != launch_ns.end()) k.step = step_containing(cpu_steps, launch->second);
    if (k.step < 0) k.step = step_containing(gpu_steps, k.start_ns);
    if (k.step < 0) k.step = step_begun_before(cpu_steps, k.start_ns);
    out.kernels.push_back(std::move(k));
    out.kernel_origin.push_back({file_index, static_cast<int64_t>(i)});
  }
  return rank;
}

int64_t append_autograd(const json& j, const std::string& file, int32_t file_index, int64_t rank, Trace& out) {
  struct Op {
    std::size_t index;
    int64_t tid, start_ns, end_ns;
    std::string name;
  };
  std::vector<Op> ops;
  std::vector<Span> steps;
  for (std::size_t i = 0; i < j.size(); ++i) {
    const json& e = j[i];
    const std::string at = at_of(i, false);
    if (!e.is_object()) throw spec::SpecError(file, at, "expected a trace event object, got " + spec::describe(e));
    if (!e.contains("ph") || !e["ph"].is_string() || e["ph"].get<std::string>() != "X") continue;
    const std::string name = string_field(e, "name", file, at);
    const int64_t start = time_field_ns(e, "ts", file, at);
    const int64_t end = start + time_field_ns(e, "dur", file, at);
    if (const auto step = profiler_step(name)) {
      steps.push_back({*step, start, end});
      continue;
    }
    ops.push_back({i, e.contains("tid") ? id_of(e["tid"]) : 0, start, end, name});
  }
  for (const Span& s : steps) out.steps.push_back({rank, s.step, s.start_ns, s.end_ns});
  // Outermost operators per thread: sorted by (thread, start, longest first), an operator is
  // nested when it ends no later than the current outermost one on its thread.
  std::sort(ops.begin(), ops.end(), [](const Op& a, const Op& b) {
    if (a.tid != b.tid) return a.tid < b.tid;
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    if (a.end_ns != b.end_ns) return a.end_ns > b.end_ns;
    return a.index < b.index;
  });
  const Op* outer = nullptr;
  for (const Op& op : ops) {
    if (outer && outer->tid == op.tid && op.start_ns >= outer->start_ns && op.end_ns <= outer->end_ns) continue;
    outer = &op;
    Kernel k;
    k.rank = rank;
    k.stream = op.tid;
    k.start_ns = op.start_ns;
    k.end_ns = op.end_ns;
    k.name = op.name;
    k.cls = classify_kernel(op.name);
    k.collective = nccl_collective(op.name);
    k.step = step_containing(steps, op.start_ns);
    out.kernels.push_back(std::move(k));
    out.kernel_origin.push_back({file_index, static_cast<int64_t>(op.index)});
  }
  return rank;
}

}  // namespace stagecraft::traces
