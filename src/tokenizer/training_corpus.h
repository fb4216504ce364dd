// Gathering training text from files and directories for the BPE trainer.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ds {

class BpeTrainer;

// Expands inputs into a sorted, duplicate-free list of regular files. A file named directly is
// always taken; files found by walking a directory (recursively, not following directory
// symlinks) only when their extension is in `extensions` ("py" or ".py"; all files when the list
// is empty). Throws ds::Error for an input that does not exist.
std::vector<std::string> list_corpus_files(const std::vector<std::string>& inputs,
                                           const std::vector<std::string>& extensions);

struct CorpusReadStats {
  int64_t files = 0;
  int64_t bytes = 0;
  bool truncated = false;  // max_bytes was reached
};

// Feeds the files to the trainer in order, stopping at max_bytes (0: no limit). The file that
// crosses the limit is cut at its last newline before the limit, so no line is split.
CorpusReadStats feed_corpus(BpeTrainer& trainer, const std::vector<std::string>& files, int64_t max_bytes);

}  // namespace ds
