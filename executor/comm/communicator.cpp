#include "executor/comm/communicator.hpp"

#include <cmath>
#include <cstring>
#include <limits>

#include "executor/errors.hpp"

namespace stagecraft::executor {

std::string WatchdogReport::text() const {
  if (!asked) return "";
  const std::string grace = std::to_string(static_cast<int64_t>(grace_s + 0.5)) + " s";
  if (silent.empty()) {
    return "every rank answers the watchdog within " + grace +
           ": the job is slow or deadlocked, not stopped (a longer --watchdog lets a slow step finish)";
  }
  std::string ranks;
  for (std::size_t i = 0; i < silent.size(); ++i) {
    if (i == 8) {
      ranks += " and " + std::to_string(silent.size() - i) + " more";
      break;
    }
    ranks += (i == 0 ? "" : i + 1 == silent.size() ? " and " : ", ") + std::to_string(silent[i]);
  }
  return std::string(silent.size() == 1 ? "rank " : "ranks ") + ranks + " stopped answering (no reply to the watchdog in " +
         grace + ": a process stopped with SIGSTOP or by a debugger, swapped out, or hung outside MPI)";
}

std::vector<double> all_gather_slots(Communicator& comm, const std::vector<std::pair<int64_t, double>>& mine, int64_t n) {
  constexpr std::size_t kRecord = sizeof(int64_t) + sizeof(double);
  std::string blob;
  for (const auto& [slot, value] : mine) {
    blob.append(reinterpret_cast<const char*>(&slot), sizeof slot);
    blob.append(reinterpret_cast<const char*>(&value), sizeof value);
  }
  const std::vector<std::string> all = comm.gather_to_root(blob);
  std::string merged;
  if (comm.rank() == 0) {
    std::vector<double> values(static_cast<std::size_t>(n), std::numeric_limits<double>::quiet_NaN());
    for (const std::string& b : all) {
      for (std::size_t at = 0; at + kRecord <= b.size(); at += kRecord) {
        int64_t slot = 0;
        double value = 0;
        std::memcpy(&slot, b.data() + at, sizeof slot);
        std::memcpy(&value, b.data() + at + sizeof slot, sizeof value);
        if (slot < 0 || slot >= n) throw CommError("all_gather_slots: slot " + std::to_string(slot) + " outside [0, " + std::to_string(n) + ")");
        double& v = values[static_cast<std::size_t>(slot)];
        v = std::isnan(v) ? value : v + value;
      }
    }
    merged.assign(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(double));
  }
  merged = comm.broadcast_from_root(merged);
  std::vector<double> out(merged.size() / sizeof(double));
  std::memcpy(out.data(), merged.data(), merged.size());
  return out;
}

}  // namespace stagecraft::executor
