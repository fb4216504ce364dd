#include "cache/block_hash.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include <spdlog/spdlog.h>

#include "core/error.h"

namespace ds {

namespace {

// One digest context per thread, reused: creating one per block would allocate in the step loop.
struct Sha256 {
  EVP_MD* md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  ~Sha256() {
    EVP_MD_CTX_free(ctx);
    EVP_MD_free(md);
  }
};

void put_le64(uint64_t v, unsigned char* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}

}  // namespace

ChainKey ChainKey::random() {
  ChainKey k;
  DS_CHECK(RAND_bytes(k.bytes.data(), int(k.bytes.size())) == 1, "prefix cache: no random bytes for the hash key");
  return k;
}

ChainKey ChainKey::load_or_create(const std::string& path) {
  ChainKey k;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) {
    char extra;
    const bool ok = ::read(fd, k.bytes.data(), k.bytes.size()) == ssize_t(k.bytes.size()) && ::read(fd, &extra, 1) == 0;
    ::close(fd);
    if (ok) return k;
    // A damaged key is not fatal: a new one makes every entry under the old one a miss, which
    // the tier's budget then ages out.
    spdlog::warn("prefix cache: the hash key {} is damaged; starting a new one (its entries become misses)", path);
  } else {
    DS_CHECK(errno == ENOENT, "prefix cache: cannot read the hash key " + path + ": " + std::strerror(errno));
  }
  // Written under a temporary name (created exclusively, without following links) and renamed.
  k = random();
  const std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  const int out = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  DS_CHECK(out >= 0, "prefix cache: cannot create the hash key " + path + ": " + std::strerror(errno));
  bool ok = ::write(out, k.bytes.data(), k.bytes.size()) == ssize_t(k.bytes.size());
  ok = (::close(out) == 0) && ok;
  ok = ok && ::rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) ::unlink(tmp.c_str());
  DS_CHECK(ok, "prefix cache: cannot write the hash key " + path);
  return k;
}

uint64_t chain_block_hash(const ChainKey& key, uint64_t parent, std::span<const int32_t> block_tokens) {
  thread_local Sha256 sha;
  unsigned char p[8];
  put_le64(parent, p);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  // int32 tokens are hashed as their bytes; x86 and every target here is little-endian.
  const bool ok = EVP_DigestInit_ex2(sha.ctx, sha.md, nullptr) == 1 &&
                  EVP_DigestUpdate(sha.ctx, key.bytes.data(), key.bytes.size()) == 1 &&
                  EVP_DigestUpdate(sha.ctx, p, sizeof p) == 1 &&
                  EVP_DigestUpdate(sha.ctx, block_tokens.data(), block_tokens.size_bytes()) == 1 &&
                  EVP_DigestFinal_ex(sha.ctx, digest, &len) == 1;
  DS_CHECK(ok && len >= 8, "prefix cache: SHA-256 failed");
  uint64_t h = 0;
  for (int i = 7; i >= 0; --i) h = h << 8 | digest[i];
  return h;
}

uint64_t block_hash_seed(std::span<const uint64_t> identity) {
  return XXH64(identity.data(), identity.size_bytes(), 0x64656c7461736576ull);  // "deltasev"
}

void extend_block_hashes(const ChainKey& key, uint64_t seed, std::span<const int32_t> tokens, int block_size,
                         std::vector<uint64_t>* hashes) {
  const size_t full = tokens.size() / size_t(block_size);
  for (size_t i = hashes->size(); i < full; ++i) {
    const uint64_t parent = i == 0 ? seed : (*hashes)[i - 1];
    hashes->push_back(chain_block_hash(key, parent, tokens.subspan(i * size_t(block_size), size_t(block_size))));
  }
}

}  // namespace ds
