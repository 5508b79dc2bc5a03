#include "executor/data/corpus.hpp"

#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

#include "core/io/file.hpp"
#include "core/spec/error.hpp"
#include "executor/model/random.hpp"

namespace stagecraft::executor {

namespace {

constexpr std::array<double, 4> kSuccessorProbs = {0.80, 0.10, 0.06, 0.04};

// Which of the 4 successors a uniform draw u in (0, 1) selects.
uint64_t pick_successor(double u) {
  double acc = 0;
  for (std::size_t k = 0; k + 1 < kSuccessorProbs.size(); ++k) {
    acc += kSuccessorProbs[k];
    if (u < acc) return k;
  }
  return kSuccessorProbs.size() - 1;
}

std::string describe(const std::string& file, int64_t byte_offset, const std::string& detail) {
  if (byte_offset < 0) return file + ": " + detail;
  return file + ": byte " + std::to_string(byte_offset) + ": " + detail;
}

// A regular file within kMaxCorpusFileBytes (io::read_input: not a device or FIFO read forever).
std::string read_bytes(const std::string& path, std::string_view kind) {
  try {
    return io::read_input(path, kMaxCorpusFileBytes, kind);
  } catch (const spec::SpecError& e) {
    throw DataError(path, -1, e.detail());
  }
}

void check_sizes(const std::string& source, int64_t vocab, int64_t seq_len) {
  if (vocab <= 0 || seq_len <= 0) {
    throw std::invalid_argument(source + ": corpus needs vocab > 0 and seq_len > 0, got vocab " +
                                std::to_string(vocab) + ", seq_len " + std::to_string(seq_len));
  }
}

void check_length(const std::string& path, std::size_t tokens, int64_t seq_len) {
  if (static_cast<int64_t>(tokens) < seq_len + 1) {
    throw DataError(path, -1, "holds " + std::to_string(tokens) + " tokens, fewer than seq_len + 1 = " +
                                  std::to_string(seq_len + 1) + " (one sequence and its last target)");
  }
}

}  // namespace

DataError::DataError(std::string file, int64_t byte_offset, const std::string& detail)
    : std::runtime_error(describe(file, byte_offset, detail)), file_(std::move(file)), byte_offset_(byte_offset) {}

Corpus::Corpus(int64_t vocab, int64_t seq_len, uint64_t seed, std::string source, std::vector<int32_t> tokens)
    : vocab_(vocab), seq_len_(seq_len), seed_(seed), source_(std::move(source)), tokens_(std::move(tokens)) {}

Corpus Corpus::synthetic(int64_t vocab, int64_t seq_len, uint64_t seed) {
  check_sizes("synthetic", vocab, seq_len);
  return Corpus(vocab, seq_len, seed, "synthetic", {});
}

Corpus Corpus::from_text_file(const std::string& path, int64_t vocab, int64_t seq_len, uint64_t seed) {
  check_sizes(path, vocab, seq_len);
  if (vocab < 256) {
    throw DataError(path, -1, "byte-level text needs a vocab of at least 256, the model has " + std::to_string(vocab));
  }
  const std::string bytes = read_bytes(path, "a text file");
  check_length(path, bytes.size(), seq_len);
  std::vector<int32_t> ids(bytes.size());
  for (std::size_t i = 0; i < bytes.size(); ++i) ids[i] = static_cast<unsigned char>(bytes[i]);   // byte values 0-255
  return Corpus(vocab, seq_len, seed, path, std::move(ids));
}

Corpus Corpus::from_token_file(const std::string& path, int64_t vocab, int64_t seq_len, uint64_t seed) {
  check_sizes(path, vocab, seq_len);
  const std::string bytes = read_bytes(path, "a token file (uint16 ids)");
  if (bytes.size() % 2 != 0) {
    throw DataError(path, static_cast<int64_t>(bytes.size()) - 1,
                    "odd trailing byte: a token file holds little-endian uint16 ids (" +
                        std::to_string(bytes.size()) + " bytes)");
  }
  std::vector<int32_t> tokens(bytes.size() / 2);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const int32_t id = static_cast<unsigned char>(bytes[2 * i]) | (static_cast<unsigned char>(bytes[2 * i + 1]) << 8);
    if (id >= vocab) {
      throw DataError(path, static_cast<int64_t>(2 * i),
                      "token id " + std::to_string(id) + " is not below the vocab " + std::to_string(vocab));
    }
    tokens[i] = id;
  }
  check_length(path, tokens.size(), seq_len);
  return Corpus(vocab, seq_len, seed, path, std::move(tokens));
}

