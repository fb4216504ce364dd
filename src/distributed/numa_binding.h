// Pins a rank's threads and memory to one NUMA node (libnuma), so each rank reads its shard
// from its own socket's memory. A machine with one node runs unpinned and says so.
#pragma once
#include <cstdint>
#include <string>

namespace ds::distributed {

struct NumaPlacement {
  bool pinned = false;
  int node = -1;         // the node this rank runs on (-1: unpinned)
  int nodes = 1;         // NUMA nodes on this machine
  uint64_t node_bytes = 0;  // memory of `node`, or of the whole machine when unpinned
  std::string note;      // one line for the start-up log and /v1/models
};

// spec: "auto" (rank r on node r mod nodes; unpinned on a one-node machine), "off", or a
// comma-separated node per rank ("0,1"). Throws ds::Error for a spec it cannot honour.
// Call before the rank starts its threads: they inherit the binding.
NumaPlacement bind_rank_to_numa(const std::string& spec, int rank, int ranks);

// Checks one rank's share of --total-cpu-dram-gb against the memory of its node (of the
// machine when unpinned, shared by `ranks_on_node` ranks). Throws one line naming both numbers.
void check_rank_budget(double per_rank_gb, const NumaPlacement& p, int ranks_on_node);

}  // namespace ds::distributed
