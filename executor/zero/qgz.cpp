// qgZ's partitions, groups and host computations for one gradient matrix (zero/qgz.hpp).
#include "executor/zero/qgz.hpp"

#include <algorithm>
#include <string>

#include "executor/errors.hpp"
#include "executor/index.hpp"

namespace stagecraft::executor {

namespace {

void check_size(const char* what, std::size_t got, int64_t want) {
  if (static_cast<int64_t>(got) != want) {
    throw ExecutorError(std::string("qgZ: ") + what + " of " + std::to_string(got) + ", expected " + std::to_string(want));
  }
}

}  // namespace

QgzMatrix::QgzMatrix(Range range, std::vector<Range> parts, int64_t rows, int64_t cols, int64_t local)
    : range_(range), parts_(std::move(parts)), local_(local) {
  const int64_t n = range.size(), w = world();
  groups_ = std::max({rows, cols, w});
  const std::string what = "qgZ: a " + std::to_string(rows) + " x " + std::to_string(cols) + " gradient over " +
                           std::to_string(w) + " ranks, " + std::to_string(local) + " a node";
  if (rows * cols != n || w < 1 || n % (2 * w) != 0) throw ExecutorError(what + ": its elements must divide by 2W");
  if (groups_ % w != 0 || n % groups_ != 0) {
    throw ExecutorError(what + ": max(rows, cols, W) = " + std::to_string(groups_) +
                        " groups must divide the tensor and be a multiple of W (DeepSpeed's swizzled quantizer asserts it)");
  }
  if (local < 1 || w % local != 0) throw ExecutorError(what + ": the node's ranks must divide W");
  group_elems_ = n / groups_;
  int64_t at_pos = range.begin;
  for (const Range& p : parts_) {
    if (p.begin != at_pos || p.end < p.begin) throw ExecutorError(what + ": partitions that do not tile the tensor");
    at_pos = p.end;
  }
  if (at_pos != range.end) throw ExecutorError(what + ": partitions that do not tile the tensor");
}

std::vector<int64_t> QgzMatrix::part_groups(int64_t d) const {
  const Range p = part(d);
  std::vector<int64_t> out;
  for (int64_t pos = p.begin; pos < p.end;) {
    const int64_t next = std::min(p.end, range_.begin + ((pos - range_.begin) / group_elems_ + 1) * group_elems_);
    out.push_back(next - pos);
    pos = next;
  }
  return out;
}

void QgzMatrix::quantize_part(int64_t d, std::span<const float> x, QuantizedPayload& out, QuantizationError& error) const {
  const std::vector<int64_t> lengths = part_groups(d);
  std::vector<int8_t> q(x.size());
  std::vector<float> scales(lengths.size());
  quantize_symmetric(x, lengths, 4, q, scales);
  std::vector<float> back(x.size());
  dequantize_symmetric(q, lengths, scales, back);
  error.add(x, back);
  const std::size_t first = out.values.size();
  out.values.resize(first + at(int4_bytes(static_cast<int64_t>(q.size()))));
  pack_int4(q, std::span<int8_t>(out.values).subspan(first));
  out.scales.insert(out.scales.end(), scales.begin(), scales.end());
}

void QgzMatrix::dequantize_part(int64_t d, std::span<const int8_t> values, std::span<const float> scales,
                                std::span<float> out) const {
  const std::vector<int64_t> lengths = part_groups(d);
  std::vector<int8_t> q(out.size());
  unpack_int4(values.first(at(part_bytes(d))), q);
  dequantize_symmetric(q, lengths, scales.first(lengths.size()), out);
}

QuantizedPayload QgzMatrix::swizzle_quantize(std::span<const float> tensor, std::vector<int64_t>& send_values,
                                        std::vector<int64_t>& send_scales, QuantizationError& error) const {
  check_size("tensor", tensor.size(), range_.size());
  QuantizedPayload out;
  send_values.assign(at(local_), 0);
  send_scales.assign(at(local_), 0);
  for (int64_t j = 0; j < local_; ++j) {  // slot (d mod L)·M + d/L: local peer j's partitions together
    for (int64_t k = 0; k < nodes(); ++k) {
      const int64_t d = j + k * local_;
      const Range p = part(d);
      quantize_part(d, tensor.subspan(at(p.begin - range_.begin), at(p.size())), out, error);
      send_values[at(j)] += part_bytes(d);
      send_scales[at(j)] += part_scales(d);
    }
  }
  return out;
}

int64_t QgzMatrix::chunk_values(int64_t j) const {
  int64_t n = 0;
  for (int64_t k = 0; k < nodes(); ++k) n += part_bytes(j + k * local_);
  return n;
}

int64_t QgzMatrix::chunk_scales(int64_t j) const {
  int64_t n = 0;
  for (int64_t k = 0; k < nodes(); ++k) n += part_scales(j + k * local_);
  return n;
}

QuantizedPayload QgzMatrix::reduce_requantize(int64_t j, const QuantizedPayload& received, std::vector<int64_t>& send_values,
                                         std::vector<int64_t>& send_scales, QuantizationError& error) const {
  const int64_t cv = chunk_values(j), cs = chunk_scales(j);
  check_size("intra-node values", received.values.size(), local_ * cv);
  check_size("intra-node scales", received.scales.size(), local_ * cs);
  QuantizedPayload out;
  send_values.assign(at(nodes()), 0);
  send_scales.assign(at(nodes()), 0);
  int64_t value_at = 0, scale_at = 0;  // partition k's place inside a chunk
  for (int64_t k = 0; k < nodes(); ++k) {
    const int64_t d = j + k * local_;
    std::vector<float> sum(at(part(d).size()), 0.0f), one(sum.size());
    for (int64_t i = 0; i < local_; ++i) {  // local peers in order
      dequantize_part(d, std::span<const int8_t>(received.values).subspan(at(i * cv + value_at)),
                      std::span<const float>(received.scales).subspan(at(i * cs + scale_at)), one);
      for (std::size_t e = 0; e < sum.size(); ++e) sum[e] += one[e];
    }
    quantize_part(d, sum, out, error);
    send_values[at(k)] = part_bytes(d);
    send_scales[at(k)] = part_scales(d);
    value_at += part_bytes(d);
    scale_at += part_scales(d);
  }
  return out;
}

std::vector<float> QgzMatrix::dequantize_sum(int64_t d, const QuantizedPayload& received) const {
  const int64_t pv = part_bytes(d), ps = part_scales(d);
  check_size("cross-node values", received.values.size(), nodes() * pv);
  check_size("cross-node scales", received.scales.size(), nodes() * ps);
  std::vector<float> sum(at(part(d).size()), 0.0f), one(sum.size());
  for (int64_t k = 0; k < nodes(); ++k) {  // nodes in order
    dequantize_part(d, std::span<const int8_t>(received.values).subspan(at(k * pv)),
                    std::span<const float>(received.scales).subspan(at(k * ps)), one);
    for (std::size_t e = 0; e < sum.size(); ++e) sum[e] += one[e];
  }
  return sum;
}

}  // namespace stagecraft::executor
