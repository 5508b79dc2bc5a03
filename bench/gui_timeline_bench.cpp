// The GUI timeline at scale (docs/gui.md targets): one million instructions — 8 ranks, compute,
// tp and dp lanes, back-to-back intervals of 1-3 us — laid out once (traces::TimelineModel),
// then painted into a 1600 x 900 image (gui/render/paint_timeline) at full zoom-out, where every
// row is drawn per pixel column, and zoomed to 1% of the step, where bars are drawn one by one.
// Targets: a paint at full zoom-out under 50 ms and a zoomed paint under 33 ms (30 frames per
// second while panning) on one core of this machine.
#include <QGuiApplication>
#include <QImage>
#include <QPainter>

#include <cstdlib>
#include <memory>

#include <benchmark/benchmark.h>

#include "gui/render/paint_timeline.hpp"
#include "traces/io/trace_io.hpp"
#include "traces/timeline_model.hpp"

namespace {

using namespace stagecraft;

const traces::Trace& million() {
  static const traces::Trace t = [] {
    trace::Trace core;
    core.source = "simulated";
    const program::Lane lanes[] = {program::Lane::kCompute, program::Lane::kTp, program::Lane::kDpGather};
    const program::Op ops[] = {program::Op::kForward, program::Op::kTpAllReduce, program::Op::kGatherParams};
    int32_t id = 0;
    for (int64_t rank = 0; rank < 8; ++rank) {
      for (int l = 0; l < 3; ++l) {
        int64_t t = 0;
        for (int i = 0; i < 41667; ++i) {
          trace::Event e;
          e.rank = rank;
          e.lane = lanes[l];
          e.op = ops[l] == program::Op::kForward && i % 3 == 2 ? program::Op::kBackward : ops[l];
          e.instr = id++;
          e.start_ns = t;
          e.end_ns = t + 1000 + (i % 3) * 1000;
          e.mb = i % 64;
          t = e.end_ns + 200;
          core.events.push_back(e);
        }
      }
    }
    return traces::from_core(core, "synthetic");
  }();
  return t;
}

const traces::TimelineModel& model() {
  static const traces::TimelineModel m(million(), nullptr);
  return m;
}

void BM_Layout(benchmark::State& state) {
  (void)million();   // built once, outside the timing
  for (auto _ : state) {
    traces::TimelineModel m(million(), nullptr);
    benchmark::DoNotOptimize(m.event_count());
  }
  state.counters["events"] = static_cast<double>(model().event_count());
}
BENCHMARK(BM_Layout)->Unit(benchmark::kMillisecond);

void paint(benchmark::State& state, double fraction) {
  const traces::TimelineModel& m = model();
  const gui::TimelineStyle style;
  const gui::TimelineLayout layout = gui::layout_timeline(m, style);
  QImage img(1600, 900, QImage::Format_RGB32);
  const int64_t span = static_cast<int64_t>(static_cast<double>(m.end_ns()) * fraction);
  int64_t t0 = 0;
  for (auto _ : state) {
    QPainter g(&img);
    gui::paint_timeline(g, img.rect(), m, layout, style, gui::TimeWindow{t0, t0 + span});
    t0 = (t0 + span / 7) % std::max<int64_t>(1, m.end_ns() - span);   // pan a little each frame
  }
  state.counters["events"] = static_cast<double>(m.event_count());
}

void BM_PaintFullZoomOut(benchmark::State& state) { paint(state, 1.0); }
BENCHMARK(BM_PaintFullZoomOut)->Unit(benchmark::kMillisecond);
void BM_PaintZoomedToOnePercent(benchmark::State& state) { paint(state, 0.01); }
BENCHMARK(BM_PaintZoomedToOnePercent)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  setenv("QT_QPA_PLATFORM", "offscreen", 0);
  QGuiApplication app(argc, argv);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
