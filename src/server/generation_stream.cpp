#include "server/generation_stream.h"

#include <chrono>

namespace ds::server {

using namespace std::chrono_literals;

namespace {

class StreamLoop {
 public:
  StreamLoop(std::shared_ptr<GenerationRun> run, std::unique_ptr<StreamEncoder> enc)
      : run_(std::move(run)), enc_(std::move(enc)) {}

  // Nothing may escape: a failure ends this stream with an error event (or just closes it) and
  // cancels the request; everyone else carries on.
  void operator()(http::ChunkSink& sink) {
    try {
      if (!write(sink, enc_->open())) return;
      while (next(sink)) {
      }
    } catch (const std::exception& e) {
      fail(sink, e.what());
    } catch (...) {
      fail(sink, "unknown error");
    }
  }

 private:
  bool write(http::ChunkSink& sink, const std::string& s) {
    if (s.empty()) return true;
    last_write_ = std::chrono::steady_clock::now();
    if (sink.write(s)) return true;
    run_->cancel();
    return false;
  }

  // One step: false once the stream is over (finished, failed, or the client gone).
  bool next(http::ChunkSink& sink) {
    if (sink.client_gone()) {  // hung up: no write needed to learn it
      run_->cancel();
      return false;
    }
    const GenerationStep s = run_->step(200ms);
    const std::string out = enc_->step(s);
    if (!out.empty()) {
      if (!write(sink, out)) return false;
    } else if (!s.over) {
      // Measured, not counted in waits: a step can return at once with tokens that add no text
      // yet (a held-back tool call), and those must not add up to keep-alives.
      if (std::chrono::steady_clock::now() - last_write_ >= 2000ms && !write(sink, enc_->keepalive())) return false;
    }
    if (!s.over) return true;
    write(sink, enc_->close(run_->outcome()));
    return false;
  }

  void fail(http::ChunkSink& sink, const std::string& what) {
    run_->cancel();
    std::string tail;
    try {
      tail = enc_->fail("the response failed: " + what);
    } catch (...) {
      return;
    }
    sink.write(tail);
  }

  std::shared_ptr<GenerationRun> run_;
  std::unique_ptr<StreamEncoder> enc_;
  std::chrono::steady_clock::time_point last_write_ = std::chrono::steady_clock::now();
};

}  // namespace

void stream_generation(std::shared_ptr<GenerationRun> run, std::unique_ptr<StreamEncoder> encoder,
                       http::HttpResponse& res) {
  res.content_type = "text/event-stream";
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  // std::function needs a copyable callable: the loop is shared.
  auto loop = std::make_shared<StreamLoop>(std::move(run), std::move(encoder));
  res.stream = [loop](http::ChunkSink& sink) { (*loop)(sink); };
}

}  // namespace ds::server
