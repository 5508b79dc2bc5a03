// The probe's MPI communicator (cli/probe_comm.hpp): MPI_COMM_WORLD, fp32 sums, blocking calls
// so that the probe times exactly one collective per call. The communicator owns the
// mpi::Session (MPI_Init_thread at MPI_THREAD_SINGLE; MPI_Finalize with the communicator when it
// initialised MPI). Every call goes through MPI_CHECK (mpi::MpiError naming the call, file and
// line); nothing here exits the process.
#include <mpi.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/probe_comm.hpp"
#include "mpi/bytes.hpp"
#include "mpi/error.hpp"
#include "mpi/session.hpp"

namespace stagecraft::cli {

namespace {

int as_int(int64_t count) {
  if (count > INT32_MAX) throw std::invalid_argument("probe: message of " + std::to_string(count) + " elements exceeds MPI's int counts");
  return static_cast<int>(count);
}

class MpiProbeComm final : public traces::ProbeComm {
 public:
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string host() const override {
    char name[MPI_MAX_PROCESSOR_NAME];
    int len = 0;
    MPI_CHECK(MPI_Get_processor_name(name, &len));
    return std::string(name, static_cast<std::size_t>(len));
  }
  void barrier() override { MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD)); }
  void all_gather(const float* in, float* out, int64_t count) override {
    MPI_CHECK(MPI_Allgather(in, as_int(count), MPI_FLOAT, out, as_int(count), MPI_FLOAT, MPI_COMM_WORLD));
  }
  void reduce_scatter(const float* in, float* out, int64_t count) override {
    MPI_CHECK(MPI_Reduce_scatter_block(in, out, as_int(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
  }
  void all_reduce(const float* in, float* out, int64_t count) override {
    MPI_CHECK(MPI_Allreduce(in, out, as_int(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
  }
  void send_recv(const float* in, int to, float* out, int from, int64_t count) override {
    MPI_CHECK(MPI_Sendrecv(in, as_int(count), MPI_FLOAT, to, 7, out, as_int(count), MPI_FLOAT, from, 7, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE));
  }
  int64_t sum(int64_t v) override {
    int64_t out = 0;
    MPI_CHECK(MPI_Allreduce(&v, &out, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD));
    return out;
  }
  double max(double v) override {
    double out = 0;
    MPI_CHECK(MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    return out;
  }
  int64_t min(int64_t v) override {
    int64_t out = 0;
    MPI_CHECK(MPI_Allreduce(&v, &out, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD));
    return out;
  }
  std::vector<std::string> gather(const std::string& blob) override { return mpi::gather_bytes(MPI_COMM_WORLD, blob); }
  std::vector<std::string> all_gather_strings(const std::string& s) override {
    return mpi::all_gather_bytes(MPI_COMM_WORLD, s);
  }

 private:
  mpi::Session session_{mpi::ThreadLevel::kSingle};
  int rank_ = session_.rank(), size_ = session_.size();
};

}  // namespace

std::unique_ptr<traces::ProbeComm> make_mpi_probe_comm() { return std::make_unique<MpiProbeComm>(); }

}  // namespace stagecraft::cli
