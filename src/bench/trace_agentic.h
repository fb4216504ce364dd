// Agentic session traces (schema in docs/bench.md): one trace per recorded agent run, with its
// requests, think times, stop reasons and nested subagent conversations.
#pragma once
#include <string>

#include "bench/workload.h"

namespace ds::bench {

// `text` is one JSON document (a trace object, an array of traces, or {"traces": [...]}) or JSONL
// with one trace object per line. `block_size` > 0 overrides the traces' own block_size.
// Throws ds::Error naming `name:line` (and the JSON path) for malformed input.
Workload parse_agentic(const std::string& text, const std::string& name, int64_t block_size = 0);
Workload load_agentic(const std::string& path, int64_t block_size = 0);

}  // namespace ds::bench
