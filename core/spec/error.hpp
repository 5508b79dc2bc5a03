// SpecError: a bad input found while loading or validating a spec. It names the file, the JSON
// pointer of the offending value and what was expected, e.g.
//   configs/models/bad.json: /hidden: expected a multiple of heads (12), got 770
// It is not for internal errors (those are std::logic_error).
#pragma once

#include <stdexcept>
#include <string>

namespace stagecraft::spec {

class SpecError : public std::runtime_error {
 public:
  SpecError(std::string file, std::string pointer, std::string detail);

  const std::string& file() const { return file_; }
  const std::string& pointer() const { return pointer_; }
  const std::string& detail() const { return detail_; }

 private:
  std::string file_;
  std::string pointer_;
  std::string detail_;
};

}  // namespace stagecraft::spec
