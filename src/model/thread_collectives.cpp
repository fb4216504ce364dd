#include "model/thread_collectives.h"

#include <condition_variable>
#include <cstring>
#include <mutex>

#include "core/error.h"

namespace ds {

namespace {
// A collective is two meetings: the first publishes every rank's buffers, the second tells each
// rank that the others have finished reading its buffers, so it may reuse (or overwrite) them.
enum Op : int { kAllreduce = 1, kGather, kAllgather, kDone };

const char* op_name(int op) {
  switch (op) {
    case kAllreduce: return "allreduce_sum";
    case kGather: return "gather";
    case kAllgather: return "allgather";
    default: return "the end of a collective";
  }
}
}  // namespace

struct ThreadCollectives::Shared {
  int size = 1;
  std::chrono::milliseconds deadline{0};
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;     // ranks in the current round
  uint64_t round = 0;  // rounds completed
  int op = 0;          // the current round's collective and size, set by its first rank
  size_t n = 0;
  int first_rank = 0;
  // Per rank, the buffer it published in the last data round: read by the others until the
  // closing meeting (which stores nothing, so the pointers hold until every rank has read them).
  std::vector<const float*> send;
  std::string failure;  // non-empty: aborted (a mismatch, a deadline, or abort())

  void fail(const std::string& why) {
    if (failure.empty()) failure = why;
    cv.notify_all();
  }
};

std::vector<std::shared_ptr<ThreadCollectives>> ThreadCollectives::group(int size, std::chrono::milliseconds deadline) {
  DS_CHECK(size >= 1, "thread collectives: a group needs at least one rank, got " + std::to_string(size));
  auto shared = std::make_shared<Shared>();
  shared->size = size;
  shared->deadline = deadline;
  shared->send.assign(size_t(size), nullptr);
  std::vector<std::shared_ptr<ThreadCollectives>> ranks;
  for (int r = 0; r < size; ++r) ranks.push_back(std::make_shared<ThreadCollectives>(shared, r));
  return ranks;
}

ThreadCollectives::ThreadCollectives(std::shared_ptr<Shared> shared, int rank) : shared_(std::move(shared)), rank_(rank) {}

int ThreadCollectives::size() const { return shared_->size; }

void ThreadCollectives::abort(const std::string& why) {
  std::lock_guard<std::mutex> lk(shared_->mu);
  shared_->fail(why);
}

void ThreadCollectives::meet(int op, size_t n, const float* send) {
  Shared& s = *shared_;
  std::unique_lock<std::mutex> lk(s.mu);
  if (!s.failure.empty()) throw Error("thread collectives: " + s.failure);
  if (s.arrived == 0) {
    s.op = op;
    s.n = n;
    s.first_rank = rank_;
  } else if (s.op != op || s.n != n) {
    // Ranks out of step: under MPI this hangs or corrupts; here every rank learns which calls met.
    s.fail("rank " + std::to_string(rank_) + " called " + op_name(op) + " of " + std::to_string(n) + " floats while rank " +
           std::to_string(s.first_rank) + " called " + op_name(s.op) + " of " + std::to_string(s.n) + " floats");
    throw Error("thread collectives: " + s.failure);
  }
  if (op != kDone) s.send[size_t(rank_)] = send;
  const uint64_t round = s.round;
  if (++s.arrived == s.size) {
    s.arrived = 0;
    ++s.round;
    s.cv.notify_all();
    return;
  }
  const bool met = s.cv.wait_for(lk, s.deadline, [&] { return s.round != round || !s.failure.empty(); });
  if (s.round != round) return;  // the round filled (a failure after it belongs to the next call)
  if (!met)
    s.fail("rank " + std::to_string(rank_) + " waited " + std::to_string(s.deadline.count()) + " ms in " + op_name(op) +
           " for the other ranks (" + std::to_string(s.arrived) + " of " + std::to_string(s.size) + " arrived)");
  throw Error("thread collectives: " + s.failure);
}

void ThreadCollectives::allreduce_sum(float* data, size_t n) {
  meet(kAllreduce, n, data);
  // Every rank's data is published and none changes until the closing meeting: each rank sums
  // all of them into its own scratch, then overwrites its data once the others have read it.
  sum_.resize(n);
  const int N = shared_->size;
  if (n > 0) std::memcpy(sum_.data(), shared_->send[0], n * sizeof(float));
  for (int r = 1; r < N; ++r) {
    const float* src = shared_->send[size_t(r)];
    for (size_t i = 0; i < n; ++i) sum_[i] += src[i];
  }
  meet(kDone, 0, nullptr);
  if (n > 0) std::memcpy(data, sum_.data(), n * sizeof(float));
}

void ThreadCollectives::gather(const float* send, size_t n, float* recv) {
  meet(kGather, n, send);
  if (rank_ == 0 && n > 0)
    for (int r = 0; r < shared_->size; ++r) std::memcpy(recv + size_t(r) * n, shared_->send[size_t(r)], n * sizeof(float));
  meet(kDone, 0, nullptr);
}

void ThreadCollectives::allgather(const float* send, size_t n, float* recv) {
  meet(kAllgather, n, send);
  if (n > 0)
    for (int r = 0; r < shared_->size; ++r) std::memcpy(recv + size_t(r) * n, shared_->send[size_t(r)], n * sizeof(float));
  meet(kDone, 0, nullptr);
}

}  // namespace ds
