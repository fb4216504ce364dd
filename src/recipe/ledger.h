// The results ledger of recipe runs: an append-only JSONL file, one entry per point, each line
//   {"seq": N, "prev": <hash of entry N-1>, "entry": {...}, "hash": sha256(prev + "\n" + entry)}
// where `entry` is hashed as its compact JSON text, exactly as the line holds it. Before every
// append the whole chain is checked, and a ledger whose earlier bytes changed (an edited,
// removed, reordered or truncated entry) is refused with the entry where the chain breaks.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ds::recipe {

inline constexpr const char* kLedgerGenesis = "deltaserve-recipe-ledger-v1";

// Reads and checks the chain; throws ds::Error naming the file, the entry and what broke.
// A ledger that does not exist yet has no entries.
std::vector<nlohmann::json> read_ledger(const std::string& path);

// Checks the chain, then appends `entry` as the next line. Returns the new entry's hash.
std::string append_ledger(const std::string& path, const nlohmann::json& entry);

}  // namespace ds::recipe
