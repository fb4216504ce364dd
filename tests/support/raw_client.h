// A loopback client made of plain sockets, for tests that must misbehave the way no HTTP
// library will: trickle bytes, pipeline, never read, send more than allowed, hang up.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

namespace ds::testing {

class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~RawClient() { close(); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return connected_; }
  int fd() const { return fd_; }

  bool send(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += size_t(n);
    }
    return true;
  }

  // Whether bytes (or end of file) are ready within `ms`.
  bool readable(int ms) {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, ms) > 0;
  }

  // Reads what arrives until `until` is in the text read so far, the peer closes, or `ms` pass.
  // The default deadline only catches a hang: it returns as soon as the text or the close comes.
  std::string read_until(const std::string& until, int ms = 30000) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (buf_.find(until) == std::string::npos) {
      const int left = int(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count());
      if (left <= 0 || !readable(left)) break;
      char tmp[16384];
      const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
      if (n <= 0) {
        closed_by_peer_ = true;
        break;
      }
      buf_.append(tmp, size_t(n));
    }
    return buf_;
  }

  // Reads until the peer closes (or `ms` pass); true when it closed.
  bool wait_closed(int ms = 30000) {
    read_until(std::string(1, '\0') + "never", ms);
    return closed_by_peer_;
  }

  const std::string& received() const { return buf_; }
  void clear() { buf_.clear(); }
  bool closed_by_peer() const { return closed_by_peer_; }

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool closed_by_peer_ = false;
  std::string buf_;
};

inline int count_of(const std::string& hay, const std::string& needle) {
  int n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + needle.size())) ++n;
  return n;
}

}  // namespace ds::testing
