// Field readers shared by the trace parsers; each error names where the bad value sits.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ds::bench {

// A required non-negative integer field (token counts). Floats with no fraction are accepted
// because some trace writers emit 512.0.
int64_t require_count(const nlohmann::json& j, const char* key, const std::string& where);
// A required array of non-negative integer block ids.
std::vector<uint64_t> require_hash_ids(const nlohmann::json& j, const char* key,
                                       const std::string& where);
double optional_number(const nlohmann::json& j, const char* key, const std::string& where,
                       double fallback);

}  // namespace ds::bench
