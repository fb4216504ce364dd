#include "recipe/digest.h"

#include <openssl/evp.h>

#include <fstream>
#include <memory>
#include <vector>

#include "core/error.h"

namespace ds::recipe {
namespace {

struct Sha256 {
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx{EVP_MD_CTX_new(), EVP_MD_CTX_free};
  Sha256() { DS_CHECK(ctx && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1, "SHA-256: OpenSSL init failed"); }
  void add(const void* p, size_t n) { EVP_DigestUpdate(ctx.get(), p, n); }
  std::string hex() {
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx.get(), d, &n);
    static const char* k = "0123456789abcdef";
    std::string s;
    for (unsigned i = 0; i < n; ++i) {
      s += k[d[i] >> 4];
      s += k[d[i] & 15];
    }
    return s;
  }
};

}  // namespace

std::string sha256_hex(const std::string& bytes) {
  Sha256 h;
  h.add(bytes.data(), bytes.size());
  return h.hex();
}

std::string sha256_file_hex(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  DS_CHECK(f, "cannot read " + path + " to checksum it");
  Sha256 h;
  std::vector<char> buf(1 << 20);
  while (f) {
    f.read(buf.data(), std::streamsize(buf.size()));
    h.add(buf.data(), size_t(f.gcount()));
  }
  DS_CHECK(f.eof(), "reading " + path + " failed while checksumming it");
  return h.hex();
}

}  // namespace ds::recipe
