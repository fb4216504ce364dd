#include "recipe/recipe.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>

#include "core/error.h"

namespace ds::recipe {
namespace {

namespace fs = std::filesystem;

int line_of(const YAML::Node& n) { return n.Mark().line + 1; }

std::string hex_byte(unsigned char c) {
  static const char* kHex = "0123456789abcdef";
  return std::string("0x") + kHex[c >> 4] + kHex[c & 15];
}

// Why `s` is not text a recipe may hold, or nothing: it must be UTF-8 without control
// characters (C0, DEL, C1). Recipe strings are printed (plans, reports, errors) and passed on
// command lines and into C strings, where a NUL ends them early and a newline or an escape
// sequence rewrites what a reader sees.
std::optional<std::string> unsafe_text(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    uint32_t cp = 0;
    size_t n = 0;
    if (c < 0x80) cp = c, n = 1;
    else if (c >= 0xc2 && c <= 0xdf) cp = c & 0x1f, n = 2;
    else if (c >= 0xe0 && c <= 0xef) cp = c & 0x0f, n = 3;
    else if (c >= 0xf0 && c <= 0xf4) cp = c & 0x07, n = 4;
    else return "is not UTF-8 (byte " + hex_byte(c) + " at offset " + std::to_string(i) + ")";
    if (i + n > s.size()) return "is not UTF-8 (it ends inside a character at offset " + std::to_string(i) + ")";
    for (size_t k = 1; k < n; ++k) {
      const unsigned char x = static_cast<unsigned char>(s[i + k]);
      if ((x & 0xc0) != 0x80)
        return "is not UTF-8 (byte " + hex_byte(x) + " at offset " + std::to_string(i + k) + ")";
      cp = (cp << 6) | (x & 0x3f);
    }
    if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)))
      return "is not UTF-8 (an overlong or invalid character at offset " + std::to_string(i) + ")";
    if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f)) {
      char u[16];
      std::snprintf(u, sizeof u, "U+%04X", unsigned(cp));
      return "holds a control character (" + std::string(u) + ") at offset " + std::to_string(i);
    }
    i += n;
  }
  return std::nullopt;
}

// Errors carry the file and the line, as an editor's jump-to-line wants them.
struct Reader {
  std::string file;

  [[noreturn]] void fail(int line, const std::string& what) const {
    throw Error(file + ":" + std::to_string(line) + ": " + what);
  }

  // Calls `on(key, value)` for each entry of map `n` (named `where` in messages); a key outside
  // `allowed`, or one given twice, is an error.
  void each(const YAML::Node& n, const std::string& where, const std::set<std::string>& allowed,
            const std::function<void(const std::string&, const YAML::Node&)>& on) const {
    if (!n.IsMap()) fail(line_of(n), where + " must be a map");
    std::map<std::string, int> seen;
    for (auto it = n.begin(); it != n.end(); ++it) {
      const std::string key = it->first.as<std::string>();
      const int line = line_of(it->first);
      if (auto why = unsafe_text(key)) fail(line, where + ": a key " + *why);
      if (auto [s, fresh] = seen.emplace(key, line); !fresh)
        fail(line, where + ": '" + key + "' is given twice (lines " + std::to_string(s->second) + " and " +
                       std::to_string(line) + "); the second would silently replace the first");
      if (!allowed.count(key)) {
        std::string list;
        for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
        fail(line, where + ": unknown key '" + key + "' (known: " + list + ")");
      }
      on(key, it->second);
    }
  }

