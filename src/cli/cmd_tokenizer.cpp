// deltaserve tokenizer train | encode | decode
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/command.h"
#include "core/error.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/training_corpus.h"

namespace ds::cli {
namespace {

struct TrainArgs {
  std::vector<std::string> inputs;
  std::vector<std::string> include_ext;
  int vocab_size = 8192;
  std::vector<std::string> specials;
  std::string out;
  int64_t max_bytes = 0;
};

struct CodecArgs {
  std::string tokenizer;
  std::string text;
  std::string ids;
  bool no_special = false;
  bool skip_special = false;
};

void write_atomically(const std::string& path, const std::string& text) {
  // A reader (a model build waiting on this file) never sees a half-written tokenizer.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw Error("tokenizer train: cannot write " + tmp);
    f << text;
    f.flush();
    if (!f) throw Error("tokenizer train: write failed for " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw Error("tokenizer train: cannot move " + tmp + " to " + path + ": " + ec.message());
}

void run_train(const TrainArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto files = list_corpus_files(a.inputs, a.include_ext);
  if (files.empty()) throw Error("tokenizer train: no input files matched");
  BpeTrainerOptions opt;
  opt.vocab_size = a.vocab_size;
  opt.special_tokens = a.specials;
  BpeTrainer trainer(opt);
  const CorpusReadStats read = feed_corpus(trainer, files, a.max_bytes);
  if (read.bytes == 0) throw Error("tokenizer train: the input files are empty");
  const std::string json = trainer.train();
  // Reading the result back proves the file is usable before anyone depends on it.
  const Tokenizer check = Tokenizer::from_json_text(json, a.out);
  write_atomically(a.out, json);
  const auto& s = trainer.stats();
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr,
               "tokenizer train: %lld bytes from %lld files%s, %lld pieces (%lld unique); %d merges; "
               "vocab %d (%zu special); count %.1fs, merges %.1fs, total %.1fs -> %s\n",
               static_cast<long long>(read.bytes), static_cast<long long>(read.files),
               read.truncated ? " (cut at --max-bytes)" : "", static_cast<long long>(s.pieces),
               static_cast<long long>(s.unique_pieces), s.merges, check.vocab_size(), a.specials.size(),
               s.count_seconds, s.merge_seconds, total, a.out.c_str());
  if (check.vocab_size() != a.vocab_size) {
    std::fprintf(stderr, "tokenizer train: the corpus ran out of pairs: vocab is %d, not the requested %d\n",
                 check.vocab_size(), a.vocab_size);
  }
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    if (b == std::string::npos) continue;
    const std::string num = item.substr(b, e - b + 1);
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(num, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != num.size() || v < INT32_MIN || v > INT32_MAX) throw Error("tokenizer decode: not a token id: '" + num + "'");
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

void setup(CLI::App& app, int& exit_code) {
  auto* tok = app.add_subcommand("tokenizer", "Train, or encode and decode with, a byte-level BPE tokenizer.json");
  tok->require_subcommand(1);

  auto targs = std::make_shared<TrainArgs>();
  auto* train = tok->add_subcommand("train", "Train a byte-level BPE tokenizer and write tokenizer.json");
  train->add_option("--input", targs->inputs, "Files or directories (walked recursively)")->required()->expected(1, -1);
  train->add_option("--include-ext", targs->include_ext, "Extensions taken from directories, e.g. .py,.h (default: all)")
      ->delimiter(',');
  train->add_option("--vocab-size", targs->vocab_size, "Vocabulary size, special tokens included")
      ->capture_default_str()
      ->check(CLI::Range(256, 1 << 24));
  train->add_option("--special", targs->specials, "A special token (repeat; ids follow the merges in this order)")
      ->take_all()
      ->expected(1);
  train->add_option("--out", targs->out, "Output tokenizer.json")->required();
  train->add_option("--max-bytes", targs->max_bytes, "Stop reading input after this many bytes (e.g. 20MB; 0: all)")
      ->transform(CLI::AsSizeValue(false));
  train->callback([targs, &exit_code] {
    run_train(*targs);
    exit_code = 0;
  });

  auto eargs = std::make_shared<CodecArgs>();
  auto* enc = tok->add_subcommand("encode", "Print the token ids of a text, comma-separated");
  enc->add_option("--tokenizer", eargs->tokenizer, "tokenizer.json")->required();
  enc->add_option("--text", eargs->text, "Text to encode")->required();
  enc->add_flag("--no-special", eargs->no_special, "Encode special-token spellings as plain text");
  enc->callback([eargs, &exit_code] {
    const Tokenizer t = Tokenizer::load(eargs->tokenizer);
    const auto ids = t.encode(eargs->text, !eargs->no_special);
    std::string line;
    for (std::size_t i = 0; i < ids.size(); ++i) line += (i ? "," : "") + std::to_string(ids[i]);
    std::cout << line << "\n";
    exit_code = 0;
  });

  auto dargs = std::make_shared<CodecArgs>();
  auto* dec = tok->add_subcommand("decode", "Print the text of comma-separated token ids");
  dec->add_option("--tokenizer", dargs->tokenizer, "tokenizer.json")->required();
  dec->add_option("--ids", dargs->ids, "Token ids, e.g. 1,2,3")->required();
  dec->add_flag("--skip-special", dargs->skip_special, "Leave special tokens out");
  dec->callback([dargs, &exit_code] {
    const Tokenizer t = Tokenizer::load(dargs->tokenizer);
    // Raw bytes: what the ids stand for, even when that is not valid UTF-8.
    std::cout << t.decode(parse_ids(dargs->ids), dargs->skip_special) << "\n";
    exit_code = 0;
  });
}

const RegisterCommand kRegister("tokenizer", setup);

}  // namespace
}  // namespace ds::cli
