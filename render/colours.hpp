// The colour of each kind of timeline bar, as plain data (no toolkit types), so that the PNG
// writer (render/timeline_png.cpp) and a Qt GUI paint a kind the same colour. Kinds are the
// trace kinds of Stagecraft traces (core/trace) and the kernel classes of PyTorch traces
// (traces/io/kineto.hpp); any other kind is kOtherColour.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace stagecraft::render {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  friend bool operator==(const Rgb&, const Rgb&) = default;
};

struct KindColour {
  std::string_view kind;
  Rgb colour;
};

inline constexpr std::array<KindColour, 15> kKindColours = {{
    {"forward", {66, 133, 244}},        {"backward", {219, 68, 55}},
    {"backward_input", {219, 68, 55}},  {"backward_weight", {244, 160, 0}},
    {"recompute", {121, 85, 72}},       {"send", {15, 157, 88}},
    {"recv", {129, 199, 132}},          {"gather", {171, 71, 188}},
    {"reduce_scatter", {0, 172, 193}},  {"all_reduce", {255, 112, 67}},
    {"optimizer", {96, 125, 139}},      {"offload", {158, 157, 36}},
    {"compute", {66, 133, 244}},        {"communication", {255, 112, 67}},
    {"memory", {158, 157, 36}},
}};

inline constexpr Rgb kOtherColour = {120, 120, 120};

constexpr Rgb colour_of(std::string_view kind) {
  for (const KindColour& k : kKindColours) {
    if (k.kind == kind) return k.colour;
  }
  return kOtherColour;
}

}  // namespace stagecraft::render
