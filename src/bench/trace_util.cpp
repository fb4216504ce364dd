#include "bench/trace_util.h"

#include <cmath>

#include "core/error.h"

namespace ds::bench {

using nlohmann::json;

namespace {

bool as_count(const json& v, int64_t& out) {
  if (v.is_number_unsigned() || v.is_number_integer()) {
    out = v.get<int64_t>();
    return out >= 0;
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (d < 0 || d != std::floor(d) || d > 9e18) return false;
    out = static_cast<int64_t>(d);
    return true;
  }
  return false;
}

}  // namespace

int64_t require_count(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  DS_CHECK(it != j.end(), where + ": missing field \"" + key + "\"");
  int64_t v = 0;
  DS_CHECK(as_count(*it, v), where + ": \"" + key + "\" must be a non-negative integer, got " +
                                 it->dump());
  return v;
}

std::vector<uint64_t> require_hash_ids(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  DS_CHECK(it != j.end(), where + ": missing field \"" + key + "\"");
  DS_CHECK(it->is_array(), where + ": \"" + key + "\" must be an array of block ids");
  std::vector<uint64_t> ids;
  ids.reserve(it->size());
  for (size_t i = 0; i < it->size(); ++i) {
    int64_t v = 0;
    DS_CHECK(as_count((*it)[i], v), where + ": \"" + key + "\"[" + std::to_string(i) +
                                        "] must be a non-negative integer, got " +
                                        (*it)[i].dump());
    ids.push_back(static_cast<uint64_t>(v));
  }
  return ids;
}

double optional_number(const json& j, const char* key, const std::string& where,
                       double fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  DS_CHECK(it->is_number(), where + ": \"" + key + "\" must be a number, got " + it->dump());
  double v = it->get<double>();
  DS_CHECK(std::isfinite(v), where + ": \"" + key + "\" must be finite");
  return v;
}

}  // namespace ds::bench
