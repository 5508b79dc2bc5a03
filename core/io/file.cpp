#include "core/io/file.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/spec/error.hpp"

namespace stagecraft::io {

namespace fs = std::filesystem;

namespace {

std::string parent_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  struct stat st {};
  const bool special = ::stat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode);
  if (special) {
    if (S_ISDIR(st.st_mode)) throw spec::SpecError(path_, "", "is a directory, not a file to write");
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) fail("cannot open for writing", errno);
    return;
  }
  tmp_ = path_ + ".tmp-" + std::to_string(::getpid());
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd_ < 0) {
    const int error = errno;
    tmp_.clear();  // nothing of ours to remove
    fail("cannot create a file next to it (" + path_ + ".tmp-*)", error);
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFile::fail(const std::string& what, int error) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  tmp_.clear();
  throw spec::SpecError(path_, "", what + ": " + std::strerror(error));
}

void AtomicFile::write(const void* data, std::size_t bytes) {
  if (fd_ < 0) throw spec::SpecError(path_, "", "written after commit");
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("write failed after " + std::to_string(written_) + " bytes", n < 0 ? errno : EIO);
    p += n;
    bytes -= static_cast<std::size_t>(n);
    written_ += static_cast<std::size_t>(n);
  }
}

void AtomicFile::commit() {
  if (fd_ < 0) throw spec::SpecError(path_, "", "committed twice");
  // A device or pipe may not support fsync (EINVAL, EROFS): its data is already handed over.
  if (::fsync(fd_) != 0 && (!tmp_.empty() || (errno != EINVAL && errno != EROFS))) fail("fsync failed", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("close failed", errno);
  if (tmp_.empty()) return;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail("cannot rename " + tmp_ + " over it", errno);
  tmp_.clear();
  sync_directory(parent_of(path_));
}

void write_file(const std::string& path, std::string_view content) {
  AtomicFile f(path);
  f.write(content);
  f.commit();
}

void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw spec::SpecError(dir, "", std::string("cannot open the folder to sync it: ") + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (rc != 0 && error != EINVAL) throw spec::SpecError(dir, "", std::string("fsync of the folder failed: ") + std::strerror(error));
}

std::uintmax_t check_input(const std::string& path, std::uintmax_t max_bytes, std::string_view kind) {
  const std::string want(kind);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int error = errno;
    if (error == ENOENT) throw spec::SpecError(path, "", "cannot open file: no such file (expected " + want + ")");
    throw spec::SpecError(path, "", std::string("cannot open file: ") + std::strerror(error) + " (expected " + want + ")");
  }
  const char* other = S_ISDIR(st.st_mode)    ? "a directory"
                      : S_ISCHR(st.st_mode)  ? "a character device"
                      : S_ISBLK(st.st_mode)  ? "a block device"
                      : S_ISFIFO(st.st_mode) ? "a FIFO (named pipe)"
                      : S_ISSOCK(st.st_mode) ? "a socket"
                      : S_ISREG(st.st_mode)  ? nullptr
                                             : "not a regular file";
  if (other != nullptr) {
    throw spec::SpecError(path, "", std::string("is ") + other + ", not a regular file: expected " + want +
                                        " (a stream has no end or size to check; save it to a file first)");
  }
  const auto size = static_cast<std::uintmax_t>(st.st_size);
  if (size > max_bytes) {
    throw spec::SpecError(path, "", "is " + std::to_string(size) + " bytes, above the limit of " + std::to_string(max_bytes) +
                                        " bytes for " + want + " (docs/reliability.md, \"File kinds\")");
  }
  return size;
}

std::string read_input(const std::string& path, std::uintmax_t max_bytes, std::string_view kind) {
  const std::uintmax_t size = check_input(path, max_bytes, kind);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw spec::SpecError(path, "", std::string("cannot open: ") + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};   // closed on every way out, an allocation failure included
  std::string out;
  out.reserve(static_cast<std::size_t>(size));
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw spec::SpecError(path, "", std::string("read error: ") + std::strerror(errno));
    if (n == 0) break;
    out.append(chunk, static_cast<std::size_t>(n));
    if (out.size() > max_bytes) {
      throw spec::SpecError(path, "", "grew past the limit of " + std::to_string(max_bytes) + " bytes while being read");
    }
  }
  return out;
}

}  // namespace stagecraft::io
