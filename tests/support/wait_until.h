// A bounded wait for a condition another thread makes true. The deadline only catches a hang (a
// condition that never comes): it is far above any time the condition takes on a loaded machine,
// so a slow run never fails here, and a test never asserts on how long something took.
#pragma once
#include <chrono>
#include <thread>

namespace ds::test {

// Generous on purpose: the sanitizer stage runs 5-10x slower and shares two cores with ctest -j.
inline constexpr std::chrono::seconds kHangDeadline{60};

// Polls `ready` until it returns true (then true) or the deadline passes (then false).
template <class Ready>
bool wait_until(Ready&& ready, std::chrono::milliseconds deadline = kHangDeadline) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (!ready()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

}  // namespace ds::test
