// Writing a whole file so a reader never sees half of it: the bytes go to a temporary file in
// the same folder, which is fsynced and renamed over the target (a reader that has the old file
// mapped keeps the old bytes). Used by the safetensors and GGUF writers.
#pragma once
#include <functional>
#include <string>

namespace ds {

// `write` gets the temporary file's descriptor and its path (for error messages) and writes
// everything through write_all. Throws ds::Error naming the path; nothing is left behind on error.
void write_file_atomically(const std::string& path, const std::function<void(int fd, const std::string& tmp)>& write);
void write_all(int fd, const void* p, size_t n, const std::string& path);

}  // namespace ds
