// Stop-string matching cost for a long non-streamed answer (the shape a hostile client picks:
// the most and longest stop strings allowed, none of which ever matches). Prints the time per
// generated token; a rescan of the whole text per token would grow with the answer's length,
// the incremental scan stays flat. A benchmark, not a test: it asserts nothing.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "server/openai_request.h"
#include "server/text_output.h"
#include "server_harness.h"

namespace ds {
namespace {

TEST(StopStringsBenchmark, LongAnswerWithTheMaximumStopStrings) {
  const Tokenizer& tok = testing::test_tokenizer();
  std::vector<std::string> stops;
  for (size_t i = 0; i < server::kMaxStopStrings; ++i) stops.push_back(std::string(server::kMaxStopBytes - 1, 'q') + char('0' + i));
  for (int tokens : {1000, 4000, 16000}) {
    server::TextOutput out(tok, stops);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < tokens; ++i) out.add(int32_t(1 + i % 200));  // never completes a stop
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("stop strings: %d tokens (%zu bytes of text), %zu stops of %zu bytes: %.3f ms, %.2f us/token\n", tokens,
                out.size(), stops.size(), server::kMaxStopBytes, s * 1e3, s * 1e6 / tokens);
  }
}

}  // namespace
}  // namespace ds
