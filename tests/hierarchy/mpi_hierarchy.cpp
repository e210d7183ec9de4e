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
// With ARK_MPI_DEVICE_MEMORY=1 the engines take the platform's memory (mpi_memory::device: the
// caller's buffers, blocking MPI on the engine's thread; here host memory), which each rank checks
// it got: the communicator then stages through memory of its own and divides averages itself; each
// rank also calls its engine's in-place forms and the calls it must refuse (engine_case). A
// call that timed out leaves the engine's thread inside MPI until the other nodes come, so there
// rank 3 comes late rather than never (4 nodes of one rank: the late call completes the others'
// abandoned ones, whose engines then refuse every call), and with a node of two ranks it skips
// the case (a late rank would leave its node's other rank timed out before its rail, and a
// thread inside MPI for good).
#include "ark/ark.hpp"
#include "ark/bootstrap/mpi.hpp"
#include "ark/internode/mpi_engine.hpp"

#include "collective_checks.hpp"

#include <chrono>
#include <cstdlib>
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

bool device_memory_asked() {
  const char* e = std::getenv("ARK_MPI_DEVICE_MEMORY");
  return e && std::string(e) == "1";
}

/// Device memory: the engine's own forms that the communicator does not use (it gives the engine
/// distinct slots): in place where MPI_IN_PLACE says the same, the root's broadcast into another
/// buffer; and its refusals, before anything is posted. Collective over the rail.
std::string engine_case(ark::mpi_engine& e) {
  const int N = e.size(), me = e.rank();
  const std::size_t n = 37;
  auto value = [](int node, std::size_t i) { return static_cast<double>(node * 1000 + static_cast<int>(i)); };
  std::vector<double> a(n * N), b(n * N);
  for (std::size_t i = 0; i < n; ++i) a[i] = value(me, i);
  e.all_reduce(a.data(), a.data(), n, ark::dtype::f64, {}); // in place
  for (std::size_t i = 0; i < n; ++i) {
    double want = 0;
    for (int q = 0; q < N; ++q) want += value(q, i);
    if (a[i] != want) return "in-place all_reduce: element " + std::to_string(i) + " wrong";
  }
  for (std::size_t i = 0; i < n; ++i) b[me * n + i] = value(me, i);
  e.all_gather(b.data() + me * n, b.data(), n * sizeof(double)); // in place
  for (int q = 0; q < N; ++q)
    for (std::size_t i = 0; i < n; ++i)
      if (b[q * n + i] != value(q, i)) return "in-place all_gather: block " + std::to_string(q) + " wrong";
  const int root = N - 1;
  for (std::size_t i = 0; i < n; ++i) a[i] = value(me, i), b[i] = -1;
  e.broadcast(a.data(), b.data(), n * sizeof(double), root); // the root into another buffer too
  for (std::size_t i = 0; i < n; ++i)
    if (b[i] != value(root, i)) return "broadcast: element " + std::to_string(i) + " wrong";
  for (std::size_t i = 0; i < n; ++i) a[i] = value(me, i);
  e.reduce(a.data(), a.data(), n, ark::dtype::f64, {ark::op::dynamic::kind::max, 1},
           0); // in place at the root
  if (me == 0)
    for (std::size_t i = 0; i < n; ++i)
      if (a[i] != value(N - 1, i)) return "in-place reduce: element " + std::to_string(i) + " wrong";
  try {
    e.reduce_scatter(a.data(), a.data() + me * (n / N), n / N, ark::dtype::f64, {});
    return "the engine took an in-place reduce_scatter on device memory";
  } catch (const ark::invalid_argument&) {
  }
  try {
    e.all_reduce(a.data(), b.data(), n, ark::dtype::f64, {ark::op::dynamic::kind::sum, 2});
    return "the engine took divide_by 2 on device memory";
  } catch (const ark::invalid_argument&) {
  }
  return "";
}

/// Device memory: rank 3 comes late to one call (one rank a node only, see the top).
std::string late_rank_case(hcomm& c) {
  if (c.nodes().local_size > 1) return "";
  std::vector<float> in(100, 1.0f), out(100); // one chunk (small_config): one engine call
  if (c.rank() == 3) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2500)); // past every other rank's bound
    c.all_reduce(in.data(), out.data(), in.size());               // completes the abandoned calls
    return "";
  }
  const auto t0 = std::chrono::steady_clock::now();
  try {
    c.all_reduce(in.data(), out.data(), in.size());
    return "a call that rank 3 came late to completed";
  } catch (const ark::timeout_error&) {
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) return "timed out, but late";
  }
  try {
    c.all_reduce(in.data(), out.data(), in.size());
    return "the engine took a call after one timed out";
  } catch (const ark::invalid_argument&) {
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(2000)); // rank 3's call ends every thread's
  return "";
}

/// What one rank checks, then the missing-rank case; "ok ..." or what failed.
std::string run_rank(hcomm& c) {
  const bool device = device_memory_asked();
  if (c.engine() && c.engine()->device_memory() != device)
    return std::string("the engine takes ") + (c.engine()->device_memory() ? "device" : "host") +
           " memory, not what ARK_MPI_DEVICE_MEMORY asked";
  std::size_t bad = 0;
  for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1001}}) {
    bad += ark_test::check_collectives<float, ark::op::sum>(c, count, 1 + count, c.world() - 1);
    bad += ark_test::check_collectives<float, ark::op::avg>(c, count, 2 + count, 0);
    bad += ark_test::check_collectives<std::int32_t, ark::op::max>(c, count, 3 + count, 1);
    bad += ark_test::check_collectives<std::int32_t, ark::op::avg>(c, count, 4 + count, 2 % c.world());
    bad += ark_test::check_collectives<ark::bf16, ark::op::sum>(c, count, 5 + count, 1);
  }
  if (bad) return std::to_string(bad) + " wrong elements";
  if (device && c.engine())
    if (auto v = engine_case(*c.engine()); !v.empty()) return v;
  if (device && c.world() >= 4) {
    if (auto v = late_rank_case(c); !v.empty()) return v;
  } else if (c.world() >= 4 && c.rank() != 3) { // rank 3 stays away from one call
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
         " ranks" + (device ? ", device memory" : "") + ")";
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
