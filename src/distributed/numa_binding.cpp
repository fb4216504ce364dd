#include "distributed/numa_binding.h"

#include <numa.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace ds::distributed {

namespace {
uint64_t machine_bytes() { return uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGE_SIZE)); }

std::vector<int> parse_nodes(const std::string& spec) {
  std::vector<int> nodes;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    DS_CHECK(!item.empty() && end && *end == '\0' && v >= 0 && v < 4096,
             "invalid settings: --numa-bind '" + spec + "': '" + item + "' is not a node number (auto, off, or a node per rank like 0,1)");
    nodes.push_back(int(v));
  }
  return nodes;
}

std::string gb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", bytes / 1e9);
  return buf;
}
}  // namespace

NumaPlacement bind_rank_to_numa(const std::string& spec, int rank, int ranks) {
  NumaPlacement p;
  const bool have = numa_available() >= 0;
  p.nodes = have ? std::max(1, numa_num_configured_nodes()) : 1;
  p.node_bytes = machine_bytes();
  if (spec == "off") {
    p.note = "unpinned (--numa-bind off)";
    return p;
  }
  int node = -1;
  if (spec == "auto") {
    if (!have || p.nodes <= 1) {
      p.note = "unpinned: one NUMA node";
      return p;
    }
    node = rank % p.nodes;
  } else {
    const std::vector<int> nodes = parse_nodes(spec);
    DS_CHECK(int(nodes.size()) == ranks, "invalid settings: --numa-bind '" + spec + "' names " + std::to_string(nodes.size()) +
                                             " nodes for " + std::to_string(ranks) + " ranks: give one per rank");
    node = nodes[size_t(rank)];
    DS_CHECK(have, "invalid settings: --numa-bind '" + spec + "': this machine has no NUMA support (libnuma says unavailable)");
    DS_CHECK(node < p.nodes, "invalid settings: --numa-bind '" + spec + "': node " + std::to_string(node) +
                                 " does not exist (this machine has nodes 0-" + std::to_string(p.nodes - 1) + ")");
  }
  DS_CHECK(numa_run_on_node(node) == 0, "NUMA: cannot run rank " + std::to_string(rank) + " on node " + std::to_string(node));
  numa_set_preferred(node);
  p.pinned = true;
  p.node = node;
  long long free_bytes = 0;
  const long long size = numa_node_size64(node, &free_bytes);
  if (size > 0) p.node_bytes = uint64_t(size);
  p.note = "rank " + std::to_string(rank) + " pinned to NUMA node " + std::to_string(node) + " of " + std::to_string(p.nodes);
  return p;
}

void check_rank_budget(double per_rank_gb, const NumaPlacement& p, int ranks_on_node) {
  const double need = per_rank_gb * 1e9 * double(ranks_on_node);
  const std::string where = p.pinned ? "NUMA node " + std::to_string(p.node) : std::string("this machine");
  DS_CHECK(need <= double(p.node_bytes),
           "invalid settings: --total-cpu-dram-gb gives each rank " + gb(per_rank_gb * 1e9) + " GB, but " + where + " has " +
               gb(double(p.node_bytes)) + " GB" +
               (ranks_on_node > 1 ? " for its " + std::to_string(ranks_on_node) + " ranks (" + gb(need) + " GB together)" : std::string()));
}

}  // namespace ds::distributed
