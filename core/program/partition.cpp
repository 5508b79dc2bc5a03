#include "core/program/partition.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace stagecraft::program {

std::vector<int64_t> linear_partition(const std::vector<double>& costs, int64_t parts, double extra_first,
                                      double extra_last) {
  const int64_t n = static_cast<int64_t>(costs.size());
  if (parts < 1 || parts > n) throw std::invalid_argument("linear_partition: need 1 <= parts <= items");
  std::vector<double> prefix(static_cast<std::size_t>(n) + 1, 0.0);
  for (int64_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[i];
  auto part_cost = [&](int64_t begin, int64_t end, int64_t index) {
    return prefix[end] - prefix[begin] + (index == 0 ? extra_first : 0.0) + (index == parts - 1 ? extra_last : 0.0);
  };
  const double inf = std::numeric_limits<double>::infinity();
  // best[j][e]: minimal max cost of splitting items [0, e) into j+1 parts; cut[j][e]: start of part j.
  std::vector<std::vector<double>> best(parts, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int64_t>> cut(parts, std::vector<int64_t>(n + 1, 0));
  for (int64_t e = 1; e <= n; ++e) best[0][e] = part_cost(0, e, 0);
  for (int64_t j = 1; j < parts; ++j) {
    for (int64_t e = j + 1; e <= n - (parts - 1 - j); ++e) {
      for (int64_t b = j; b < e; ++b) {
        const double c = std::max(best[j - 1][b], part_cost(b, e, j));
        if (c < best[j][e]) {  // strict: ties keep the earliest cut, deterministically
          best[j][e] = c;
          cut[j][e] = b;
        }
      }
    }
  }
  std::vector<int64_t> sizes(static_cast<std::size_t>(parts));
  int64_t end = n;
  for (int64_t j = parts - 1; j >= 0; --j) {
    const int64_t begin = j == 0 ? 0 : cut[j][end];
    sizes[j] = end - begin;
    end = begin;
  }
  return sizes;
}

std::vector<int64_t> stage_layers_of(const std::vector<int64_t>& chunk_layers, int64_t pp) {
  std::vector<int64_t> out(static_cast<std::size_t>(pp), 0);
  for (std::size_t k = 0; k < chunk_layers.size(); ++k) out[k % static_cast<std::size_t>(pp)] += chunk_layers[k];
  return out;
}

std::vector<ChunkInfo> place_chunks(const spec::Model& m, int64_t pp, int64_t v, const std::vector<int64_t>& layers) {
  const int64_t total = pp * v;
  std::vector<ChunkInfo> chunks(static_cast<std::size_t>(total));
  int64_t block = 0;
  for (int64_t k = 0; k < total; ++k) {
    ChunkInfo c;
    c.stage = static_cast<int32_t>(k % pp);
    c.chunk = static_cast<int32_t>(k / pp);
    c.unit_begin = k == 0 ? 0 : block_first_unit(block);
    block += layers[static_cast<std::size_t>(k)];
    c.unit_end = k == total - 1 ? head_unit(m) + 1 : block_first_unit(block);
    chunks[static_cast<std::size_t>(c.stage * v + c.chunk)] = c;
  }
  return chunks;
}

std::vector<int64_t> chunk_layers(const spec::Model& m, const spec::Plan& p, const std::vector<Unit>& units) {
  const int64_t v = p.virtual_stages, pp = p.pp;
  std::vector<int64_t> out(static_cast<std::size_t>(pp * v));
  if (!p.stage_layers.empty()) {
    for (int64_t s = 0; s < pp; ++s) {
      const int64_t total = p.stage_layers[s];
      for (int64_t c = 0; c < v; ++c) out[c * pp + s] = total / v + (c < total % v ? 1 : 0);
    }
    return out;
  }
  std::vector<double> costs(static_cast<std::size_t>(m.layers));
  for (int64_t b = 0; b < m.layers; ++b) {
    costs[b] = units[block_first_unit(b)].fwd_flops_per_token + units[block_first_unit(b) + 1].fwd_flops_per_token;
  }
  const double first = units.front().fwd_flops_per_token;
  const double last = units.back().fwd_flops_per_token;
  return linear_partition(costs, pp * v, first, last);
}

}  // namespace stagecraft::program
