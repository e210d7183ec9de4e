// tests/bootstrap/mpi_ranks.cpp: the MPI bootstrap across the processes mpirun starts.
//   mpirun -np N ark_mpi_ranks
// Every rank checks all_gather (rank order, many rounds, several sizes) and barrier, and that a
// rank that stops participating turns into a timeout on the others; prints one line per rank
// and exits 0 only if everything held.
#include "ark/bootstrap/mpi.hpp"

#include <cstdio>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int bad = 0;
  {
    ark::mpi_bootstrap boot(MPI_COMM_WORLD, std::chrono::milliseconds(20000));
    const int rank = boot.rank(), world = boot.size();
    for (int round = 0; round < 50; ++round) {
      const std::size_t words = 1 + round % 7;
      std::vector<int> mine(words), all(words * world);
      for (std::size_t i = 0; i < words; ++i) mine[i] = rank * 1000 + round * 10 + static_cast<int>(i);
      boot.all_gather(mine.data(), all.data(), words * sizeof(int));
      for (int q = 0; q < world; ++q)
        for (std::size_t i = 0; i < words; ++i)
          bad += all[q * words + i] != q * 1000 + round * 10 + static_cast<int>(i);
      boot.barrier();
    }
    // rank 0 comes 1 s late to a barrier with a 300 ms bound: every other rank must time out, not
    // hang; rank 0 then completes the barrier the others posted
    MPI_Comm late;
    MPI_Comm_dup(MPI_COMM_WORLD, &late);
    ark::mpi_bootstrap quick(late, std::chrono::milliseconds(300));
    if (world > 1) {
      bool timed_out = false;
      if (rank == 0) {
        std::this_thread::sleep_for(std::chrono::seconds(1));
        quick.barrier();
      } else {
        try {
          quick.barrier();
        } catch (const ark::timeout_error&) {
          timed_out = true;
        }
        bad += !timed_out;
      }
    }
    std::printf("mpi bootstrap: rank %d of %d: %s\n", rank, world, bad ? "WRONG" : "ok");
    std::fflush(stdout);
  }
  MPI_Finalize();
  return bad ? 1 : 0;
}
