// deltaserve export-gguf: a checkpoint folder (bf16, f32, or quantized by `deltaserve quantize`)
// as one GGUF file that llama.cpp and `deltaserve serve --model FILE.gguf` both load
// (convert/gguf_export.h).
#include <spdlog/spdlog.h>

#include "cli/command.h"
#include "convert/gguf_export.h"

namespace ds::cli {
namespace {

RegisterCommand reg("export-gguf", [](CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("export-gguf", "Write a checkpoint folder as one GGUF file (llama, kimi-linear)");
  auto model = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  cmd->add_option("--model", *model, "Model folder to read")->required();
  cmd->add_option("--out", *out, "GGUF file to write (replaced atomically)")->required();
  cmd->callback([=, &exit_code] {
    try {
      const GgufExportReport r = export_gguf(*model, *out);
      spdlog::info("export-gguf: {} tensors ({}), {:.1f} MiB of tensor data; wrote {}", r.tensors, r.architecture,
                   r.bytes / 1048576.0, *out);
      exit_code = 0;
    } catch (const std::exception& e) {
      spdlog::error("{}", e.what());
      exit_code = 1;
    }
  });
});

}  // namespace
}  // namespace ds::cli
