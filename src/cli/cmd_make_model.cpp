// deltaserve make-model: a checkpoint directory (config.json, model.safetensors, tokenizer.json,
// generation_config.json) for a named preset with seeded random weights.
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "cli/command.h"
#include "convert/presets.h"
#include "core/error.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/tokenizer.h"

namespace ds::cli {
namespace {

// Deterministic pseudo-text with enough distinct pairs to train any preset's vocabulary: words
// from a syllable generator, code-like punctuation and indentation. The tokenizer only has to be
// a valid byte-level BPE of the right size; random weights make its merges irrelevant.
std::string pseudo_corpus(size_t bytes, uint64_t seed) {
  static const char* onsets[] = {"", "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w",
                                 "st", "tr", "pr", "ch", "sh", "th", "qu", "gr", "pl"};
  static const char* vowels[] = {"a", "e", "i", "o", "u", "ai", "ea", "io", "ou", "y"};
  static const char* codas[] = {"", "", "n", "r", "s", "t", "l", "nd", "st", "ng", "x", "ct"};
  static const char* puncts[] = {" ", " ", " ", " ", ", ", ". ", "(", ")", ": ", " = ", "_", "\n    ", "\n", "."};
  std::mt19937_64 rng(seed);
  std::string out;
  out.reserve(bytes + 64);
  while (out.size() < bytes) {
    const int syll = 1 + int(rng() % 3);
    for (int s = 0; s < syll; ++s) {
      out += onsets[rng() % std::size(onsets)];
      out += vowels[rng() % std::size(vowels)];
      out += codas[rng() % std::size(codas)];
    }
    if (rng() % 7 == 0) out += std::to_string(rng() % 1000);
    out += puncts[rng() % std::size(puncts)];
  }
  return out;
}

RegisterCommand reg("make-model", [](CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("make-model", "write a preset model with seeded random weights");
  auto preset_name = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto dtype_name = std::make_shared<std::string>("bf16");
  auto seed = std::make_shared<uint64_t>(0);
  std::string names;
  for (auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
  cmd->add_option("--preset", *preset_name, "preset: " + names)->required();
  cmd->add_option("--seed", *seed, "weight seed");
  cmd->add_option("--dtype", *dtype_name, "bf16 or f32")->check(CLI::IsMember({"bf16", "f32"}));
  cmd->add_option("--out", *out, "output directory")->required();
  cmd->callback([=, &exit_code] {
    try {
      const PresetSpec spec = preset(*preset_name);
      const std::vector<std::string> specials = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
      BpeTrainerOptions opt;
      opt.vocab_size = spec.vocab_size;
      opt.special_tokens = specials;
      BpeTrainer trainer(opt);
      trainer.add_text(pseudo_corpus(size_t(spec.vocab_size) * 400, 0x5eed ^ *seed));
      const std::string tok_json = trainer.train();
      DS_CHECK(trainer.stats().vocab_size == spec.vocab_size,
               "make-model: tokenizer came out with " + std::to_string(trainer.stats().vocab_size) +
                   " tokens, preset needs " + std::to_string(spec.vocab_size));
      const Tokenizer tok = Tokenizer::from_json_text(tok_json, "generated tokenizer");
      const int32_t eos = *tok.token_id("<|endoftext|>");
      DType dt = *dtype_name == "f32" ? DType::F32 : DType::BF16;
      write_preset_model(spec, *seed, dt, *out, eos, eos);
      std::ofstream(*out + "/tokenizer.json") << tok_json;
      spdlog::info("make-model: wrote {} ({}, seed {}, {}) to {}", spec.name, *dtype_name, *seed,
                   std::to_string(std::filesystem::file_size(*out + "/model.safetensors") >> 20) + " MiB", *out);
    } catch (const std::exception& e) {
      spdlog::error("{}", e.what());
      exit_code = 1;
    }
  });
});

}  // namespace
}  // namespace ds::cli
