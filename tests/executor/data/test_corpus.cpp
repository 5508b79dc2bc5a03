// Corpus: synthetic tokens are deterministic, plan-independent and learnable; file loaders read
// bytes and little-endian uint16 ids and reject bad files naming the file (and the offset).
#include "executor/data/corpus.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <gtest/gtest.h>

namespace stagecraft::executor {
namespace {

std::string write_file(const std::string& name, const std::string& bytes) {
  const std::string path = ::testing::TempDir() + "stagecraft_corpus_" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string uint16_le(const std::vector<int>& ids) {
  std::string out;
  for (int id : ids) {
    out.push_back(static_cast<char>(id & 0xff));
    out.push_back(static_cast<char>((id >> 8) & 0xff));
  }
  return out;
}

template <typename F>
std::string data_error(F&& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no DataError thrown";
  return {};
}

TEST(Corpus, SyntheticIsDeterministicAndShiftedByOne) {
  const Corpus a = Corpus::synthetic(50, 16, 7), b = Corpus::synthetic(50, 16, 7), c = Corpus::synthetic(50, 16, 8);
  const Batch x = a.sample(3, 5);
  EXPECT_EQ(x.inputs, b.sample(3, 5).inputs);
  EXPECT_NE(x.inputs, a.sample(3, 6).inputs);
  EXPECT_NE(x.inputs, a.sample(4, 5).inputs);
  EXPECT_NE(x.inputs, c.sample(3, 5).inputs);
  ASSERT_EQ(x.inputs.size(), 16u);
  for (std::size_t i = 0; i + 1 < x.inputs.size(); ++i) EXPECT_EQ(x.targets[i], x.inputs[i + 1]);
  for (int32_t id : x.targets) EXPECT_TRUE(id >= 0 && id < 50);
}

// Global batch 8 of step 2: dp = 2 ranks x 2 micro-batches of 2 sequences read the same tokens
// as one rank reading all 8 at once, or 8 micro-batches of 1.
TEST(Corpus, GlobalBatchOrderIsTheSameForEveryPlan) {
  for (const Corpus& corpus : {Corpus::synthetic(31, 12, 1), Corpus::from_text_file(write_file("plan.txt",
                                   std::string(500, 'a') + "the quick brown fox jumps over the lazy dog"), 256, 12, 1)}) {
    const Batch all = corpus.sample(2, 0, 8);
    std::vector<int32_t> by_plan, by_one;
    for (int rank = 0; rank < 2; ++rank) {
      for (int mb = 0; mb < 2; ++mb) {
        const Batch part = corpus.sample(2, rank * 4 + mb * 2, 2);
        by_plan.insert(by_plan.end(), part.inputs.begin(), part.inputs.end());
      }
    }
    for (int j = 0; j < 8; ++j) {
      const Batch one = corpus.sample(2, j);
      by_one.insert(by_one.end(), one.inputs.begin(), one.inputs.end());
    }
    EXPECT_EQ(by_plan, all.inputs) << corpus.source();
    EXPECT_EQ(by_one, all.inputs) << corpus.source();
    EXPECT_EQ(all.view().dims.rows(), 8 * 12);
  }
}

// Empirical conditional entropy of next | current is near the chain's 0.71 nats, far below
// ln(vocab): a model has something to learn.
TEST(Corpus, SyntheticHasLowEntropyTransitions) {
  const int64_t vocab = 64;
  const Corpus corpus = Corpus::synthetic(vocab, 64, 3);
  std::map<int32_t, std::map<int32_t, double>> counts;
  double total = 0;
  for (int64_t j = 0; j < 400; ++j) {
    const Batch b = corpus.sample(0, j);
    for (std::size_t i = 0; i < b.inputs.size(); ++i) counts[b.inputs[i]][b.targets[i]] += 1, total += 1;
  }
  double entropy = 0;
  for (const auto& [from, next] : counts) {
    double n = 0;
    for (const auto& [to, c] : next) n += c;
    for (const auto& [to, c] : next) entropy -= c / total * std::log(c / n);
  }
  EXPECT_LT(entropy, Corpus::synthetic_entropy() + 0.15);
  EXPECT_LT(entropy, 0.3 * std::log(static_cast<double>(vocab)));
}

TEST(Corpus, TextFileIsBytesAndWindowsComeFromTheFile) {
  const std::string text = "Stagecraft plans, simulates and runs distributed training.\n";
  const Corpus corpus = Corpus::from_text_file(write_file("ok.txt", text), 256, 10, 4);
  for (int j = 0; j < 20; ++j) {
    const Batch b = corpus.sample(1, j);
    const std::string window(b.inputs.begin(), b.inputs.end());
    EXPECT_NE(text.find(window + static_cast<char>(b.targets.back())), std::string::npos) << window;
  }
}

TEST(Corpus, TextFileNeedsByteVocab) {
  const std::string path = write_file("small_vocab.txt", "hello world, hello world");
  const std::string msg = data_error([&] { Corpus::from_text_file(path, 255, 4, 0); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("256"), std::string::npos) << msg;
}

TEST(Corpus, TokenFileReadsLittleEndianIds) {
  const Corpus corpus = Corpus::from_token_file(write_file("ok.bin", uint16_le({1, 300, 2, 300, 1})), 301, 4, 0);
  const Batch b = corpus.sample(0, 0);
  EXPECT_EQ(b.inputs, (std::vector<int32_t>{1, 300, 2, 300}));
  EXPECT_EQ(b.targets, (std::vector<int32_t>{300, 2, 300, 1}));
}

TEST(Corpus, TokenFileRejectsBadFilesNamingFileAndOffset) {
  const std::string big = write_file("big_id.bin", uint16_le({1, 2, 3, 60000, 4, 5}));
  std::string msg = data_error([&] { Corpus::from_token_file(big, 50257, 2, 0); });
  EXPECT_NE(msg.find(big), std::string::npos) << msg;
  EXPECT_NE(msg.find("byte 6"), std::string::npos) << msg;
  EXPECT_NE(msg.find("60000"), std::string::npos) << msg;

  const std::string odd = write_file("odd.bin", uint16_le({1, 2, 3}) + "x");
  msg = data_error([&] { Corpus::from_token_file(odd, 100, 2, 0); });
  EXPECT_NE(msg.find(odd), std::string::npos) << msg;
  EXPECT_NE(msg.find("byte 6"), std::string::npos) << msg;

  const std::string short_file = write_file("short.bin", uint16_le({1, 2}));
  msg = data_error([&] { Corpus::from_token_file(short_file, 100, 4, 0); });
  EXPECT_NE(msg.find(short_file), std::string::npos) << msg;

  const std::string missing = ::testing::TempDir() + "stagecraft_corpus_does_not_exist.bin";
  msg = data_error([&] { Corpus::from_token_file(missing, 100, 4, 0); });
  EXPECT_NE(msg.find(missing), std::string::npos) << msg;
}

}  // namespace
}  // namespace stagecraft::executor

namespace stagecraft::executor {
namespace {

// The sequential order, derived by hand: a file of ids 0 .. 49 (id i at position i), T = 4, a
// global batch of B = 3. Sequence j of step t starts at token (t*B + j)*T, positions modulo 50.
TEST(CorpusOrder, SequentialReadsTheGlobalBatchsWindowsInTurnAndWraps) {
  std::vector<int> ids(50);
  for (int i = 0; i < 50; ++i) ids[static_cast<std::size_t>(i)] = i;
  const Corpus file = Corpus::from_token_file(write_file("sequential.bin", uint16_le(ids)), 64, 4, 9);
  const Corpus seq = file.in_order(DataOrder::kSequential, 3);
  EXPECT_EQ(seq.order(), DataOrder::kSequential);
  // step 2, sequence 1: window (2*3 + 1) = 7 starts at 7*4 = 28
  const Batch b = seq.sample(2, 1);
  EXPECT_EQ(b.inputs, (std::vector<int32_t>{28, 29, 30, 31}));
  EXPECT_EQ(b.targets, (std::vector<int32_t>{29, 30, 31, 32}));
  // step 4, sequence 0: window 12 starts at 48 and wraps after id 49
  const Batch w = seq.sample(4, 0);
  EXPECT_EQ(w.inputs, (std::vector<int32_t>{48, 49, 0, 1}));
  EXPECT_EQ(w.targets, (std::vector<int32_t>{49, 0, 1, 2}));
  // a micro-batch of sequences 1 and 2 of step 0 is windows 1 and 2, stacked
  const Batch mb = seq.sample(0, 1, 2);
  EXPECT_EQ(mb.inputs, (std::vector<int32_t>{4, 5, 6, 7, 8, 9, 10, 11}));
  // the hashed order is what it was
  EXPECT_EQ(file.in_order(DataOrder::kHashed, 3).sample(2, 1).inputs, file.sample(2, 1).inputs);
  EXPECT_THROW(Corpus::synthetic(64, 4, 1).in_order(DataOrder::kSequential, 3), std::invalid_argument);
  EXPECT_THROW(file.in_order(DataOrder::kSequential, 0), std::invalid_argument);
  EXPECT_STREQ(to_string(DataOrder::kSequential), "sequential");
}

}  // namespace
}  // namespace stagecraft::executor
