// io::AtomicFile: the target holds the old file or the whole new one, never a part; every
// failure names the file and the system's reason.
#include "core/io/file.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <sys/stat.h>
#include <unistd.h>

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

namespace stagecraft::io {
namespace {

// What check_input refuses before a byte is read, each with its name: a character device (read
// forever: /dev/zero), a FIFO (a reader would wait for a writer), a directory, a symbolic-link loop
// (the system's ELOOP, not "no such file"), a file above the kind's limit; a regular file within it
// is read whole.
TEST(ReadInput, RefusesWhatIsNotARegularFileWithinItsLimit) {
  auto refused = [](const std::string& path, std::uintmax_t limit, const std::string& expected) {
    try {
      check_input(path, limit, "a token file");
      ADD_FAILURE() << path << " was accepted";
    } catch (const spec::SpecError& e) {
      EXPECT_EQ(e.file(), path);
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("a token file"), std::string::npos) << e.what();
    }
  };
  refused("/dev/zero", 1 << 20, "is a character device, not a regular file");
  const fs::path dir = fs::path(::testing::TempDir()) / ("stagecraft_read_input_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string fifo = (dir / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  refused(fifo, 1 << 20, "is a FIFO (named pipe)");
  refused(dir.string(), 1 << 20, "is a directory");
  fs::create_symlink(dir / "b", dir / "a");
  fs::create_symlink(dir / "a", dir / "b");
  refused((dir / "a").string(), 1 << 20, "Too many levels of symbolic links");
  refused((dir / "missing").string(), 1 << 20, "no such file");
  const std::string file = (dir / "ten.bin").string();
  std::ofstream(file, std::ios::binary) << "0123456789";
  refused(file, 9, "is 10 bytes, above the limit of 9 bytes");
  EXPECT_EQ(check_input(file, 10, "a token file"), 10u);
  EXPECT_EQ(read_input(file, 10, "a token file"), "0123456789");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace stagecraft::io
