#include "cache/prefix_cache_options.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace ds {

void validate_prefix_cache_options(const PrefixCacheOptions& o) {
  auto fail = [](const std::string& msg) { throw Error("invalid settings: " + msg); };
  if (!o.disk_tier_dir.empty()) {
    if (!o.enabled) fail("--disk-tier-dir needs prefix caching, but --no-prefix-caching is set");
    if (!(o.disk_tier_gb > 0) || !std::isfinite(o.disk_tier_gb)) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%g", o.disk_tier_gb);
      fail(std::string("--disk-tier-gb must be a positive number, got ") + buf);
    }
  }
  if (o.snapshot_interval < 0)
    fail("--state-snapshot-interval must be 0 (prompt ends only) or a number of blocks, got " +
         std::to_string(o.snapshot_interval));
}

}  // namespace ds
