#include "core/spec/error.hpp"

namespace stagecraft::spec {

namespace {
std::string compose(const std::string& file, const std::string& pointer, const std::string& detail) {
  std::string where = file.empty() ? std::string("<input>") : file;
  if (!pointer.empty()) where += ": " + pointer;
  return where + ": " + detail;
}
}  // namespace

SpecError::SpecError(std::string file, std::string pointer, std::string detail)
    : std::runtime_error(compose(file, pointer, detail)),
      file_(std::move(file)),
      pointer_(std::move(pointer)),
      detail_(std::move(detail)) {}

}  // namespace stagecraft::spec
