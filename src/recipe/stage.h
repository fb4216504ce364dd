// Staging model directories into a shared cache before a server starts (the lesson of N ranks
// each fetching the same 7 GB checkpoint at once). Under an exclusive flock per model, the first
// launcher copies into a temporary name and renames it into place; launchers that arrive during
// the copy wait on the lock and reuse the result. A partial copy is never visible under the final
// name, and a copy left by a launcher that died is removed by the next one.
#pragma once
#include <functional>
#include <map>
#include <string>

namespace ds::recipe {

enum class StageOutcome {
  Copied,  // this launcher made the copy
  Reused,  // the copy was already there
  Waited,  // another launcher held the lock (was copying); this one waited, then reused it
};
const char* stage_outcome_name(StageOutcome o);

struct StagedModel {
  std::string path;       // <cache>/<name>-<content hash>
  StageOutcome outcome = StageOutcome::Reused;
  std::string content_sha256;                    // over the files' names and checksums
  std::map<std::string, std::string> files;      // file name -> SHA-256
  double seconds = 0;                            // waiting and copying
};

struct StageOptions {
  // Test hook: runs after the copy is complete, before it is renamed into place (the lock held).
  std::function<void()> before_publish;
  // Test hook: runs when this launcher finds the model's lock held by another, just before it
  // waits for it (so a test can tell when a second launcher is certain to wait, without sleeping).
  std::function<void()> on_wait;
};

// Stages the regular files of `model_dir` (a flat model folder: config, weights, tokenizer).
// Throws ds::Error naming the folder and the failed step.
StagedModel stage_model(const std::string& model_dir, const std::string& cache_dir, const StageOptions& o = {});

}  // namespace ds::recipe
