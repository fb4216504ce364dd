#include "recipe/stage.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "recipe/digest.h"

namespace ds::recipe {
namespace {

namespace fs = std::filesystem;

// An exclusive flock held for the object's life. flock locks belong to the open file
// description, so two launchers (processes, or threads with their own open()) exclude each other.
class FileLock {
 public:
  FileLock(const std::string& path, bool* waited, const std::function<void()>& on_wait) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    DS_CHECK(fd_ >= 0, "cannot open the staging lock " + path + ": " + std::strerror(errno));
    *waited = false;
    if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
    DS_CHECK(errno == EWOULDBLOCK, "cannot lock " + path + ": " + std::strerror(errno));
    *waited = true;
    if (on_wait) on_wait();
    while (::flock(fd_, LOCK_EX) != 0) DS_CHECK(errno == EINTR, "cannot lock " + path + ": " + std::strerror(errno));
  }
  ~FileLock() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

const char* stage_outcome_name(StageOutcome o) {
  switch (o) {
    case StageOutcome::Copied: return "copied";
    case StageOutcome::Reused: return "reused";
    case StageOutcome::Waited: return "waited for another launcher, then reused";
  }
  return "?";
}

StagedModel stage_model(const std::string& model_dir, const std::string& cache_dir, const StageOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  DS_CHECK(fs::is_directory(model_dir), "staging: model folder " + model_dir + " does not exist");
  StagedModel m;
  std::string manifest;
  for (const auto& e : fs::directory_iterator(model_dir)) {
    if (!e.is_regular_file()) continue;
    m.files[e.path().filename().string()] = sha256_file_hex(e.path().string());
  }
  DS_CHECK(!m.files.empty(), "staging: model folder " + model_dir + " holds no files");
  for (const auto& [name, sum] : m.files) manifest += name + " " + sum + "\n";
  m.content_sha256 = sha256_hex(manifest);

  std::error_code ec;
  fs::create_directories(cache_dir, ec);
  DS_CHECK(!ec, "staging: cannot create the model cache " + cache_dir + ": " + ec.message());
  std::string base = fs::path(model_dir).lexically_normal().filename().string();
  if (base.empty() || base == ".") base = fs::path(model_dir).lexically_normal().parent_path().filename().string();
  const std::string name = base + "-" + m.content_sha256.substr(0, 16);
  m.path = (fs::path(cache_dir) / name).string();

  bool waited = false;
  FileLock lock((fs::path(cache_dir) / ("." + name + ".lock")).string(), &waited, o.on_wait);
  if (fs::is_directory(m.path)) {
    m.outcome = waited ? StageOutcome::Waited : StageOutcome::Reused;
  } else {
    // A temporary copy of a launcher that died before renaming is stale: nobody else holds the lock.
    const fs::path tmp = fs::path(cache_dir) / ("." + name + ".partial");
    fs::remove_all(tmp, ec);
    fs::create_directory(tmp, ec);
    DS_CHECK(!ec, "staging: cannot create " + tmp.string() + ": " + ec.message());
    for (const auto& [file, sum] : m.files) {
      fs::copy_file(fs::path(model_dir) / file, tmp / file, ec);
      DS_CHECK(!ec, "staging: copying " + file + " of " + model_dir + " failed: " + ec.message());
      DS_CHECK(sha256_file_hex((tmp / file).string()) == sum,
               "staging: the copy of " + file + " of " + model_dir + " does not match its checksum");
    }
    if (o.before_publish) o.before_publish();
    fs::rename(tmp, m.path, ec);
    DS_CHECK(!ec, "staging: cannot rename " + tmp.string() + " to " + m.path + ": " + ec.message());
    m.outcome = StageOutcome::Copied;
  }
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

}  // namespace ds::recipe
