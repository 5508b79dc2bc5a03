#include "core/spec/error.hpp"

namespace stagecraft::spec {

namespace {
// A name the user typed or a file holds, printed so that control characters (an escape sequence
// that would recolour or rewrite the terminal, a carriage return) show as \xNN instead of acting.
std::string printable(const std::string& s) {
  std::string out;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  return out;
}

std::string compose(const std::string& file, const std::string& pointer, const std::string& detail) {
  std::string where = file.empty() ? std::string("<input>") : printable(file);
  if (!pointer.empty()) where += ": " + printable(pointer);
  return where + ": " + detail;
}
}  // namespace

SpecError::SpecError(std::string file, std::string pointer, std::string detail)
    : std::runtime_error(compose(file, pointer, detail)),
      file_(std::move(file)),
      pointer_(std::move(pointer)),
      detail_(std::move(detail)) {}

}  // namespace stagecraft::spec
