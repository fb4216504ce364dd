// deltaserve quantize: a checkpoint's linear weights to q8_0, q4_0 or mxfp4 (convert/quantize.h).
#include <spdlog/spdlog.h>

#include "cli/command.h"
#include "convert/quantize.h"
#include "core/error.h"

namespace ds::cli {
namespace {

RegisterCommand reg("quantize", [](CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("quantize", "Write a checkpoint with its linear weights quantized (q8_0, q4_0, mxfp4)");
  auto model = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto format = std::make_shared<std::string>();
  auto keep = std::make_shared<std::vector<std::string>>();
  cmd->add_option("--model", *model, "Model folder to read (f32, bf16 or f16 weights)")->required();
  cmd->add_option("--format", *format, "q8_0, q4_0 or mxfp4")->required()->check(CLI::IsMember({"q8_0", "q4_0", "mxfp4"}));
  cmd->add_option("--out", *out, "Folder to write (created; its model.safetensors is replaced)")->required();
  cmd->add_option("--keep", *keep,
                  "Also keep tensors whose names contain these fragments unquantized (comma-separated); always kept: "
                  "embeddings, norms, the MoE router, kv_b_proj, the KDA gates' low-rank projections")
      ->delimiter(',');
  cmd->callback([=, &exit_code] {
    try {
      QuantizeOptions o;
      parse_quant_format(*format, &o.format);
      o.keep = *keep;
      const QuantizeReport r = quantize_checkpoint(*model, *out, o);
      spdlog::info("quantize: {} tensors to {}, {} kept; tensor data {:.1f} MiB -> {:.1f} MiB; wrote {}", r.quantized,
                   *format, r.kept, r.bytes_before / 1048576.0, r.bytes_after / 1048576.0, *out);
      exit_code = 0;
    } catch (const std::exception& e) {  // filesystem errors too
      spdlog::error("{}", e.what());
      exit_code = 1;
    }
  });
});

}  // namespace
}  // namespace ds::cli
