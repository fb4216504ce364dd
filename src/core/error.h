// Errors at boundaries (config, files, HTTP) are exceptions carrying what was wrong and where.
// The hot path does not throw; it asserts invariants that the boundary already checked.
#pragma once
#include <stdexcept>
#include <string>

namespace ds {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace ds

// DS_CHECK(cond, message-expression): throws ds::Error with the message when cond is false.
#define DS_CHECK(cond, msg)                    \
  do {                                         \
    if (!(cond)) throw ::ds::Error(msg);       \
  } while (0)
