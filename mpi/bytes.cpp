#include "mpi/bytes.hpp"

#include <climits>
#include <cstdint>

#include "mpi/error.hpp"

namespace stagecraft::mpi {

namespace {

// Counts and displacements of the concatenation of strings of these lengths, as MPI ints.
struct Layout {
  std::vector<int> counts, displs;
  int total = 0;
};

Layout layout_of(const std::vector<int64_t>& lengths, const char* what) {
  Layout l;
  l.total = total_bytes(lengths, what);
  int64_t offset = 0;
  for (int64_t n : lengths) {
    l.counts.push_back(static_cast<int>(n));
    l.displs.push_back(static_cast<int>(offset));
    offset += n;
  }
  return l;
}

void finish(MPI_Request* q, const Waiter& wait) {
  if (wait) {
    wait(q);
  } else {
    MPI_CHECK(MPI_Wait(q, MPI_STATUS_IGNORE));
  }
}

std::vector<int64_t> all_lengths(MPI_Comm comm, std::string_view mine, const Waiter& wait) {
  int n = 0;
  MPI_CHECK(MPI_Comm_size(comm, &n));
  const int64_t len = static_cast<int64_t>(mine.size());
  std::vector<int64_t> lengths(static_cast<std::size_t>(n));
  MPI_Request q = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Iallgather(&len, 1, MPI_INT64_T, lengths.data(), 1, MPI_INT64_T, comm, &q));
  finish(&q, wait);
  return lengths;
}

std::vector<std::string> split(const std::string& all, const Layout& l) {
  std::vector<std::string> out;
  out.reserve(l.counts.size());
  for (std::size_t i = 0; i < l.counts.size(); ++i) {
    out.push_back(all.substr(static_cast<std::size_t>(l.displs[i]), static_cast<std::size_t>(l.counts[i])));
  }
  return out;
}

}  // namespace

int total_bytes(std::span<const int64_t> lengths, const char* what) {
  int64_t total = 0;
  for (int64_t n : lengths) total += n;
  if (total > INT_MAX) {
    throw MpiError(MPI_ERR_COUNT, std::string(what) + ": " + std::to_string(total) +
                                      " bytes in all exceed MPI's int counts (" + std::to_string(INT_MAX) + ")");
  }
  return static_cast<int>(total);
}

std::vector<std::string> all_gather_bytes(MPI_Comm comm, std::string_view mine, const Waiter& wait) {
  const Layout l = layout_of(all_lengths(comm, mine, wait), "all_gather_bytes");
  std::string all(static_cast<std::size_t>(l.total), '\0');
  MPI_Request q = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Iallgatherv(mine.data(), static_cast<int>(mine.size()), MPI_BYTE, all.data(), l.counts.data(),
                            l.displs.data(), MPI_BYTE, comm, &q));
  finish(&q, wait);
  return split(all, l);
}

std::vector<std::string> gather_bytes(MPI_Comm comm, std::string_view mine, int root, const Waiter& wait) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  const Layout l = layout_of(all_lengths(comm, mine, wait), "gather_bytes");
  std::string all(rank == root ? static_cast<std::size_t>(l.total) : 0, '\0');
  MPI_Request q = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Igatherv(mine.data(), static_cast<int>(mine.size()), MPI_BYTE, all.data(), l.counts.data(),
                         l.displs.data(), MPI_BYTE, root, comm, &q));
  finish(&q, wait);
  if (rank != root) return {};
  return split(all, l);
}

std::string broadcast_bytes(MPI_Comm comm, std::string_view data, int root, const Waiter& wait) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  int64_t len = rank == root ? static_cast<int64_t>(data.size()) : 0;
  MPI_Request q = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Ibcast(&len, 1, MPI_INT64_T, root, comm, &q));
  finish(&q, wait);
  total_bytes(std::span<const int64_t>(&len, 1), "broadcast_bytes");
  std::string out = rank == root ? std::string(data) : std::string(static_cast<std::size_t>(len), '\0');
  if (len > 0) {
    MPI_CHECK(MPI_Ibcast(out.data(), static_cast<int>(len), MPI_BYTE, root, comm, &q));
    finish(&q, wait);
  }
  return out;
}

}  // namespace stagecraft::mpi
