#include "executor/evaluate.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include "executor/model/layers.hpp"

namespace stagecraft::executor {

EvalResult evaluate(const spec::Model& m, std::span<const float> params, const Corpus& corpus, int64_t windows,
                    Communicator& comm, std::vector<float>* log_probs) {
  const ParamLayout layout(m);
  if (static_cast<int64_t>(params.size()) != layout.size()) {
    throw std::invalid_argument("evaluate: " + std::to_string(params.size()) + " parameters for model '" + m.name +
                                "', which has " + std::to_string(layout.size()));
  }
  if (windows < 1) throw std::invalid_argument("evaluate: expected at least one window");
  if (corpus.is_synthetic()) throw std::invalid_argument("evaluate: scores a file's windows, not the synthetic corpus");
  if (log_probs != nullptr && comm.size() != 1) throw std::invalid_argument("evaluate: log-probabilities on one rank only");
  if (log_probs != nullptr) log_probs->assign(static_cast<std::size_t>(windows * m.seq_len * m.vocab), 0.0f);
  const Corpus seq = corpus.in_order(DataOrder::kSequential, windows);
  std::vector<Layer<float>> units;
  for (int64_t u = 0; u < unit_count(m); ++u) units.emplace_back(layout, u);
  std::vector<std::pair<int64_t, double>> mine;  // (window, loss) of the windows this rank scores
  const int64_t T = m.seq_len, C = m.hidden;
  std::vector<float> x(static_cast<std::size_t>(T * C)), y(x.size());
  for (int64_t j = comm.rank(); j < windows; j += comm.size()) {
    const Batch b = seq.sample(0, j);
    const TokenBatch tb = b.view();
    for (std::size_t u = 0; u < units.size(); ++u) {
      UnitCache<float> cache;
      const bool head = u + 1 == units.size();
      std::span<float> out = head ? std::span<float>(y.data(), 1) : std::span<float>(y);
      units[u].forward(tb, params, u == 0 ? std::span<const float>() : std::span<const float>(x), out, cache);
      if (head) {
        mine.emplace_back(j, static_cast<double>(y[0]));
        if (log_probs != nullptr) {  // the cache holds the softmax [T, V]
          float* dst = log_probs->data() + j * T * m.vocab;
          for (int64_t i = 0; i < T * m.vocab; ++i) dst[i] = std::log(cache.probs[static_cast<std::size_t>(i)]);
        }
      } else {
        std::swap(x, y);
      }
    }
  }
  EvalResult r;
  r.losses = all_gather_slots(comm, mine, windows);  // every window's loss is on exactly one rank
  double sum = 0;
  for (double l : r.losses) sum += l;
  r.mean = sum / static_cast<double>(windows);
  r.tokens = windows * T;
  return r;
}

}  // namespace stagecraft::executor
