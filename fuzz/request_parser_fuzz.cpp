// libFuzzer target: an HTTP body as /v1/chat/completions and /v1/completions parse it. Every
// input must end in a parsed request or an ApiError (a 4xx naming the field); any other exception,
// crash or sanitizer report is a bug (it would be a 500, or worse).
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/api_error.h"
#include "server/openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  for (bool chat : {true, false}) {
    try {
      const nlohmann::json j = ds::server::parse_json_body(body);
      if (chat)
        (void)ds::server::parse_chat_request(j);
      else
        (void)ds::server::parse_completion_request(j);
    } catch (const ds::server::ApiError&) {
    }
  }
  return 0;
}
