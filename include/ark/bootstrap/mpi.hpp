// ark/bootstrap/mpi.hpp: a bootstrap over MPI, for jobs launched with mpirun (one process per
// rank, e.g. one per GPU). Include it only where <mpi.h> is available; ark.hpp does not.
//
//   MPI_Init(&argc, &argv);
//   ark::communicator<ark::platform::cuda> comm(ark::mpi_bootstrap(MPI_COMM_WORLD), cfg);
//
// MPI collectives have no timeout, so the gathers are nonblocking requests polled against a
// deadline: a rank that never arrives becomes ark::timeout_error, never a hang (the MPI
// communicator is unusable afterwards; abort the job).
#pragma once

#include "ark/concepts/bootstrap.hpp"
#include "ark/core/error.hpp"

#include <mpi.h>

#include <chrono>
#include <string>
#include <thread>

namespace ark {

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

  void all_gather(const void* in, void* out, std::size_t n) {
    if (n > static_cast<std::size_t>(1) << 30) detail::throw_invalid("mpi_bootstrap", "gather too large");
    MPI_Request req;
    const int count = static_cast<int>(n);
    check(MPI_Iallgather(n ? in : MPI_IN_PLACE, count, MPI_BYTE, out, count, MPI_BYTE, comm_, &req),
          "MPI_Iallgather");
    wait(req, "all_gather");
  }

  void barrier() {
    MPI_Request req;
    check(MPI_Ibarrier(comm_, &req), "MPI_Ibarrier");
    wait(req, "barrier");
  }

private:
  void wait(MPI_Request& req, const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (unsigned spins = 0;; ++spins) {
      int done = 0;
      check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (done) return;
      if (std::chrono::steady_clock::now() > deadline)
        throw timeout_error("mpi_bootstrap: rank " + std::to_string(rank_) + ": " + what +
                                " not complete after " + std::to_string(timeout_.count()) + " ms",
                            {});
      if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  static void check(int rc, const char* call) {
    if (rc != MPI_SUCCESS) throw platform_error(std::string("mpi_bootstrap: ") + call + " failed");
  }

  MPI_Comm comm_;
  std::chrono::milliseconds timeout_;
  int rank_ = 0, size_ = 1;
};

static_assert(bootstrap<mpi_bootstrap>);

} // namespace ark
