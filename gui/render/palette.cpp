#include "gui/render/palette.hpp"

#include <algorithm>
#include <cmath>

#include "render/colours.hpp"

namespace stagecraft::gui {

QColor op_colour(program::Op op) {
  const render::Rgb c = render::style_of(op).colour;
  return QColor(c.r, c.g, c.b);
}

QColor kind_colour(int kind) {
  if (kind < program::kOpCount) return op_colour(static_cast<program::Op>(kind));
  static const char* const classes[] = {"compute", "communication", "memory"};
  const render::Rgb c = render::colour_of(classes[std::min(2, kind - program::kOpCount)]);
  return QColor(c.r, c.g, c.b);
}

QColor waiting_colour(program::Op op) {
  QColor c = op_colour(op);
  return QColor::fromRgbF(0.75f + 0.25f * c.redF(), 0.75f + 0.25f * c.greenF(), 0.75f + 0.25f * c.blueF());
}

QColor memory_colour(trace::MemoryKind kind) {
  switch (kind) {
    case trace::MemoryKind::kParams: return QColor(68, 119, 170);
    case trace::MemoryKind::kGrads: return QColor(238, 102, 119);
    case trace::MemoryKind::kOptimizer: return QColor(204, 187, 68);
    case trace::MemoryKind::kActivations: return QColor(34, 136, 51);
    case trace::MemoryKind::kBuffers: return QColor(170, 51, 119);
    case trace::MemoryKind::kReserved: return QColor(187, 187, 187);
  }
  return Qt::gray;
}

QString op_letter(program::Op op) {
  switch (op) {
    case program::Op::kForward: return QStringLiteral("F");
    case program::Op::kBackward: return QStringLiteral("B");
    case program::Op::kBackwardInput: return QStringLiteral("B");
    case program::Op::kBackwardWeight: return QStringLiteral("W");
    case program::Op::kRecompute: return QStringLiteral("R");
    default: return {};
  }
}

QString time_text(double ns) {
  const double a = std::fabs(ns);
  if (a == 0) return QStringLiteral("0");
  if (a >= 1e9) return QString::number(ns * 1e-9, 'g', 4) + QStringLiteral(" s");
  if (a >= 1e6) return QString::number(ns * 1e-6, 'g', 4) + QStringLiteral(" ms");
  if (a >= 1e3) return QString::number(ns * 1e-3, 'g', 4) + QStringLiteral(" us");
  return QString::number(ns, 'g', 4) + QStringLiteral(" ns");
}

std::vector<TimeTick> time_ticks(int64_t t0, int64_t t1, int target) {
  std::vector<TimeTick> out;
  if (t1 <= t0 || target < 1) return out;
  const double raw = static_cast<double>(t1 - t0) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  const auto s = std::max<int64_t>(1, static_cast<int64_t>(std::llround(step)));
  for (int64_t t = (t0 + s - 1) / s * s; t <= t1; t += s) out.push_back({t, time_text(static_cast<double>(t))});
  return out;
}

}  // namespace stagecraft::gui