  // Every string of a recipe: a scalar, UTF-8 without control characters (unsafe_text).
  std::string str(const YAML::Node& v, const std::string& key) const {
    if (!v.IsScalar()) fail(line_of(v), "'" + key + "' must be a string");
    std::string s = v.as<std::string>();
    if (auto why = unsafe_text(s)) fail(line_of(v), "'" + key + "' " + *why);
    return s;
  }
  // A name (the recipe's, a band's, the served and benched model's): str(), and not empty or
  // starting with '-', since names go on command lines as flags' values.
  std::string name(const YAML::Node& v, const std::string& key) const {
    std::string s = str(v, key);
    if (s.empty()) fail(line_of(v), "'" + key + "' is empty");
    if (s[0] == '-') fail(line_of(v), "'" + key + "' is '" + s + "': a name may not start with '-' (it would read as a flag)");
    return s;
  }
  double num(const YAML::Node& v, const std::string& key, double lo, double hi) const {
    double x = 0;
    if (!v.IsScalar() || !YAML::convert<double>::decode(v, x) || !std::isfinite(x))
      fail(line_of(v), "'" + key + "' must be a number");
    if (x < lo || x > hi)
      fail(line_of(v), "'" + key + "' is " + v.as<std::string>() + ", outside [" + fmt(lo) + ", " + fmt(hi) + "]");
    return x;
  }
  int integer(const YAML::Node& v, const std::string& key, int lo, int hi) const {
    long long x = 0;
    if (!v.IsScalar() || !YAML::convert<long long>::decode(v, x))
      fail(line_of(v), "'" + key + "' must be an integer, not '" + (v.IsScalar() ? v.as<std::string>() : "a collection") + "'");
    if (x < lo || x > hi)
      fail(line_of(v), "'" + key + "' is " + std::to_string(x) + ", outside [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "]");
    return int(x);
  }
  static std::string fmt(double x) {
    std::string s = std::to_string(x);
    s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  }
  std::string one_of(const YAML::Node& v, const std::string& key, const std::set<std::string>& values) const {
    const std::string s = str(v, key);
    if (!values.count(s)) {
      std::string list;
      for (const auto& a : values) list += (list.empty() ? "" : ", ") + a;
      fail(line_of(v), "'" + key + "' is '" + s + "', not one of " + list);
    }
    return s;
  }
};

const std::set<std::string> kKnobKeys = {"draft_tokens",     "rollback",     "spec_method",  "draft_sample",
                                         "dcp",              "dram_utilization", "max_num_seqs", "max_num_batched_tokens",
                                         "window"};

// A typed AL would bypass the golden curve: say where AL comes from instead of "unknown key".
void refuse_typed_al(const Reader& r, const YAML::Node& n) {
  if (n.IsMap() && n["acceptance_length"])
    r.fail(line_of(n["acceptance_length"]),
           "'acceptance_length' is never typed: it is read from the recipe's golden_al curve for the draft_tokens");
}

Knobs read_knobs(const Reader& r, const YAML::Node& n, const std::string& where, std::set<std::string> extra = {}) {
  refuse_typed_al(r, n);
  Knobs k;
  std::set<std::string> allowed = kKnobKeys;
  allowed.insert(extra.begin(), extra.end());
  r.each(n, where, allowed, [&](const std::string& key, const YAML::Node& v) {
    const int line = line_of(v);
    if (key == "draft_tokens") k.draft_tokens = At<int>{r.integer(v, key, 0, 16), line};
    if (key == "rollback") k.rollback = At<std::string>{r.one_of(v, key, {"lanes", "replay"}), line};
    if (key == "spec_method") k.spec_method = At<std::string>{r.one_of(v, key, {"greedy", "probabilistic", "block"}), line};
    if (key == "draft_sample") k.draft_sample = At<std::string>{r.one_of(v, key, {"greedy", "probabilistic"}), line};
    if (key == "dcp") k.dcp = At<int>{r.integer(v, key, 1, 4096), line};
    if (key == "dram_utilization") k.dram_utilization = At<double>{r.num(v, key, 1e-6, 1.0), line};
    if (key == "max_num_seqs") {
      if (v.IsScalar() && v.as<std::string>() == "window")
        k.max_num_seqs = At<int>{kSeqsFromWindow, line};
      else
        k.max_num_seqs = At<int>{r.integer(v, key, 1, 1 << 20), line};
    }
    if (key == "max_num_batched_tokens") k.max_num_batched_tokens = At<int>{r.integer(v, key, 1, 1 << 24), line};
    if (key == "window") k.window = At<int>{r.integer(v, key, 1, 1 << 20), line};
  });
  return k;
}

