#include "recipe/ledger.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/json_parse.h"
#include "recipe/digest.h"

namespace ds::recipe {
namespace {

std::string link_hash(const std::string& prev, const std::string& entry_text) {
  return sha256_hex(prev + "\n" + entry_text);
}

struct Chain {
  std::vector<nlohmann::json> entries;
  std::string last_hash = sha256_hex(kLedgerGenesis);
  size_t bytes = 0;
};

Chain check_chain(const std::string& path, const std::string& text) {
  Chain c;
  std::istringstream in(text);
  std::string line;
  size_t n = 0;
  auto broken = [&](const std::string& why) {
    return Error("ledger " + path + ": entry " + std::to_string(n) + " (line " + std::to_string(n + 1) + ") " + why +
                 "; earlier bytes of an append-only ledger changed, so nothing is appended");
  };
  while (std::getline(in, line)) {
    if (in.eof()) throw broken("has no newline at its end: the file was truncated or edited");
    // An entry is data from disk: one nested deeper than the bound is refused while it is
    // parsed, before anything (the hash's dump below) walks it.
    nlohmann::json j;
    try {
      j = parse_json(line, "the text");
    } catch (const JsonError& e) {
      throw broken("is not a ledger line (" + std::string(e.what()) + ")");
    }
    if (!j.is_object() || !j.contains("seq") || !j.contains("prev") || !j.contains("entry") || !j.contains("hash") ||
        !j["prev"].is_string() || !j["hash"].is_string() || !j["seq"].is_number_integer())
      throw broken("lacks seq, prev, entry or hash");
    if (j["seq"].get<int64_t>() != int64_t(n)) throw broken("has seq " + j["seq"].dump() + ": an entry was removed or moved");
    if (j["prev"].get<std::string>() != c.last_hash) throw broken("does not follow the entry before it");
    const std::string h = link_hash(c.last_hash, j["entry"].dump());
    if (j["hash"].get<std::string>() != h) throw broken("changed: its hash does not match its content");
    c.last_hash = h;
    c.entries.push_back(j["entry"]);
    ++n;
  }
  c.bytes = text.size();
  return c;
}

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return "";
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

std::vector<nlohmann::json> read_ledger(const std::string& path) { return check_chain(path, read_all(path)).entries; }

std::string append_ledger(const std::string& path, const nlohmann::json& entry) {
  // One appender at a time: the chain is read and extended under an exclusive lock.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  DS_CHECK(fd >= 0, "ledger " + path + ": cannot open: " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() {
      ::flock(fd, LOCK_UN);
      ::close(fd);
    }
  } closer{fd};
  DS_CHECK(::flock(fd, LOCK_EX) == 0, "ledger " + path + ": cannot lock: " + std::strerror(errno));
  const Chain c = check_chain(path, read_all(path));
  const std::string text = entry.dump();
  const std::string h = link_hash(c.last_hash, text);
  nlohmann::json line = {{"seq", c.entries.size()}, {"prev", c.last_hash}, {"entry", entry}, {"hash", h}};
  const std::string out = line.dump() + "\n";
  DS_CHECK(::write(fd, out.data(), out.size()) == ssize_t(out.size()),
           "ledger " + path + ": writing entry " + std::to_string(c.entries.size()) + " failed: " + std::strerror(errno));
  ::fsync(fd);
  return h;
}

}  // namespace ds::recipe
