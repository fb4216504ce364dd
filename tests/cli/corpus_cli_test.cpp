// Training input gathering, and the `deltaserve tokenizer` subcommands end to end.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "../support/missing_dependency.h"
#include "core/error.h"
#include "test_util.h"
#include "tokenizer/training_corpus.h"

namespace ds {
namespace {
namespace fs = std::filesystem;

// Joins with append: GCC 12 reports a false -Wrestrict on chains of "literal" + std::string.
template <typename... Parts>
std::string cat(const Parts&... parts) {
  std::string out;
  (out.append(parts), ...);
  return out;
}

std::string quoted(const std::string& s) { return cat("'", s, "'"); }

class CorpusDir : public testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(testing::TempDir()) / ("tok_corpus_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "pkg" / "sub");
    write("pkg/a.py", "def a():\n    return 1\n");
    write("pkg/sub/b.py", "def b():\n    return 2\n");
    write("pkg/sub/c.h", "int c();\n");
    write("pkg/notes.txt", "not code\n");
    write("top.txt", "line one\nline two\nline three\n");
  }
  void TearDown() override { fs::remove_all(root_); }
  void write(const std::string& rel, const std::string& text) {
    std::ofstream(root_ / rel, std::ios::binary) << text;
  }
  std::string p(const std::string& rel) const { return (root_ / rel).string(); }
  fs::path root_;
};

TEST_F(CorpusDir, ListsRecursivelyWithExtensionFilter) {
  EXPECT_EQ(list_corpus_files({p("pkg")}, {".py", "h"}),
            (std::vector<std::string>{p("pkg/a.py"), p("pkg/sub/b.py"), p("pkg/sub/c.h")}));
  EXPECT_EQ(list_corpus_files({p("pkg")}, {}).size(), 4u);
  // A file named directly is taken whatever its extension; duplicates collapse.
  EXPECT_EQ(list_corpus_files({p("top.txt"), p("pkg/a.py"), p("pkg")}, {".py"}),
            (std::vector<std::string>{p("pkg/a.py"), p("pkg/sub/b.py"), p("top.txt")}));
  EXPECT_THROW(list_corpus_files({p("missing")}, {}), Error);
}

TEST_F(CorpusDir, MaxBytesCutsAtALineBoundary) {
  BpeTrainer trainer(BpeTrainerOptions{});
  const auto st = feed_corpus(trainer, {p("top.txt")}, 20);
  EXPECT_TRUE(st.truncated);
  EXPECT_EQ(st.bytes, 18);  // "line one\nline two\n"
  BpeTrainer all(BpeTrainerOptions{});
  const auto full = feed_corpus(all, {p("top.txt"), p("pkg/a.py")}, 0);
  EXPECT_FALSE(full.truncated);
  EXPECT_EQ(full.files, 2);
}

// The CLI is built by the `deltaserve` target; when only test_tokenizer was built, skip (under
// CI, where scripts/build builds everything, fail).
TEST_F(CorpusDir, CliTrainEncodeDecode) {
  const std::string cli = DS_CLI;
  DS_REQUIRE_DEPENDENCY(fs::exists(cli), "deltaserve not built at " << cli);
  for (int i = 0; i < 50; ++i) write("pkg/gen" + std::to_string(i) + ".py", test::synthetic_corpus(1, i)[0]);
  const std::string out = p("tok.json");
  const std::string train = cat(quoted(cli), " tokenizer train --input ", quoted(p("pkg")),
                                " --include-ext .py --vocab-size 400 --special '<|endoftext|>' --special '<|im_end|>'",
                                " --out ", quoted(out), " 2>/dev/null");
  ASSERT_EQ(std::system(train.c_str()), 0) << train;
  const Tokenizer tok = Tokenizer::load(out);
  EXPECT_EQ(tok.vocab_size(), 400);
  EXPECT_EQ(tok.token_id("<|im_end|>"), 399);

  auto run = [&](const std::string& cmd) {
    std::string result;
    FILE* f = popen(cmd.c_str(), "r");
    char buf[4096];
    std::size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) result.append(buf, n);
    EXPECT_EQ(pclose(f), 0) << cmd;
    return result;
  };
  const std::string text = "def f(x):\n    return x<|im_end|>";
  std::string ids = run(cat(quoted(cli), " tokenizer encode --tokenizer ", quoted(out), " --text ", quoted(text)));
  std::string expected;
  for (int32_t id : tok.encode(text)) expected += cat(std::string(expected.empty() ? "" : ","), std::to_string(id));
  EXPECT_EQ(ids, expected + "\n");
  ids.pop_back();
  EXPECT_EQ(run(cat(quoted(cli), " tokenizer decode --tokenizer ", quoted(out), " --ids ", ids)), text + "\n");
  const std::string bad = cat(quoted(cli), " tokenizer decode --tokenizer ", quoted(out), " --ids 1,400 2>/dev/null");
  EXPECT_NE(std::system(bad.c_str()), 0);
}

}  // namespace
}  // namespace ds
