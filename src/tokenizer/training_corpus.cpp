#include "tokenizer/training_corpus.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "tokenizer/bpe_trainer.h"

namespace ds {
namespace fs = std::filesystem;

std::vector<std::string> list_corpus_files(const std::vector<std::string>& inputs,
                                           const std::vector<std::string>& extensions) {
  std::vector<std::string> exts;
  for (const auto& e : extensions) {
    if (e.empty()) continue;
    exts.push_back(e.front() == '.' ? e : "." + e);
  }
  auto wanted = [&](const fs::path& p) {
    return exts.empty() || std::find(exts.begin(), exts.end(), p.extension().string()) != exts.end();
  };
  std::vector<std::string> files;
  for (const auto& in : inputs) {
    std::error_code ec;
    const auto st = fs::status(in, ec);
    if (ec || !fs::exists(st)) throw Error("tokenizer train: input not found: " + in);
    if (fs::is_regular_file(st)) {
      files.push_back(in);
      continue;
    }
    if (!fs::is_directory(st)) throw Error("tokenizer train: input is neither a file nor a directory: " + in);
    // Unreadable corners of a system directory should not stop a training run.
    for (fs::recursive_directory_iterator it(in, fs::directory_options::skip_permission_denied, ec), end;
         !ec && it != end; it.increment(ec)) {
      std::error_code fec;
      if (it->is_regular_file(fec) && !fec && wanted(it->path())) files.push_back(it->path().string());
    }
    if (ec) throw Error("tokenizer train: cannot walk " + in + ": " + ec.message());
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  return files;
}

CorpusReadStats feed_corpus(BpeTrainer& trainer, const std::vector<std::string>& files, int64_t max_bytes) {
  CorpusReadStats st;
  for (const auto& path : files) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error("tokenizer train: cannot read " + path);
    std::ostringstream ss;
    ss << in.rdbuf();
    std::string text = std::move(ss).str();
    if (max_bytes > 0 && st.bytes + static_cast<int64_t>(text.size()) > max_bytes) {
      const auto room = static_cast<std::size_t>(max_bytes - st.bytes);
      const auto nl = text.rfind('\n', room == 0 ? 0 : room - 1);
      text.resize(nl == std::string::npos || room == 0 ? 0 : nl + 1);
      st.truncated = true;
    }
    if (!text.empty()) {
      trainer.add_text(text);
      st.bytes += static_cast<int64_t>(text.size());
      ++st.files;
    }
    if (st.truncated) break;
  }
  return st;
}

}  // namespace ds
