// Mooncake trace JSONL: one request per line with `timestamp` (ms), `input_length`,
// `output_length`, `hash_ids` (one id per block of `block_size` prompt tokens), and optional
// `session_id` and `delay` (ms of think time before the request).
#pragma once
#include <istream>
#include <string>

#include "bench/workload.h"

namespace ds::bench {

// Lines that share a session_id become one session, in file order; a line without one is a
// session of its own. Throws ds::Error naming `name:line` for malformed input.
Workload parse_mooncake(std::istream& in, const std::string& name, int64_t block_size = 512);
Workload load_mooncake(const std::string& path, int64_t block_size = 512);

}  // namespace ds::bench
