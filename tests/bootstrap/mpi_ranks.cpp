// tests/bootstrap/mpi_ranks.cpp: the MPI bootstrap across the processes mpirun starts.
//   mpirun -np N ark_mpi_ranks
// Every rank checks all_gather (rank order, many rounds, several sizes) and barrier, and that a
// rank that stops participating turns into a timeout on the others, after which their bootstrap
// refuses every call and the late rank's completion of the abandoned gather writes nothing into
// their buffers; prints one line per rank and exits 0 only if everything held.
#include "ark/bootstrap/mpi.hpp"

#include <algorithm>
#include <chrono>
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
    ark::mpi_bootstrap copy = quick; // as a communicator holds it
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
        bad += !timed_out || !quick.timed_out() || !copy.timed_out();
        // the bootstrap, a copy of it and one made afresh on that MPI communicator now refuse at
        // once, without posting anything
        ark::mpi_bootstrap fresh(late, std::chrono::milliseconds(300));
        for (ark::mpi_bootstrap* b : {&quick, &copy, &fresh}) {
          const auto t0 = std::chrono::steady_clock::now();
          bool refused = false;
          try {
            b->barrier();
          } catch (const ark::invalid_argument&) {
            refused = true;
          }
          bad += !refused || std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(100);
        }
      }
    }
    // the same with a gather: the others time out with their output poisoned, rank 0 completes it
    // late (and gets their contributions, which they no longer hold), and after a barrier on that
    // communicator, by which their abandoned gathers have their data, their outputs still hold the
    // poison: MPI wrote into the bootstrap's own buffers
    MPI_Comm late_gather;
    MPI_Comm_dup(MPI_COMM_WORLD, &late_gather);
    if (world > 1) {
      constexpr int poison = -7;
      ark::mpi_bootstrap gather(late_gather, std::chrono::milliseconds(rank == 0 ? 20000 : 300));
      std::vector<int> all(3 * static_cast<std::size_t>(world), poison);
      {
        std::vector<int> mine{rank, rank + 100, rank + 200};
        if (rank == 0) {
          std::this_thread::sleep_for(std::chrono::seconds(1));
          gather.all_gather(mine.data(), all.data(), mine.size() * sizeof(int));
          for (int q = 0; q < world; ++q)
            for (int i = 0; i < 3; ++i) bad += all[3 * q + i] != q + 100 * i;
        } else {
          bool timed_out = false;
          try {
            gather.all_gather(mine.data(), all.data(), mine.size() * sizeof(int));
          } catch (const ark::timeout_error&) {
            timed_out = true;
          }
          bad += !timed_out;
          std::fill(mine.begin(), mine.end(), poison); // what we sent is gone
        }
      }
      MPI_Barrier(late_gather);
      MPI_Barrier(late_gather);
      if (rank != 0)
        for (const int v : all) bad += v != poison;
    }
    std::printf("mpi bootstrap: rank %d of %d: %s\n", rank, world, bad ? "WRONG" : "ok");
    std::fflush(stdout);
  }
  MPI_Finalize();
  return bad ? 1 : 0;
}
