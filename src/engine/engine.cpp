#include "engine/engine.h"

#include "engine/engine_loop.h"

namespace ds {

Engine::Engine(std::unique_ptr<Model> model, std::unique_ptr<Speculator> spec, EngineConfig cfg)
    : loop_(std::make_unique<EngineLoop>(std::move(model), std::move(spec), std::move(cfg))) {}

Engine::Engine(std::unique_ptr<Model> model, EngineConfig cfg) {
  DS_CHECK(model != nullptr, "engine: no model");
  std::unique_ptr<Speculator> spec = make_speculator(cfg.spec, *model);
  loop_ = std::make_unique<EngineLoop>(std::move(model), std::move(spec), std::move(cfg));
}
Engine::~Engine() { stop(); }

std::shared_ptr<RequestStream> Engine::submit(Request req) { return loop_->submit(std::move(req)); }
void Engine::cancel_all() { loop_->cancel_all(); }
void Engine::close() { loop_->close(); }
void Engine::stop() { loop_->stop(); }
bool Engine::alive() const { return loop_->alive(); }
int Engine::in_flight() const { return loop_->in_flight(); }
EngineSnapshot Engine::snapshot() const { return loop_->snapshot(); }
const EngineConfig& Engine::config() const { return loop_->config(); }
int Engine::vocab_size() const { return loop_->vocab_size(); }
std::vector<RankMemory> Engine::rank_memory() const { return loop_->rank_memory(); }
EngineMetrics& Engine::metrics() { return loop_->metrics(); }

}  // namespace ds
