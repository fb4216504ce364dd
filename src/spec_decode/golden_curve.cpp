#include "spec_decode/golden_curve.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace ds {

namespace {

std::string where(const std::string& path, const YAML::Node& n) {
  return path + ":" + std::to_string(n.Mark().line + 1);
}

std::string text_of(const YAML::Node& root, const char* key) {
  const YAML::Node n = root[key];
  return n && n.IsScalar() ? n.as<std::string>() : std::string();
}

}  // namespace

GoldenCurve load_golden_curve(const std::string& path) {
  DS_CHECK(std::filesystem::is_regular_file(path), "golden AL file '" + path + "' does not exist");
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw Error("golden AL file " + path + ":" + std::to_string(e.mark.line + 1) + ": not valid YAML: " + e.msg);
  }
  DS_CHECK(root.IsMap(), "golden AL file " + path + ": expected a mapping at the top level");
  GoldenCurve c;
  c.model = text_of(root, "model");
  c.draft_model = text_of(root, "draft_model");
  c.draft_sample_method = text_of(root, "draft_sample_method");
  c.rejection_sample_method = text_of(root, "rejection_sample_method");
  for (const char* key : {"acceptance_length", "thinking_on", "thinking_off"}) {
    if (root[key]) {
      c.curve_key = key;
      break;
    }
  }
  DS_CHECK(!c.curve_key.empty(), "golden AL file " + path +
                                     ": no curve (a mapping of draft tokens to AL under acceptance_length, "
                                     "thinking_on or thinking_off)");
  const YAML::Node curve = root[c.curve_key];
  DS_CHECK(curve.IsMap() && curve.size() > 0,
           "golden AL file " + where(path, curve) + ": '" + c.curve_key + "' must map draft tokens to AL");
  for (const auto& kv : curve) {
    int k = 0;
    double al = 0;
    try {
      k = kv.first.as<int>();
      al = kv.second.as<double>();
    } catch (const YAML::Exception&) {
      throw Error("golden AL file " + where(path, kv.first) + ": expected '<draft tokens>: <AL>', got '" +
                  kv.first.Scalar() + ": " + (kv.second.IsScalar() ? kv.second.Scalar() : "...") + "'");
    }
    DS_CHECK(k >= 1 && k <= 64, "golden AL file " + where(path, kv.first) + ": draft tokens " + std::to_string(k) +
                                    " outside [1, 64]");
    DS_CHECK(std::isfinite(al) && al >= 1.0 && al <= double(k + 1),
             "golden AL file " + where(path, kv.second) + ": AL " + kv.second.Scalar() + " for " + std::to_string(k) +
                 " draft tokens is outside [1, " + std::to_string(k + 1) + "]");
    DS_CHECK(c.al.emplace(k, al).second, "golden AL file " + where(path, kv.first) + ": draft tokens " +
                                              std::to_string(k) + " given twice");
  }
  return c;
}

void save_golden_curve(const GoldenCurve& c, const std::string& path) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "model" << YAML::Value << c.model;
  out << YAML::Key << "draft_model" << YAML::Value << c.draft_model;
  out << YAML::Key << "draft_sample_method" << YAML::Value << c.draft_sample_method;
  out << YAML::Key << "rejection_sample_method" << YAML::Value << c.rejection_sample_method;
  out << YAML::Key << (c.curve_key.empty() ? std::string("acceptance_length") : c.curve_key) << YAML::Value
      << YAML::BeginMap;
  for (const auto& [k, al] : c.al) {
    std::ostringstream v;
    v.precision(4);
    v << std::fixed << al;
    out << YAML::Key << k << YAML::Value << v.str();
  }
  out << YAML::EndMap << YAML::EndMap;
  std::ofstream f(path);
  DS_CHECK(f.good(), "cannot write golden AL file '" + path + "'");
  f << "# Golden acceptance-length curve: draft tokens -> mean acceptance length (bonus token included),\n"
       "# measured by `deltaserve spec calibrate` on real acceptance.\n"
    << out.c_str() << "\n";
  DS_CHECK(f.good(), "cannot write golden AL file '" + path + "'");
}

}  // namespace ds
