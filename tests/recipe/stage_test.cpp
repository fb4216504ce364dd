// Staging into the shared model cache: two launchers at once copy once (the other waits on the
// lock and reuses the copy); a partial copy is never visible under the final name; a stale
// partial copy of a launcher that died is replaced; a changed model is a new entry.
#include "recipe/stage.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "../support/wait_until.h"
#include "recipe_test_util.h"

namespace ds::recipe {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// stage_model on a launcher's thread: an error there is a test failure, not std::terminate.
StagedModel staged_or_failure(const std::string& src, const std::string& cache, const StageOptions& o) {
  try {
    return stage_model(src, cache, o);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "staging failed: " << e.what();
    return {};
  }
}

// The first launcher publishes only once the second has found the lock held (the on_wait hook),
// so the second is certain to wait, on any machine at any speed: no sleep decides the order, and
// the bounded waits only catch a hang (a lock that never excludes anyone leaves the first
// launcher waiting for a second that never waits).
TEST(Stage, TwoLaunchersAtOnceCopyOnceTheOtherWaitsAndReuses) {
  TempDir d("stage_two");
  d.file("model/config.json", "{}");
  d.file("model/model.safetensors", std::string(1 << 20, 'w'));
  const std::string src = (d.path / "model").string(), cache = (d.path / "cache").string();
  std::atomic<bool> copying{false}, second_waits{false};
  std::atomic<int> copies{0};
  StagedModel a, b;
  std::thread first([&] {
    StageOptions o;
    o.before_publish = [&] {
      ++copies;
      copying = true;
      EXPECT_TRUE(ds::test::wait_until([&] { return second_waits.load(); }))
          << "the second launcher never found the lock held while the first copied";
      EXPECT_EQ(fs::exists(cache) ? std::distance(fs::directory_iterator(cache), {}) : 0, 2)
          << "only the lock and the partial copy exist before the rename";
    };
    a = staged_or_failure(src, cache, o);
  });
  // The second starts once the first holds the lock (it is copying). Not an ASSERT: the threads
  // must be joined whatever happens.
  EXPECT_TRUE(ds::test::wait_until([&] { return copying.load(); })) << "the first launcher never reached its copy";
  std::thread second([&] {
    StageOptions o;
    o.before_publish = [&] { ++copies; };
    o.on_wait = [&] { second_waits = true; };
    b = staged_or_failure(src, cache, o);
  });
  first.join();
  second.join();
  EXPECT_EQ(copies, 1);
  EXPECT_EQ(a.outcome, StageOutcome::Copied);
  EXPECT_EQ(b.outcome, StageOutcome::Waited);
  EXPECT_EQ(a.path, b.path);
  EXPECT_EQ(fs::file_size(fs::path(a.path) / "model.safetensors"), size_t(1 << 20));
  // A third launcher later finds it without waiting.
  StageOptions third;
  third.on_wait = [] { ADD_FAILURE() << "the third launcher waited on a lock nobody holds"; };
  EXPECT_EQ(stage_model(src, cache, third).outcome, StageOutcome::Reused);
}

TEST(Stage, StalePartialCopyIsReplacedAndChangedModelIsANewEntry) {
  TempDir d("stage_stale");
  d.file("model/config.json", "{\"a\": 1}");
  const std::string src = (d.path / "model").string(), cache = (d.path / "cache").string();
  StagedModel m = stage_model(src, cache);
  fs::remove_all(m.path);
  // What a launcher killed mid-copy leaves behind.
  const fs::path partial = fs::path(cache) / ("." + fs::path(m.path).filename().string() + ".partial");
  d.file(fs::relative(partial / "junk", d.path).string(), "half");
  const StagedModel again = stage_model(src, cache);
  EXPECT_EQ(again.outcome, StageOutcome::Copied);
  EXPECT_FALSE(fs::exists(fs::path(again.path) / "junk"));
  EXPECT_FALSE(fs::exists(partial));
  d.file("model/config.json", "{\"a\": 2}");
  const StagedModel changed = stage_model(src, cache);
  EXPECT_NE(changed.path, again.path);
  EXPECT_EQ(changed.outcome, StageOutcome::Copied);
}

TEST(Stage, MissingFolderIsAClearError) {
  TempDir d("stage_missing");
  try {
    stage_model((d.path / "nope").string(), (d.path / "cache").string());
    FAIL() << "staged a folder that does not exist";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ds::recipe
