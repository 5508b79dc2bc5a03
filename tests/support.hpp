// Test helpers shared by the test files.
#pragma once

#include <filesystem>
#include <string>

#include <unistd.h>

#include <gtest/gtest.h>

#include "core/spec/error.hpp"

namespace stagecraft::test {

// Runs `f`, which must throw SpecError whose pointer is `pointer` and whose message contains
// `fragment`. Returns the message so a test can print or check more.
template <typename F>
std::string expect_spec_error(F&& f, const std::string& pointer, const std::string& fragment) {
  try {
    f();
  } catch (const spec::SpecError& e) {
    EXPECT_EQ(e.pointer(), pointer) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
        << "message \"" << e.what() << "\" lacks \"" << fragment << "\"";
    return e.what();
  }
  ADD_FAILURE() << "no SpecError thrown (expected " << pointer << ": " << fragment << ")";
  return {};
}

// A path in the system's temporary folder that no other test process uses: `name` prefixed with
// "stagecraft-<pid>-".
inline std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("stagecraft-" + std::to_string(::getpid()) + "-" + name)).string();
}

inline std::string data_path(const std::string& relative) { return std::string(STAGECRAFT_TEST_DATA) + "/" + relative; }

}  // namespace stagecraft::test
