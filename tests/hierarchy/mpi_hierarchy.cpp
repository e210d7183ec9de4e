// tests/hierarchy/mpi_hierarchy.cpp: hierarchical collectives over MPI on the host platform,
// whose ranks in one node are threads of one process (its memory is the process's):
//   mpirun -np 2 ark_mpi_hierarchy threads 2        # 2 nodes (processes) x 2 ranks (threads)
//   ARK_NODE_RANKS=1 mpirun -np 4 ark_mpi_hierarchy processes   # 4 nodes of one rank: MPI alone
//   ARK_NODE_RANKS=3 mpirun -np 4 ark_mpi_hierarchy refused     # nodes of 3 and 1
//   ARK_NODE_RANKS=2 mpirun -np 4 ark_mpi_hierarchy refused     # a node's ranks in two processes
// Every rank checks every collective (f32, i32, bf16; sum, avg, max) against the reference, out
// of place and in place, in chunks through a small scratch; then rank 3 stays away from a call,
// and every other rank must get a timeout within the bound, not hang. Prints one line per rank;
// exits 0 only if everything held.
#include "ark/ark.hpp"
#include "ark/bootstrap/mpi.hpp"
#include "ark/internode/mpi_engine.hpp"

#include "collective_checks.hpp"

#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {
using host = ark::platform::host;
using hcomm = ark::hierarchical_communicator<host, ark::mpi_engine>;

/// What one rank checks, then the missing-rank case; "ok ..." or what failed.
std::string run_rank(hcomm& c) {
  std::size_t bad = 0;
  for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1001}}) {
    bad += ark_test::check_collectives<float, ark::op::sum>(c, count, 1 + count, c.world() - 1);
    bad += ark_test::check_collectives<float, ark::op::avg>(c, count, 2 + count, 0);
    bad += ark_test::check_collectives<std::int32_t, ark::op::max>(c, count, 3 + count, 1);
    bad += ark_test::check_collectives<std::int32_t, ark::op::avg>(c, count, 4 + count, 2 % c.world());
    bad += ark_test::check_collectives<ark::bf16, ark::op::sum>(c, count, 5 + count, 1);
  }
  if (bad) return std::to_string(bad) + " wrong elements";
  if (c.world() >= 4 && c.rank() != 3) { // rank 3 stays away from one call
    std::vector<float> in(1000, 1.0f), out(1000);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      c.all_reduce(in.data(), out.data(), 1000);
      return "a call that rank 3 stayed away from completed";
    } catch (const ark::timeout_error&) {
      if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) return "timed out, but late";
    }
  }
  return "ok (" + std::to_string(c.nodes().nodes) + " nodes x " + std::to_string(c.nodes().local_size) +
         " ranks)";
}

hcomm::config small_config() {
  hcomm::config cfg;
  cfg.scratch_bytes = 1024; // reduce-scatter, all-gather and reduce in many chunks
  cfg.local.timeout = std::chrono::milliseconds(1000);
  return cfg;
}
constexpr std::chrono::milliseconds engine_bound{1000};
} // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  const std::string mode = argc > 1 ? argv[1] : "processes";
  int proc = 0, procs = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &proc);
  MPI_Comm_size(MPI_COMM_WORLD, &procs);
  std::vector<std::string> verdicts;
  if (mode == "threads") {
    // a process per node, its ranks threads: the node's bootstrap in-process, each thread's rail
    // on an MPI communicator of its own (made here, in order, by every process)
    const int L = argc > 2 ? std::atoi(argv[2]) : 2;
    if (provided < MPI_THREAD_MULTIPLE) {
      std::printf("process %d: FAILED: MPI gives no MPI_THREAD_MULTIPLE\n", proc);
      MPI_Finalize();
      return 1;
    }
    std::vector<MPI_Comm> rails(L);
    for (auto& r : rails) MPI_Comm_dup(MPI_COMM_WORLD, &r);
    auto group = std::make_shared<ark::in_process_group>(L, std::chrono::seconds(20));
    verdicts.resize(L);
    std::vector<std::thread> ts;
    for (int l = 0; l < L; ++l)
      ts.emplace_back([&, l] {
        try {
          std::optional<ark::mpi_engine> rail;
          if (procs > 1) rail.emplace(ark::mpi_bootstrap(rails[l], std::chrono::seconds(20)), engine_bound);
          hcomm c(ark::node_map::regular(procs, L, proc, l), ark::in_process_bootstrap(group, l),
                  std::move(rail), small_config());
          verdicts[l] = run_rank(c);
        } catch (const std::exception& e) {
          verdicts[l] = std::string("threw: ") + e.what();
        }
      });
    for (auto& t : ts) t.join();
  } else {
    const bool expect_refusal = mode == "refused";
    std::string v;
    try {
      hcomm c(
          ark::mpi_bootstrap(MPI_COMM_WORLD, std::chrono::seconds(20)),
          [](ark::mpi_bootstrap rail) { return ark::mpi_engine(std::move(rail), engine_bound); },
          small_config());
      v = expect_refusal ? "the layout was not refused" : run_rank(c);
    } catch (const ark::invalid_argument& e) {
      const std::string what = e.what();
      const bool named = what.find("different numbers of ranks") != std::string::npos ||
                         what.find("runs in another process") != std::string::npos;
      v = expect_refusal && named ? "ok (refused: " + what.substr(0, 90) + "...)" : "threw: " + what;
    } catch (const std::exception& e) {
      v = std::string("threw: ") + e.what();
    }
    verdicts.push_back(v);
  }
  int failed = 0;
  for (std::size_t l = 0; l < verdicts.size(); ++l) {
    std::printf("process %d rank %zu: %s\n", proc, l, verdicts[l].c_str());
    failed |= verdicts[l].rfind("ok", 0) != 0;
  }
  std::fflush(stdout);
  // the verdicts meet on MPI_COMM_WORLD, which no engine used (each runs on a duplicate)
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
