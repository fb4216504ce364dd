#include "distributed/mpi_world.h"

#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <thread>

#include "core/error.h"

namespace ds::distributed {

namespace {
// MPI counts are ints: larger transfers go in pieces.
constexpr size_t kMaxCount = size_t(INT_MAX) / 2;

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(std::string("MPI ") + what + " failed: " + std::string(text, size_t(len)));
}
}  // namespace

bool started_by_mpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

MpiWorld::MpiWorld() {
  int provided = 0;
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "init");
  // Errors come back as codes (thrown as ds::Error) instead of killing the job unexplained.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  DS_CHECK(provided >= MPI_THREAD_SERIALIZED, "this MPI library cannot be called from the engine's thread (thread level " +
                                                  std::to_string(provided) + ", need MPI_THREAD_SERIALIZED)");
}

MpiWorld::~MpiWorld() { MPI_Finalize(); }

void MpiWorld::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

namespace {
MPI_Comm& as_comm(void*& p) { return *reinterpret_cast<MPI_Comm*>(&p); }
MPI_Comm as_comm(void* const& p) { return *reinterpret_cast<const MPI_Comm*>(&p); }
static_assert(sizeof(MPI_Comm) <= sizeof(void*), "an MPI_Comm handle fits in a pointer");
}  // namespace

MpiCollectives::MpiCollectives() { as_comm(comm_) = MPI_COMM_WORLD; }

MpiCollectives::~MpiCollectives() {
  if (owned_) MPI_Comm_free(&as_comm(comm_));
}

std::shared_ptr<MpiCollectives> MpiCollectives::split(int color) const {
  auto c = std::make_shared<MpiCollectives>();
  MPI_Comm out;
  check(MPI_Comm_split(as_comm(comm_), color, rank(), &out), "comm split");
  MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN);
  as_comm(c->comm_) = out;
  c->owned_ = true;
  return c;
}

int MpiCollectives::rank() const {
  int r = 0;
  MPI_Comm_rank(as_comm(comm_), &r);
  return r;
}

int MpiCollectives::size() const {
  int s = 1;
  MPI_Comm_size(as_comm(comm_), &s);
  return s;
}

void MpiCollectives::allgather(const float* send, size_t n, float* recv) {
  DS_CHECK(n <= kMaxCount, "allgather: " + std::to_string(n) + " floats per rank is more than one MPI call moves");
  check(MPI_Allgather(send, int(n), MPI_FLOAT, recv, int(n), MPI_FLOAT, as_comm(comm_)), "allgather");
}

void MpiCollectives::allreduce_sum(float* data, size_t n) {
  for (size_t at = 0; at < n; at += kMaxCount)
    check(MPI_Allreduce(MPI_IN_PLACE, data + at, int(std::min(kMaxCount, n - at)), MPI_FLOAT, MPI_SUM, as_comm(comm_)),
          "allreduce");
}

void MpiCollectives::gather(const float* send, size_t n, float* recv) {
  gather_bytes(send, n * sizeof(float), recv);
}

void MpiCollectives::broadcast(void* data, size_t bytes) {
  auto* p = static_cast<char*>(data);
  for (size_t at = 0; at < bytes; at += kMaxCount)
    check(MPI_Bcast(p + at, int(std::min(kMaxCount, bytes - at)), MPI_BYTE, 0, as_comm(comm_)), "broadcast");
}

void MpiCollectives::broadcast_idle(void* data, size_t bytes) {
  DS_CHECK(bytes <= kMaxCount, "broadcast_idle: message too large");
  MPI_Request req;
  check(MPI_Ibcast(data, int(bytes), MPI_BYTE, 0, as_comm(comm_), &req), "broadcast");
  if (rank() == 0) {  // the sender does not idle
    check(MPI_Wait(&req, MPI_STATUS_IGNORE), "broadcast");
    return;
  }
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  int done = 0;
  auto nap = std::chrono::microseconds(20);
  while (true) {
    check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "broadcast");
    if (done) return;
    // While the server decodes, rank 0's next step comes after its sampling and streaming
    // (hundreds of microseconds, more when the HTTP threads compete for the cores): keep polling
    // for 5 ms, yielding the core to any other runnable thread, so the step starts here as it
    // starts there; then sleep in growing naps (at most 1 ms) while the server is idle.
    if (Clock::now() - start < std::chrono::milliseconds(5)) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(1000));
  }
}

void MpiCollectives::gather_bytes(const void* send, size_t bytes, void* recv) {
  DS_CHECK(bytes <= kMaxCount, "gather: " + std::to_string(bytes) + " bytes per rank is more than one MPI call moves");
  check(MPI_Gather(send, int(bytes), MPI_BYTE, recv, int(bytes), MPI_BYTE, 0, as_comm(comm_)), "gather");
}

void MpiCollectives::scatter_bytes(const void* send, size_t bytes, void* recv) {
  DS_CHECK(bytes <= kMaxCount, "scatter: " + std::to_string(bytes) + " bytes per rank is more than one MPI call moves");
  check(MPI_Scatter(send, int(bytes), MPI_BYTE, recv, int(bytes), MPI_BYTE, 0, as_comm(comm_)), "scatter");
}

}  // namespace ds::distributed
