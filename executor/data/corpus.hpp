// Corpus: the tokens training reads, addressed as (step, global sequence index) -> one sequence
// of T input ids and the T next-token targets. The address fixes the tokens, so sequence j of
// step t is identical under every plan (dp size, micro-batch size and count only decide who
// reads it). Sources: a synthetic Markov corpus with learnable structure, a text file read as
// bytes, a raw file of little-endian uint16 token ids. Not a tokenizer, not a streaming loader
// (files are read whole into memory).
//
// Shape legend: B sequences, T tokens per sequence; inputs and targets are [B*T] row-major.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "executor/model/layers.hpp"

namespace stagecraft::executor {

// A bad data file: names the file and, where it is about one position, the byte offset.
class DataError : public std::runtime_error {
 public:
  DataError(std::string file, int64_t byte_offset, const std::string& detail);
  const std::string& file() const { return file_; }
  int64_t byte_offset() const { return byte_offset_; }  // -1 when not about one position

 private:
  std::string file_;
  int64_t byte_offset_;
};

// Which windows of a file corpus a step reads.
//   hashed      sequence j of step t: the window at a hashed offset (a pure function of seed, t, j)
//   sequential  step t's global batch of B sequences is the B consecutive windows of T + 1 tokens
//               starting at token t*B*T: sequence j is tokens [(t*B + j)*T, (t*B + j)*T + T] of the
//               file, positions taken modulo its length (wrapping at the end), so any framework can
//               feed the same batches
enum class DataOrder : uint8_t { kHashed, kSequential };
const char* to_string(DataOrder order);

struct Batch {
  int64_t sequences = 0;         // B
  int64_t seq = 0;               // T
  std::vector<int32_t> inputs;   // [B*T]
  std::vector<int32_t> targets;  // [B*T]: targets[i] is the token after inputs[i]

  TokenBatch view() const { return {{sequences, seq}, inputs, targets}; }
};

// The largest token or text file a Corpus reads (its tokens are held in memory as 4-byte ids:
// 8 GiB of them for a 4 GiB uint16 file): docs/reliability.md, "File kinds".
inline constexpr std::uintmax_t kMaxCorpusFileBytes = std::uintmax_t{4} << 30;

class Corpus {
 public:
  // Tokens from a fixed random first-order Markov chain over [0, vocab): from each token the
  // next is one of 4 successors (picked by hashing (seed, token)) with probabilities 0.80, 0.10,
  // 0.06, 0.04, so a model can learn it: the loss falls from ln(vocab) towards about 0.71 nats.
  static Corpus synthetic(int64_t vocab, int64_t seq_len, uint64_t seed);
  // A text file as bytes (token = byte value); needs vocab >= 256.
  static Corpus from_text_file(const std::string& path, int64_t vocab, int64_t seq_len, uint64_t seed);
  // A raw file of little-endian uint16 token ids, each < vocab.
  static Corpus from_token_file(const std::string& path, int64_t vocab, int64_t seq_len, uint64_t seed);

  // A file as `format` says: "uint16" or "text"; "" chooses text for a .txt file, else uint16.
  static Corpus from_file(const std::string& path, const std::string& format, int64_t vocab, int64_t seq_len,
                          uint64_t seed);
  // The same corpus reading its windows in `order`, the global batch being `sequences_per_step`
  // sequences (what the sequential order needs). Throws std::invalid_argument for the synthetic
  // corpus in sequential order, or a batch below 1.
  Corpus in_order(DataOrder order, int64_t sequences_per_step) const;
  DataOrder order() const { return order_; }

  // Sequence `sequence` of step `step`: the synthetic chain started from a hashed state, or a
  // file window (at a hashed offset, or the sequential order's). Pure: depends only on (seed,
  // order, step, sequence).
  Batch sample(int64_t step, int64_t sequence) const;
  // Sequences first .. first + count - 1 of step `step`, stacked (a micro-batch).
  Batch sample(int64_t step, int64_t first, int64_t count) const;

  int64_t vocab() const { return vocab_; }
  int64_t seq_len() const { return seq_len_; }
  bool is_synthetic() const { return tokens_.empty(); }
  const std::string& source() const { return source_; }  // "synthetic" or the file path
  // Expected cross-entropy (nats) of the synthetic chain's transitions when successors differ.
  static double synthetic_entropy();

 private:
  Corpus(int64_t vocab, int64_t seq_len, uint64_t seed, std::string source, std::vector<int32_t> tokens);
  void fill_synthetic(uint64_t key, int32_t* out) const;  // seq_len + 1 tokens
  void fill_window(uint64_t key, int32_t* out) const;     // seq_len + 1 tokens
  void fill_sequential(int64_t step, int64_t sequence, int32_t* out) const;

  int64_t vocab_ = 0;
  int64_t seq_len_ = 0;
  uint64_t seed_ = 0;
  std::string source_;
  std::vector<int32_t> tokens_;  // file corpora; empty for the synthetic one
  DataOrder order_ = DataOrder::kHashed;
  int64_t step_sequences_ = 0;   // B, for the sequential order
};

}  // namespace stagecraft::executor