const char* to_string(DataOrder order) { return order == DataOrder::kSequential ? "sequential" : "hashed"; }

Corpus Corpus::in_order(DataOrder order, int64_t sequences_per_step) const {
  if (order == DataOrder::kSequential && is_synthetic()) {
    throw std::invalid_argument("the sequential data order reads a file's windows in turn; the synthetic corpus has none");
  }
  if (sequences_per_step < 1) {
    throw std::invalid_argument(source_ + ": a step of " + std::to_string(sequences_per_step) + " sequences");
  }
  Corpus c = *this;
  c.order_ = order;
  c.step_sequences_ = sequences_per_step;
  return c;
}

void Corpus::fill_sequential(int64_t step, int64_t sequence, int32_t* out) const {
  const uint64_t n = tokens_.size();
  // (t*B + j)*T modulo n: (window mod n) * T stays below 2^64 for files of up to 2^44 tokens
  // at any seq_len below 2^20
  const uint64_t window = static_cast<uint64_t>(step) * static_cast<uint64_t>(step_sequences_) + static_cast<uint64_t>(sequence);
  const uint64_t start = (window % n) * static_cast<uint64_t>(seq_len_) % n;
  for (int64_t k = 0; k <= seq_len_; ++k) out[k] = tokens_[static_cast<std::size_t>((start + static_cast<uint64_t>(k)) % n)];
}

double Corpus::synthetic_entropy() {
  double h = 0;
  for (double p : kSuccessorProbs) h -= p * std::log(p);
  return h;
}

void Corpus::fill_synthetic(uint64_t key, int32_t* out) const {
  const uint64_t chain = rng::combine(seed_, rng::hash_name("synthetic.chain"));
  const uint64_t v = static_cast<uint64_t>(vocab_);
  out[0] = static_cast<int32_t>(rng::combine(key, 0) % v);
  for (int64_t p = 1; p <= seq_len_; ++p) {
    const double u = rng::uniform(rng::combine(key, static_cast<uint64_t>(p)));
    const uint64_t k = pick_successor(u);
    const uint64_t state = static_cast<uint64_t>(out[p - 1]);
    out[p] = static_cast<int32_t>(rng::combine(chain, state * kSuccessorProbs.size() + k) % v);
  }
}

void Corpus::fill_window(uint64_t key, int32_t* out) const {
  const uint64_t windows = tokens_.size() - static_cast<std::size_t>(seq_len_);  // start offsets
  const std::size_t start = static_cast<std::size_t>(rng::combine(key, 0) % windows);
  std::copy(tokens_.begin() + static_cast<std::ptrdiff_t>(start),
            tokens_.begin() + static_cast<std::ptrdiff_t>(start + static_cast<std::size_t>(seq_len_) + 1), out);
}

Batch Corpus::sample(int64_t step, int64_t sequence) const { return sample(step, sequence, 1); }

Batch Corpus::sample(int64_t step, int64_t first, int64_t count) const {
  if (step < 0 || first < 0 || count <= 0) {
    throw std::invalid_argument(source_ + ": sample(step " + std::to_string(step) + ", first " +
                                std::to_string(first) + ", count " + std::to_string(count) + ") is out of range");
  }
  Batch b{count, seq_len_, std::vector<int32_t>(static_cast<std::size_t>(count * seq_len_)),
          std::vector<int32_t>(static_cast<std::size_t>(count * seq_len_))};
  const uint64_t step_key = rng::combine(rng::combine(seed_, rng::hash_name("corpus.step")), static_cast<uint64_t>(step));
  std::vector<int32_t> window(static_cast<std::size_t>(seq_len_ + 1));
  for (int64_t j = 0; j < count; ++j) {
    const uint64_t key = rng::combine(step_key, static_cast<uint64_t>(first + j));
    if (is_synthetic()) {
      fill_synthetic(key, window.data());
    } else if (order_ == DataOrder::kSequential) {
      fill_sequential(step, first + j, window.data());
    } else {
      fill_window(key, window.data());
    }
    std::copy(window.begin(), window.end() - 1, b.inputs.begin() + j * seq_len_);
    std::copy(window.begin() + 1, window.end(), b.targets.begin() + j * seq_len_);
  }
  return b;
}

Corpus Corpus::from_file(const std::string& path, const std::string& format, int64_t vocab, int64_t seq_len,
                         uint64_t seed) {
  const bool text = format.empty() ? path.ends_with(".txt") : format == "text";
  return text ? from_text_file(path, vocab, seq_len, seed) : from_token_file(path, vocab, seq_len, seed);
}

}  // namespace stagecraft::executor