// "1-4" or "32": an inclusive concurrency range.
std::pair<int, int> read_range(const Reader& r, const YAML::Node& v) {
  if (!v.IsScalar()) r.fail(line_of(v), "a band's 'concurrency' is a range such as 1-4, or one value");
  const std::string s = v.as<std::string>();
  const auto dash = s.find('-');
  try {
    size_t used = 0;
    if (dash == std::string::npos) {
      const int c = std::stoi(s, &used);
      if (used == s.size() && c >= 1) return {c, c};
    } else {
      size_t u2 = 0;
      const int lo = std::stoi(s.substr(0, dash), &used);
      const int hi = std::stoi(s.substr(dash + 1), &u2);
      if (used == dash && dash + 1 + u2 == s.size() && lo >= 1 && hi >= lo) return {lo, hi};
    }
  } catch (const std::exception&) {
  }
  r.fail(line_of(v), "a band's 'concurrency' is '" + s + "', not a range LO-HI with 1 <= LO <= HI");
}

std::string resolve(const std::string& dir, const std::string& p) {
  if (p.empty() || fs::path(p).is_absolute()) return p;
  return (fs::path(dir) / p).lexically_normal().string();
}

}  // namespace

Recipe load_recipe(const std::string& path) {
  Reader r{path};
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw Error("recipe " + path + ": cannot read the file");
  } catch (const YAML::Exception& e) {
    throw Error(path + ":" + std::to_string(e.mark.line + 1) + ": not valid YAML: " + e.msg);
  }
  Recipe rc;
  rc.path = path;
  rc.dir = fs::path(path).parent_path().string();
  if (rc.dir.empty()) rc.dir = ".";
  bool have_concurrency = false;
  r.each(root, "recipe",
         {"name", "model", "draft_model", "served_name", "golden_al", "hardware", "bench", "server", "concurrency",
          "bands", "points"},
         [&](const std::string& key, const YAML::Node& v) {
           if (key == "name") rc.name = r.name(v, key);
           if (key == "model") rc.model = resolve(rc.dir, r.str(v, key));
           if (key == "draft_model") rc.draft_model = resolve(rc.dir, r.str(v, key));
           if (key == "served_name") {
             rc.served_name = r.name(v, key);
             rc.served_name_line = line_of(v);
           }
           if (key == "golden_al") rc.golden_al = resolve(rc.dir, r.str(v, key));
           if (key == "hardware") {
             r.each(v, "hardware", {"available_mib", "dram_cap_mib", "ranks", "devices_per_node", "tuned_isa"},
                    [&](const std::string& k, const YAML::Node& x) {
                      if (k == "available_mib") {
                        if (x.IsScalar() && x.as<std::string>() == "this-machine")
                          rc.hw.this_machine = true;
                        else
                          rc.hw.available_mib = r.num(x, k, 1, 1e12);
                      }
                      if (k == "dram_cap_mib") rc.hw.dram_cap_mib = r.num(x, k, 1, 1e12);
                      if (k == "ranks") rc.hw.ranks = r.integer(x, k, 1, 4096);
                      if (k == "devices_per_node") rc.hw.devices_per_node = r.integer(x, k, 1, 4096);
                      if (k == "tuned_isa") rc.hw.tuned_isa = r.one_of(x, k, {"scalar", "avx2", "avx512"});
                    });
           }
           if (key == "bench") {
             r.each(v, "bench",
                    {"workload", "synthetic", "trace", "model", "duration_s", "grace_period_s", "seed",
                     "warmup_requests_per_lane"},
                    [&](const std::string& k, const YAML::Node& x) {
                      if (k == "workload") rc.bench.workload = r.one_of(x, k, {"synthetic", "trace"});
                      if (k == "synthetic") rc.bench.synthetic = r.one_of(x, k, {"agentic-code"});
                      if (k == "trace") rc.bench.trace = resolve(rc.dir, r.str(x, k));
                      if (k == "model") rc.bench.model = At<std::string>{r.name(x, "bench.model"), line_of(x)};
                      if (k == "duration_s") rc.bench.duration_s = r.num(x, k, 1, 86400);
                      if (k == "grace_period_s") rc.bench.grace_period_s = r.num(x, k, 0, 3600);
                      if (k == "seed") rc.bench.seed = r.integer(x, k, 0, 1 << 30);
                      if (k == "warmup_requests_per_lane") rc.bench.warmup_requests_per_lane = r.integer(x, k, 0, 1000);
                    });
           }
           if (key == "server") {
             r.each(v, "server", {"host", "port", "threads", "kv_pool_gb", "start_timeout_s"},
                    [&](const std::string& k, const YAML::Node& x) {
                      if (k == "host") rc.server.host = r.str(x, k);
                      if (k == "port") rc.server.port = r.integer(x, k, 1, 65535);
                      if (k == "threads") rc.server.threads = r.integer(x, k, 0, 4096);
                      if (k == "kv_pool_gb") rc.server.kv_pool_gb = r.num(x, k, 0, 1e6);
                      if (k == "start_timeout_s") rc.server.start_timeout_s = r.num(x, k, 1, 86400);
                    });
           }
           if (key == "concurrency") {
             have_concurrency = true;
             if (!v.IsSequence() || v.size() == 0) r.fail(line_of(v), "'concurrency' must be a list of points, e.g. [1, 2, 4]");
             std::set<int> seen;
             for (const auto& c : v) {
               const int x = r.integer(c, "concurrency", 1, 1 << 20);
               if (!seen.insert(x).second) r.fail(line_of(c), "concurrency " + std::to_string(x) + " is listed twice");
               rc.concurrency.push_back(x);
             }
           }
           if (key == "bands") {
             if (!v.IsSequence() || v.size() == 0) r.fail(line_of(v), "'bands' must be a list of bands");
             for (const auto& b : v) {
               Band band;
               band.line = line_of(b);
               if (!b.IsMap() || !b["name"] || !b["concurrency"])
                 r.fail(band.line, "a band needs 'name' and 'concurrency' (a range such as 1-4)");
               band.name = r.name(b["name"], "name");
               std::tie(band.lo, band.hi) = read_range(r, b["concurrency"]);
               band.knobs = read_knobs(r, b, "band '" + band.name + "'", {"name", "concurrency"});
               rc.bands.push_back(band);
             }
           }
           if (key == "points") {
             // Keys are concurrency values; each() cannot list them, so duplicates are found here.
             if (!v.IsMap()) r.fail(line_of(v), "'points' must be a map: concurrency -> overrides");
             for (auto it = v.begin(); it != v.end(); ++it) {
               const int c = r.integer(it->first, "points", 1, 1 << 20);
               const int line = line_of(it->first);
               if (auto p = rc.points.find(c); p != rc.points.end())
                 r.fail(line, "points: concurrency " + std::to_string(c) + " is given twice (lines " +
                                  std::to_string(p->second.second) + " and " + std::to_string(line) +
                                  "); the second would silently replace the first");
               rc.points[c] = {read_knobs(r, it->second, "points." + std::to_string(c)), line};
             }
           }
         });
  if (!have_concurrency) r.fail(1, "the recipe has no 'concurrency' list");
  if (rc.bands.empty()) r.fail(1, "the recipe has no 'bands'");
  if (rc.model.empty()) r.fail(1, "the recipe has no 'model'");
  if (rc.served_name.empty()) r.fail(1, "the recipe has no 'served_name'");
  if (rc.bench.workload == "trace" && rc.bench.trace.empty()) r.fail(1, "bench workload 'trace' needs bench.trace");
  return rc;
}

}  // namespace ds::recipe
