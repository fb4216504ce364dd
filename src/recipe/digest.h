// SHA-256 (OpenSSL's EVP), for the ledger's hash chain and the checksums of staged models.
#pragma once
#include <string>

namespace ds::recipe {

std::string sha256_hex(const std::string& bytes);
// The file's SHA-256, read in pieces; throws ds::Error naming the file when it cannot be read.
std::string sha256_file_hex(const std::string& path);

}  // namespace ds::recipe
