// The timeline PNG (render/timeline_png.hpp), built once per library: with Qt
// (stagecraft_render) a PNG of the asked width, without (stagecraft_render_none) an exception;
// and the kind -> colour table both share.
#include "render/timeline_png.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include <unistd.h>

#include <gtest/gtest.h>

#include "fixtures.hpp"
#include "render/colours.hpp"
#include "support.hpp"

namespace stagecraft::render {
namespace {

TEST(Timeline, DrawsAPngWhenTheBuildHasQt) {
  const test::Scenario s = test::bundled("tiny", "tiny-cpu", "tiny-pp2-dp2");
  const traces::Trace t = test::as_trace(test::simulate(s, test::cpu_cluster(4)).trace, "sim.json");
  const std::string path = (std::filesystem::temp_directory_path() / ("stagecraft_timeline_" + std::to_string(::getpid()) + ".png")).string();
  const std::vector<traces::TimelinePanel> panels = {traces::timeline_panel(t, "simulated"), traces::timeline_panel(t, "measured")};
  if (!png_available()) {
    EXPECT_THROW(write_timeline_png(panels, path), std::runtime_error);
    return;
  }
  write_timeline_png(panels, path, 800);
  std::ifstream in(path, std::ios::binary);
  unsigned char header[24] = {};
  in.read(reinterpret_cast<char*>(header), sizeof header);
  const unsigned char png[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  EXPECT_TRUE(std::equal(png, png + 8, header));
  // IHDR: width big-endian at bytes 16..19
  EXPECT_EQ((header[16] << 24) | (header[17] << 16) | (header[18] << 8) | header[19], 800);
  std::remove(path.c_str());
}

TEST(Colours, EveryKindOnceAndOthersGrey) {
  std::set<std::string_view> kinds;
  for (const KindColour& k : kKindColours) EXPECT_TRUE(kinds.insert(k.kind).second) << k.kind << " twice";
  static_assert(colour_of("forward") == Rgb{66, 133, 244});
  EXPECT_EQ(colour_of("backward_input"), colour_of("backward"));  // both halves of a backward look alike
  EXPECT_EQ(colour_of("no such kind"), kOtherColour);
}

// The op palette: every op once, in Op order; ops of different families never share a colour, so
// the collectives one trace kind lumps together are told apart (tensor-parallel vs ZeRO gathers,
// backward vs its input half).
TEST(Colours, EveryOpHasItsOwnStyleAndFamiliesDoNotShareColours) {
  for (int i = 0; i < program::kOpCount; ++i) {
    EXPECT_EQ(static_cast<int>(kOpStyles[static_cast<std::size_t>(i)].op), i);
    EXPECT_EQ(style_of(static_cast<program::Op>(i)).op, static_cast<program::Op>(i));
  }
  for (const OpStyle& a : kOpStyles) {
    for (const OpStyle& b : kOpStyles) {
      if (a.op != b.op) {
        EXPECT_FALSE(a.colour == b.colour) << program::to_string(a.op) << " and " << program::to_string(b.op);
      }
    }
  }
  EXPECT_NE(style_of(program::Op::kTpAllGather).family, style_of(program::Op::kGatherParams).family);
  EXPECT_EQ(style_of(program::Op::kSendActivation).family, style_of(program::Op::kSendGrad).family);
}

}  // namespace
}  // namespace stagecraft::render
