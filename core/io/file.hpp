// Writing an output file so that a crash, a kill or a full disk never leaves a part of it where a
// reader looks (docs/reliability.md, "Faults").
//
// AtomicFile writes to a temporary file next to the target (`<path>.tmp-<pid>`), checks every
// write(2), and on commit() calls fsync(2), renames the temporary over the target (rename(2) is
// atomic within a file system, POSIX.1-2017) and fsyncs the folder so the rename itself survives a
// power loss. A reader therefore sees the previous file or the whole new one. Destroyed without
// commit() (an exception, an error), it removes the temporary. A kill leaves at most the
// temporary, which the next writer of the same target replaces.
//
// A target that exists and is not a regular file (a device such as /dev/stdout or /dev/full, a
// pipe) is written in place, with the same checks.
//
// Every failure throws spec::SpecError(path, "", why) naming the target and the system's reason
// ("No space left on device"); the command line maps it to exit 2, an output that cannot be
// written (README, "Exit status").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace stagecraft::io {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);  // creates the temporary (or opens the device)
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // fsync, rename over the target, fsync the folder. After it the object holds nothing.
  void commit();

  const std::string& path() const { return path_; }
  std::size_t written() const { return written_; }

 private:
  [[noreturn]] void fail(const std::string& what, int error);

  std::string path_;
  std::string tmp_;   // empty when writing in place
  int fd_ = -1;
  std::size_t written_ = 0;
};

// The whole of `content` into `path` through an AtomicFile.
void write_file(const std::string& path, std::string_view content);

// Reading an input whole (docs/reliability.md, "File kinds"): a spec or trace, a token file, a
// weights index. check_input refuses, before a byte is read, what is not a regular file — a
// device (/dev/zero, /dev/urandom would be read until memory runs out), a FIFO, a socket, a
// directory — and a file above `max_bytes` (the kind's limit); it names the system's reason for a
// path it cannot stat (a symbolic-link loop is not "no such file"). SpecError(path, "", why), `kind`
// saying what was expected ("a token file"). Returns the file's size.
std::uintmax_t check_input(const std::string& path, std::uintmax_t max_bytes, std::string_view kind);
// The file's bytes, after check_input (read with the same bound, should it grow meanwhile).
std::string read_input(const std::string& path, std::uintmax_t max_bytes, std::string_view kind);

// fsync(2) of a folder, so that entries renamed into it are on disk. Throws SpecError.
void sync_directory(const std::string& dir);

}  // namespace stagecraft::io
