// A generation streamed to its client: the loop that moves GenerationRun's events into an API's
// stream. Each API says how its stream is spelled (an encoder); the loop is the same for all:
// keep-alives while nothing comes, a failure inside ends the stream with the API's error event
// and cancels the request, a client that hangs up cancels it too.
#pragma once
#include <memory>
#include <string>

#include "http/http_message.h"
#include "server/generation_run.h"

namespace ds::server {

class StreamEncoder {
 public:
  virtual ~StreamEncoder() = default;
  // Written before the first step (the role chunk, response.created); may be empty.
  virtual std::string open() = 0;
  // One step's events; may be empty.
  virtual std::string step(const GenerationStep& s) = 0;
  // After the last step: the end as the API says it (finish reason, usage, the final marker),
  // or the engine's error as the API's error event.
  virtual std::string close(const GenerationOutcome& o) = 0;
  // A failure of the server itself mid-stream, as the API's error event.
  virtual std::string fail(const std::string& message) = 0;
  // Nothing to send for a while: keeps proxies and clients from timing out, and tells the
  // stream whether the client is still there.
  virtual std::string keepalive() = 0;
};

// Sets res up as an SSE stream of run through encoder. Both live as long as the stream.
void stream_generation(std::shared_ptr<GenerationRun> run, std::unique_ptr<StreamEncoder> encoder,
                       http::HttpResponse& res);

}  // namespace ds::server
