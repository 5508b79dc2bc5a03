// The colour of each kind of timeline bar, as plain data (no toolkit types), so that the PNG
// writer (render/timeline_png.cpp) and a Qt GUI paint a kind the same colour. Kinds are the
// trace kinds of Stagecraft traces (core/trace) and the kernel classes of PyTorch traces
// (traces/io/kineto.hpp); any other kind is kOtherColour.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "core/program/instruction.hpp"

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

// The colour of each Program op, in families so that a legend stays short and the GUI tells apart
// what one trace kind lumps together (TpAllGather and ZeRO's GatherParams are both "gather";
// Backward and BackwardInput both "backward"). Colours from Paul Tol's colour-blind-safe schemes
// (https://personal.sron.nl/~pault/, "bright", "muted" and "light"), one hue per family, lighter or
// darker within it.
struct OpStyle {
  program::Op op;
  Rgb colour;
  std::string_view family;
};

inline constexpr std::array<OpStyle, program::kOpCount> kOpStyles = {{
    {program::Op::kForward, {68, 119, 170}, "forward"},
    {program::Op::kBackward, {238, 102, 119}, "backward"},
    {program::Op::kBackwardInput, {204, 102, 119}, "backward (input)"},
    {program::Op::kBackwardWeight, {221, 170, 51}, "backward (weight)"},
    {program::Op::kRecompute, {153, 119, 0}, "recompute"},
    {program::Op::kSendActivation, {34, 136, 51}, "pipeline send"},
    {program::Op::kRecvActivation, {119, 187, 119}, "pipeline receive"},
    {program::Op::kSendGrad, {17, 119, 51}, "pipeline send"},
    {program::Op::kRecvGrad, {102, 170, 119}, "pipeline receive"},
    {program::Op::kGatherParams, {170, 51, 119}, "ZeRO gather"},
    {program::Op::kReleaseParams, {221, 170, 204}, "ZeRO release"},
    {program::Op::kReduceScatterGrads, {68, 170, 153}, "gradient reduce"},
    {program::Op::kAllReduceGrads, {102, 204, 238}, "gradient reduce"},
    {program::Op::kAllGatherParams, {51, 34, 136}, "ZeRO gather"},
    {program::Op::kOptimizerStep, {102, 102, 119}, "optimizer"},
    {program::Op::kOffloadCopy, {153, 153, 51}, "offload"},
    {program::Op::kTpAllReduce, {119, 136, 170}, "tensor parallel"},
    {program::Op::kTpReduceScatter, {153, 170, 204}, "tensor parallel"},
    {program::Op::kTpAllGather, {85, 102, 136}, "tensor parallel"},
    {program::Op::kGradNormAllReduce, {187, 187, 187}, "gradient norm"},
    {program::Op::kAllToAll, {34, 102, 102}, "all-to-all"},
    {program::Op::kCpAllGather, {238, 119, 51}, "context parallel"},
    {program::Op::kCpReduceScatter, {204, 51, 17}, "context parallel"},
}};

constexpr const OpStyle& style_of(program::Op op) {
  for (const OpStyle& s : kOpStyles) {
    if (s.op == op) return s;
  }
  return kOpStyles[0];
}

}  // namespace stagecraft::render
