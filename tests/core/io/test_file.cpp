// io::AtomicFile: the target holds the old file or the whole new one, never a part; every
// failure names the file and the system's reason.
#include "core/io/file.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "core/spec/error.hpp"
#include "support.hpp"

namespace stagecraft::io {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> listing(const fs::path& dir) {
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

struct Scratch {
  fs::path dir = test::temp_path("atomic");
  Scratch() {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() { fs::remove_all(dir); }
};

TEST(AtomicFile, ReplacesTheTargetOnlyAtCommit) {
  Scratch s;
  const fs::path target = s.dir / "out.json";
  write_file(target.string(), "old\n");
  {
    AtomicFile f(target.string());
    f.write("new, ");
    EXPECT_EQ(slurp(target), "old\n");  // a reader still sees the old file
    EXPECT_EQ(listing(s.dir).size(), 2u);  // and the temporary next to it
    f.write("whole\n");
    EXPECT_EQ(f.written(), 11u);  // "new, " 5 + "whole\n" 6
    f.commit();
  }
  EXPECT_EQ(slurp(target), "new, whole\n");
  EXPECT_EQ(listing(s.dir), (std::vector<std::string>{"out.json"}));
}

TEST(AtomicFile, AnAbandonedWriteLeavesTheOldFileAndNoTemporary) {
  Scratch s;
  const fs::path target = s.dir / "out.json";
  write_file(target.string(), "old\n");
  try {
    AtomicFile f(target.string());
    f.write("half");
    throw std::runtime_error("the writer failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(slurp(target), "old\n");
  EXPECT_EQ(listing(s.dir), (std::vector<std::string>{"out.json"}));
}

// /dev/full answers every write with ENOSPC: the kernel's own full disk.
TEST(AtomicFile, AFullDiskIsAnErrorNamingTheFileAndTheReason) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full on this system";
  try {
    write_file("/dev/full", std::string(1 << 16, 'x'));
    ADD_FAILURE() << "a write to /dev/full succeeded";
  } catch (const spec::SpecError& e) {
    EXPECT_EQ(e.file(), "/dev/full");
    EXPECT_NE(std::string(e.what()).find("write failed after 0 bytes: No space left on device"), std::string::npos)
        << e.what();
  }
}

TEST(AtomicFile, AMissingFolderOrAFolderAsTargetIsAnError) {
  Scratch s;
  try {
    write_file((s.dir / "no-such-folder" / "out.json").string(), "x");
    ADD_FAILURE() << "wrote into a missing folder";
  } catch (const spec::SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos) << e.what();
  }
  try {
    write_file(s.dir.string(), "x");
    ADD_FAILURE() << "wrote over a folder";
  } catch (const spec::SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace stagecraft::io
