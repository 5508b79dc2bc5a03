#include "executor/comm/communicator.hpp"

#include <cstring>
#include <limits>

#include "executor/errors.hpp"

namespace stagecraft::executor {

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
        values[static_cast<std::size_t>(slot)] = value;
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
