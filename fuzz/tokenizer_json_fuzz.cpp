// libFuzzer target: a tokenizer.json as the server loads it at start-up. Every input must load or
// be refused with ds::Error; a loaded tokenizer must encode and decode without failing.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const ds::Tokenizer tok = ds::Tokenizer::from_json_text(text, "fuzz.json");
    const auto ids = tok.encode("def f(x):\n    return x  # <|im_end|> \xc3\xa9");
    (void)tok.decode(ids);
  } catch (const ds::Error&) {
  }
  return 0;
}
