#include "executor/tracer.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>

namespace stagecraft::executor {

namespace {

static_assert(std::is_trivially_copyable_v<trace::Event>, "events travel as bytes");
static_assert(std::is_trivially_copyable_v<trace::MemorySample>, "samples travel as bytes");

std::string host_name() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

int64_t host_id() { return static_cast<int64_t>(std::hash<std::string>{}(host_name()) >> 1); }

template <typename T>
void append(std::string& blob, const std::vector<T>& items) {
  const uint64_t n = items.size();
  blob.append(reinterpret_cast<const char*>(&n), sizeof(n));
  blob.append(reinterpret_cast<const char*>(items.data()), items.size() * sizeof(T));
}

template <typename T>
std::vector<T> take(const std::string& blob, std::size_t& at) {
  uint64_t n = 0;
  std::memcpy(&n, blob.data() + at, sizeof(n));
  at += sizeof(n);
  std::vector<T> out(n);
  if (n > 0) std::memcpy(out.data(), blob.data() + at, n * sizeof(T));  // data() may be null when empty
  at += n * sizeof(T);
  return out;
}

}  // namespace

void Tracer::start(Communicator& comm) {
  comm.barrier();
  const auto now = std::chrono::steady_clock::now();
  const int64_t mine = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  const std::vector<int64_t> readings = comm.all_gather(mine);
  const std::vector<int64_t> hosts = comm.all_gather(host_id());
  const bool one_host = std::all_of(hosts.begin(), hosts.end(), [&](int64_t h) { return h == hosts[0]; });
  const int64_t origin = one_host ? *std::min_element(readings.begin(), readings.end()) : mine;
  origin_ = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(origin));
}

int64_t Tracer::now_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - origin_).count();
}

trace::Trace Tracer::gather(Communicator& comm, const std::vector<trace::MemorySample>& memory, const program::Program& prog,
                            const std::string& cluster_name) const {
  std::string blob;
  append(blob, events_);
  append(blob, memory);
  const std::vector<std::string> all = comm.gather_to_root(blob);
  const std::vector<std::string> hosts = comm.gather_to_root(host_name());
  trace::Trace t;
  t.source = "measured";
  trace::name_program(t, prog);
  t.cluster = {{"name", cluster_name}, {"hosts", hosts}};
  for (const std::string& b : all) {
    std::size_t at = 0;
    for (const trace::Event& e : take<trace::Event>(b, at)) t.events.push_back(e);
    for (const trace::MemorySample& m : take<trace::MemorySample>(b, at)) t.memory.push_back(m);
  }
  return t;
}

}  // namespace stagecraft::executor
