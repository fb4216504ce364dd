#include "convert/quantize.h"

#include <cstring>
#include <filesystem>
#include <span>

#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_writer.h"
#include "core/error.h"
#include "model/model_files.h"

namespace ds {

namespace fs = std::filesystem;

namespace {

bool kept(const std::string& name, const QuantizeOptions& o) {
  for (const auto* list : {&kQuantizeKeptByDefault, &o.keep})
    for (const std::string& frag : *list)
      if (!frag.empty() && name.find(frag) != std::string::npos) return true;
  return false;
}

bool quantizable(const TensorView& t) {
  const bool weight = t.name.size() > 7 && t.name.compare(t.name.size() - 7, 7, ".weight") == 0;
  return weight && t.shape.size() == 2 && t.shape[1] % kQuantBlock == 0 && t.shape[0] > 0 &&
         (t.dtype == DType::F32 || t.dtype == DType::BF16 || t.dtype == DType::F16);
}

}  // namespace

QuantizeReport quantize_checkpoint(const std::string& in_dir, const std::string& out_dir, const QuantizeOptions& o) {
  DS_CHECK(o.format != QuantFormat::None, "quantize: no format given (q8_0, q4_0 or mxfp4)");
  DS_CHECK(fs::weakly_canonical(in_dir) != fs::weakly_canonical(out_dir),
           "quantize: --out must be another folder than --model (" + out_dir + ")");
  const WeightStore store = open_model_weights(in_dir);
  SafetensorsWriter w;
  QuantizeReport rep;
  std::string names;
  for (const std::string& name : store.names()) {
    const TensorView& t = store.get(name);
    rep.bytes_before += t.nbytes;
    DS_CHECK(store.find(name + "_scale") == nullptr || t.dtype == DType::I8 || t.dtype == DType::U8,
             "quantize: " + in_dir + " has a tensor '" + name + "_scale' beside '" + name + "'");
    if (t.dtype == DType::I8 || t.dtype == DType::U8)
      throw Error("quantize: " + in_dir + " is already quantized (tensor '" + name + "' is " +
                  std::string(dtype_name(t.dtype)) + "); quantize from the bf16 or f32 checkpoint");
    std::vector<std::byte> bytes(t.nbytes);
    std::memcpy(bytes.data(), t.data, t.nbytes);
    if (!quantizable(t) || kept(name, o)) {
      w.add(name, t.dtype, t.shape, bytes);
      rep.bytes_after += t.nbytes;
      ++rep.kept;
      continue;
    }
    const int n = int(t.shape[0]), k = int(t.shape[1]);
    const std::vector<float> values = t.to_f32();
    std::vector<uint8_t> codes(size_t(n) * quant_code_bytes(o.format, k)), scales(size_t(n) * quant_scale_bytes(o.format, k));
    for (int r = 0; r < n; ++r)
      quantize_row(o.format, values.data() + size_t(r) * size_t(k), k, codes.data() + size_t(r) * quant_code_bytes(o.format, k),
                   scales.data() + size_t(r) * quant_scale_bytes(o.format, k));
    w.add(name, quant_code_dtype(o.format), {int64_t(n), int64_t(quant_code_bytes(o.format, k))},
          std::as_bytes(std::span<const uint8_t>(codes)));
    w.add(name + "_scale", quant_scale_dtype(o.format), {int64_t(n), int64_t(k / kQuantBlock)},
          std::as_bytes(std::span<const uint8_t>(scales)));
    rep.bytes_after += codes.size() + scales.size();
    ++rep.quantized;
  }
  DS_CHECK(rep.quantized > 0, "quantize: no tensor of " + in_dir + " can be quantized (2-D '*.weight' with an input size a multiple of 32)");
  w.set_metadata("format", "pt");
  w.set_metadata("deltaserve.quantization", std::string(quant_format_name(o.format)));
  w.set_metadata("deltaserve.quantized_tensors", std::to_string(rep.quantized));
  fs::create_directories(out_dir);
  // The folder's other files (config, tokenizer, chat template), but no weights of the source.
  for (const auto& e : fs::directory_iterator(in_dir)) {
    if (!e.is_regular_file()) continue;
    const std::string fname = e.path().filename().string();
    if (fname.ends_with(".safetensors") || fname == "model.safetensors.index.json") continue;
    fs::copy_file(e.path(), fs::path(out_dir) / fname, fs::copy_options::overwrite_existing);
  }
  // A stale index would point the loader at shards that are not there.
  std::error_code ec;
  fs::remove(fs::path(out_dir) / "model.safetensors.index.json", ec);
  w.write((fs::path(out_dir) / "model.safetensors").string());
  return rep;
}

}  // namespace ds
