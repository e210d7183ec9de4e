// ark/bootstrap/mpi.hpp: a bootstrap over MPI, for jobs launched with mpirun (one process per
// rank, e.g. one per GPU). Include it only where <mpi.h> is available; ark.hpp does not.
//
//   MPI_Init(&argc, &argv);
//   ark::communicator<ark::platform::cuda> comm(ark::mpi_bootstrap(MPI_COMM_WORLD), cfg);
//
// MPI collectives have no timeout, so the gathers are nonblocking requests polled against a
// deadline: a rank that never arrives becomes ark::timeout_error, never a hang. MPI cannot cancel
// a collective request, so the one that timed out stays posted, and a rank that arrives late
// completes it: the gathers therefore run through buffers of the bootstrap's own, which a timed-out
// request keeps (never the caller's, which may be gone by then). After a timeout every bootstrap
// on that MPI communicator (copies, and ones made later, as a communicator's retry would) refuses
// every call, since its next collective would pair with the abandoned one: abort the job, or go
// on only on another MPI communicator. The mark is an attribute of the MPI communicator itself.
#pragma once

#include "ark/concepts/bootstrap.hpp"
#include "ark/core/error.hpp"

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace ark {

namespace detail {
/// Tests `req` until it completes (true) or `timeout` has passed (false, the request still
/// posted); `who` names the caller in the error of a failed test. MPI_Test is what moves a
/// nonblocking collective on (Open MPI's shared-memory transport sends a large message in
/// fragments, each only when the receiver's process enters MPI), so the poll never sleeps: a pause
/// between tests would pause the transfer (docs/perf.md, "MPI between nodes"). It only yields, so
/// that ranks on fewer cores than processes still share them.
inline bool mpi_test_until(MPI_Request& req, std::chrono::milliseconds timeout, const char* who) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (unsigned spins = 0;; ++spins) {
    int done = 0;
    if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
      throw platform_error(std::string(who) + ": MPI_Test failed");
    if (done) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    if (spins > 1000) std::this_thread::yield();
  }
}
} // namespace detail

class mpi_bootstrap {
public:
  explicit mpi_bootstrap(MPI_Comm comm = MPI_COMM_WORLD,
                         std::chrono::milliseconds timeout = std::chrono::seconds(30))
      : comm_(comm), timeout_(timeout) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) detail::throw_invalid("mpi_bootstrap", "MPI_Init has not been called");
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  /// The MPI communicator it gathers on (an inter-node engine over MPI runs on a split's).
  MPI_Comm comm() const { return comm_; }

  /// Collective (splittable_bootstrap): MPI_Comm_split, after a bounded barrier, so that a rank
  /// that never comes is a timeout here, not a hang in the split (which has no bound). The new
  /// MPI communicator is freed with the last copy of the bootstrap, unless MPI was finalized.
  mpi_bootstrap split(int color, int key) {
    if (color < 0) detail::throw_invalid("mpi_bootstrap::split", "color must be >= 0");
    barrier();
    MPI_Comm sub = MPI_COMM_NULL;
    check(MPI_Comm_split(comm_, color, key, &sub), "MPI_Comm_split");
    mpi_bootstrap b(sub, timeout_);
    b.owned_ = std::shared_ptr<void>(nullptr, [sub](void*) mutable {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Comm_free(&sub);
    });
    return b;
  }

  void all_gather(const void* in, void* out, std::size_t n) {
    refuse_after_timeout("all_gather");
    if (n > static_cast<std::size_t>(1) << 30) detail::throw_invalid("mpi_bootstrap", "gather too large");
    auto b = std::make_unique<buffers>();
    b->in.assign(static_cast<const std::byte*>(in), static_cast<const std::byte*>(in) + n);
    b->out.resize(n * static_cast<std::size_t>(size_));
    const int count = static_cast<int>(n);
    check(MPI_Iallgather(n ? b->in.data() : MPI_IN_PLACE, count, MPI_BYTE, b->out.data(), count, MPI_BYTE,
                         comm_, &b->req),
          "MPI_Iallgather");
    b = wait(std::move(b), "all_gather");
    if (n) std::memcpy(out, b->out.data(), b->out.size());
  }

  void barrier() {
    refuse_after_timeout("barrier");
    auto b = std::make_unique<buffers>();
    check(MPI_Ibarrier(comm_, &b->req), "MPI_Ibarrier");
    wait(std::move(b), "barrier");
  }

  /// Whether a call on this MPI communicator timed out: every bootstrap on it then refuses every
  /// call (ark::invalid_argument).
  bool timed_out() const {
    void* v = nullptr;
    int found = 0;
    check(MPI_Comm_get_attr(comm_, abandoned_key(), &v, &found), "MPI_Comm_get_attr");
    return found != 0;
  }

private:
  /// A request and the buffers MPI reads and writes until it completes.
  struct buffers {
    MPI_Request req = MPI_REQUEST_NULL;
    std::vector<std::byte> in, out;
  };

  /// Returns the buffers once the request completed. On timeout, the request is still posted and
  /// MPI may write into its buffers whenever the late rank arrives, so they are left to it: one
  /// allocation per bootstrap, at most, never freed.
  std::unique_ptr<buffers> wait(std::unique_ptr<buffers> b, const char* what) {
    if (detail::mpi_test_until(b->req, timeout_, "mpi_bootstrap")) return b;
    static int mark = 1;
    check(MPI_Comm_set_attr(comm_, abandoned_key(), &mark), "MPI_Comm_set_attr");
    (void)b.release(); // see above: MPI owns it now
    throw timeout_error("mpi_bootstrap: rank " + std::to_string(rank_) + ": " + what +
                            " not complete after " + std::to_string(timeout_.count()) + " ms",
                        {});
  }
  /// The attribute key that marks an MPI communicator with an abandoned request (not copied by
  /// MPI_Comm_dup: a duplicate is another communicator).
  static int abandoned_key() {
    static const int key = [] {
      int k = MPI_KEYVAL_INVALID;
      check(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &k, nullptr),
            "MPI_Comm_create_keyval");
      return k;
    }();
    return key;
  }
  void refuse_after_timeout(const char* what) const {
    if (timed_out())
      detail::throw_invalid("mpi_bootstrap", std::string(what) +
                                                 " after a call that timed out: its request is still "
                                                 "posted on the MPI communicator, which is unusable");
  }
  static void check(int rc, const char* call) {
    if (rc != MPI_SUCCESS) throw platform_error(std::string("mpi_bootstrap: ") + call + " failed");
  }

  MPI_Comm comm_;
  std::chrono::milliseconds timeout_;
  int rank_ = 0, size_ = 1;
  std::shared_ptr<void> owned_; ///< frees comm_ when it was made by split()
};

static_assert(splittable_bootstrap<mpi_bootstrap>);

} // namespace ark
