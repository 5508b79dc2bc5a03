// The probe's MPI communicator (built only with STAGECRAFT_WITH_MPI): MPI_COMM_WORLD, fp32 sums.
// MPI calls return their error codes (MPI_ERRORS_RETURN) and MPI_CHECK turns a failure into an
// exception naming the call, file and line; nothing here exits the process.
#include <mpi.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "traces/probe.hpp"

#define MPI_CHECK(call)                                                                                          \
  do {                                                                                                           \
    const int mpi_check_rc = (call);                                                                             \
    if (mpi_check_rc != MPI_SUCCESS) {                                                                           \
      char mpi_check_text[MPI_MAX_ERROR_STRING];                                                                 \
      int mpi_check_len = 0;                                                                                     \
      MPI_Error_string(mpi_check_rc, mpi_check_text, &mpi_check_len);                                            \
      throw std::runtime_error(std::string(#call) + " failed at " + __FILE__ + ":" + std::to_string(__LINE__) + \
                               ": " + std::string(mpi_check_text, static_cast<std::size_t>(mpi_check_len)));    \
    }                                                                                                            \
  } while (0)

namespace stagecraft::traces {

namespace {

int as_int(int64_t count) {
  if (count > INT32_MAX) throw std::invalid_argument("probe: message of " + std::to_string(count) + " elements exceeds MPI's int counts");
  return static_cast<int>(count);
}

class MpiComm final : public ProbeComm {
 public:
  MpiComm() {
    int initialized = 0;
    MPI_CHECK(MPI_Initialized(&initialized));
    if (!initialized) {
      MPI_CHECK(MPI_Init(nullptr, nullptr));
      owns_ = true;
    }
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  }
  ~MpiComm() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owns_ && !finalized) MPI_Finalize();
  }
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

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
  std::vector<std::string> gather(const std::string& blob) override {
    const int len = as_int(static_cast<int64_t>(blob.size()));
    std::vector<int> lens(rank_ == 0 ? static_cast<std::size_t>(size_) : 0);
    MPI_CHECK(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD));
    std::vector<int> offsets(lens.size(), 0);
    int64_t total = 0;
    for (std::size_t i = 0; i < lens.size(); ++i) {
      offsets[i] = as_int(total);
      total += lens[i];
    }
    std::string all(static_cast<std::size_t>(total), '\0');
    MPI_CHECK(MPI_Gatherv(blob.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR, 0, MPI_COMM_WORLD));
    std::vector<std::string> out;
    for (std::size_t i = 0; i < lens.size(); ++i) out.push_back(all.substr(static_cast<std::size_t>(offsets[i]), static_cast<std::size_t>(lens[i])));
    return out;
  }
  std::vector<std::string> all_gather_strings(const std::string& s) override {
    const int len = as_int(static_cast<int64_t>(s.size()));
    std::vector<int> lens(static_cast<std::size_t>(size_));
    MPI_CHECK(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, MPI_COMM_WORLD));
    std::vector<int> offsets(lens.size(), 0);
    int64_t total = 0;
    for (std::size_t i = 0; i < lens.size(); ++i) {
      offsets[i] = as_int(total);
      total += lens[i];
    }
    std::string all(static_cast<std::size_t>(total), '\0');
    MPI_CHECK(MPI_Allgatherv(s.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR, MPI_COMM_WORLD));
    std::vector<std::string> out;
    for (std::size_t i = 0; i < lens.size(); ++i) out.push_back(all.substr(static_cast<std::size_t>(offsets[i]), static_cast<std::size_t>(lens[i])));
    return out;
  }

 private:
  int rank_ = 0, size_ = 1;
  bool owns_ = false;
};

}  // namespace

std::unique_ptr<ProbeComm> make_mpi_comm() { return std::make_unique<MpiComm>(); }
bool mpi_available() { return true; }

}  // namespace stagecraft::traces
