// Hierarchical collectives on the host platform, ranks as threads split into "nodes" by name:
// how ranks learn their nodes; every collective, element type and op against the reference, out
// of place and in place, at odd counts, in chunks through a small scratch, over layouts whose ranks
// are and are not numbered node by node, one node, one rank a node; refusals on every rank before
// anything moves; a rank that never comes is a timeout on every rank, not a hang; a stream
// engine (NCCL's model) gets the buffers and the call's stream.
#include "ark/ark.hpp"

#include "collective_checks.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {
using host = ark::platform::host;
using hcomm = ark::hierarchical_communicator<host, ark::bootstrap_engine>;
using ark_test::check_collectives;

/// Runs body(rank) on `world` threads, each over the same in-process group; returns the
/// exception text of each rank (empty: none; "timeout: " first for an ark::timeout_error).
std::vector<std::string> run_threads(int world,
                                     const std::function<void(ark::in_process_bootstrap, int)>& body,
                                     std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto group = std::make_shared<ark::in_process_group>(world, timeout);
  std::vector<std::string> errors(world);
  std::vector<std::thread> ts;
  for (int r = 0; r < world; ++r)
    ts.emplace_back([&, r] {
      try {
        body(ark::in_process_bootstrap(group, r), r);
      } catch (const ark::timeout_error& e) {
        errors[r] = std::string("timeout: ") + e.what();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ts) t.join();
  return errors;
}

hcomm::config config_for(std::string node, std::size_t scratch = std::size_t(8) << 20) {
  hcomm::config c;
  c.nodes.name = std::move(node);
  c.nodes.ranks_per_node = 0;
  c.scratch_bytes = scratch;
  c.local.timeout = std::chrono::seconds(20);
  return c;
}

/// The two ways a reduction crosses nodes: as itself (sum), and as a sum divided once at the end
/// (avg); the other ops cross as sum does, so every type takes these two and f32, i32 all five.
template <class T>
std::size_t sum_and_avg(hcomm& c, std::size_t count, std::uint64_t seed, int root) {
  return check_collectives<T, ark::op::sum>(c, count, seed, root) +
         check_collectives<T, ark::op::avg>(c, count, seed + 4, root);
}

template <class T>
std::size_t every_op(hcomm& c, std::size_t count, std::uint64_t seed, int root) {
  return check_collectives<T, ark::op::sum>(c, count, seed, root) +
         check_collectives<T, ark::op::prod>(c, count, seed + 1, root) +
         check_collectives<T, ark::op::min>(c, count, seed + 2, root) +
         check_collectives<T, ark::op::max>(c, count, seed + 3, root) +
         check_collectives<T, ark::op::avg>(c, count, seed + 4, root);
}

struct layout {
  const char* what;
  int world;
  std::function<std::string(int)> node; ///< a rank's node name
  int ranks_per_node = 0;
  int nodes, local_size;
};
} // namespace

TEST_CASE("hierarchy: ranks learn their nodes from names (and cuts), numbered by their lowest rank") {
  const auto errors = run_threads(6, [](ark::in_process_bootstrap b, int r) {
    ark::node_options o;
    o.name = r % 3 == 1 ? "b" : "a"; // a: ranks 0, 2, 3, 5; b: 1, 4
    o.ranks_per_node = 2;            // a cut into {0, 2} and {3, 5}
    const ark::node_map m = ark::learn_nodes(b, o);
    const int node[] = {0, 1, 0, 2, 1, 2}, local[] = {0, 0, 1, 0, 1, 1};
    if (m.nodes != 3 || m.local_size != 2 || m.node != node[r] || m.local_rank != local[r] || m.node_major())
      throw std::runtime_error("wrong map at rank " + std::to_string(r));
    for (int q = 0; q < 6; ++q)
      if (m.global(node[q], local[q]) != q) throw std::runtime_error("rank_at disagrees");
  });
  for (const auto& e : errors) CHECK(e == "");
}

TEST_CASE(
    "hierarchy: nodes of different sizes, or ranks that cut nodes differently, are refused on every rank") {
  // three nodes of 1, 2 and 2 ranks
  auto errors = run_threads(5, [](ark::in_process_bootstrap b, int r) {
    hcomm c(std::move(b), config_for(r == 0 ? "x" : r < 3 ? "y" : "z"));
  });
  for (const auto& e : errors)
    CHECK(e.find("nodes hold different numbers of ranks (1, 2, 2)") != std::string::npos);
  errors = run_threads(4, [](ark::in_process_bootstrap b, int r) {
    auto cfg = config_for("one");
    cfg.nodes.ranks_per_node = r == 0 ? 1 : 2;
    hcomm c(std::move(b), cfg);
  });
  for (const auto& e : errors) CHECK(e.find("cuts nodes into") != std::string::npos);
}

TEST_CASE(
    "hierarchy: every collective, type and op against the reference, in place or not, over every layout") {
  const layout layouts[] = {
      {"2 nodes x 2, numbered node by node", 4, [](int r) { return "n" + std::to_string(r / 2); }, 0, 2, 2},
      {"3 nodes x 2, interleaved", 6, [](int r) { return "n" + std::to_string(r % 3); }, 0, 3, 2},
      {"2 nodes x 3, one name cut by ranks_per_node", 6, [](int) { return std::string("host"); }, 3, 2, 3},
      {"4 nodes of one rank (the engine alone)", 4, [](int r) { return "n" + std::to_string(r); }, 0, 4, 1},
      {"one node of 4 (ark alone)", 4, [](int) { return std::string("host"); }, 0, 1, 4},
  };
  for (const layout& l : layouts) {
    CAPTURE(l.what);
    std::vector<std::size_t> bad(l.world, 0);
    std::vector<int> shape_ok(l.world, 0);
    const auto errors = run_threads(l.world, [&](ark::in_process_bootstrap b, int r) {
      // a small scratch: reduce-scatter, all-gather and reduce run in many chunks
      auto cfg = config_for(l.node(r), 256);
      cfg.nodes.ranks_per_node = l.ranks_per_node;
      hcomm c(std::move(b), cfg);
      shape_ok[r] = c.nodes().nodes == l.nodes && c.nodes().local_size == l.local_size &&
                    (c.engine() != nullptr) == (l.nodes > 1);
      const int root = l.world - 1;
      for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{203}}) {
        bad[r] += every_op<float>(c, count, 11 + count, root);
        bad[r] += every_op<std::int32_t>(c, count, 12 + count, 1 % l.world);
        if (l.nodes == 2 && l.local_size == 2) { // every element type on one layout
          bad[r] += sum_and_avg<double>(c, count, 13, 0);
          bad[r] += sum_and_avg<std::int64_t>(c, count, 14, 1);
          bad[r] += sum_and_avg<std::uint8_t>(c, count, 15, 2);
          bad[r] += sum_and_avg<std::int8_t>(c, count, 16, 3);
          bad[r] += sum_and_avg<ark::fp16>(c, count, 17, 2);
          bad[r] += sum_and_avg<ark::bf16>(c, count, 18, 1);
        }
      }
    });
    for (int r = 0; r < l.world; ++r) {
      CAPTURE(r);
      CHECK(errors[r] == "");
      CHECK(shape_ok[r] == 1);
      CHECK(bad[r] == 0);
    }
  }
}

namespace {
/// The bootstrap engine as a stream engine (NCCL's model: the buffers themselves, the call's
/// stream): the hierarchical communicator's path for such engines, on the host platform. It
/// counts the calls whose stream was not the one expected.
struct on_stream_engine {
  ark::bootstrap_engine e;
  host::stream expected{};
  std::size_t wrong_stream = 0, calls = 0;
  template <ark::bootstrap Boot>
  explicit on_stream_engine(Boot b) : e(std::move(b)) {}
  int rank() { return e.rank(); }
  int size() { return e.size(); }
  void seen(host::stream s) { ++calls, wrong_stream += s != expected; }
  void all_reduce(const void* in, void* out, std::size_t n, ark::dtype t, ark::engine_reduction r,
                  host::stream s) {
    seen(s), e.all_reduce(in, out, n, t, r);
  }
  void reduce_scatter(const void* in, void* out, std::size_t n, ark::dtype t, ark::engine_reduction r,
                      host::stream s) {
    seen(s), e.reduce_scatter(in, out, n, t, r);
  }
  void all_gather(const void* in, void* out, std::size_t bytes, host::stream s) {
    seen(s), e.all_gather(in, out, bytes);
  }
  void broadcast(const void* in, void* out, std::size_t bytes, int root, host::stream s) {
    seen(s), e.broadcast(in, out, bytes, root);
  }
  void reduce(const void* in, void* out, std::size_t n, ark::dtype t, ark::engine_reduction r, int root,
              host::stream s) {
    seen(s), e.reduce(in, out, n, t, r, root);
  }
  void all_to_all(const void* in, void* out, std::size_t bytes, host::stream s) {
    seen(s), e.all_to_all(in, out, bytes);
  }
};
static_assert(ark::stream_engine<on_stream_engine, host> && !ark::internode_engine<on_stream_engine>);
} // namespace

TEST_CASE("hierarchy: a stream engine gets the buffers themselves and the call's stream; every collective") {
  using scomm = ark::hierarchical_communicator<host, on_stream_engine>;
  std::vector<std::size_t> bad(6, 0), wrong_stream(6, 0), calls(6, 0);
  const auto errors = run_threads(6, [&](ark::in_process_bootstrap b, int r) {
    scomm::config cfg;
    cfg.nodes.name = "n" + std::to_string(r % 3); // 3 nodes x 2, interleaved
    cfg.nodes.ranks_per_node = 0;
    cfg.scratch_bytes = 512;
    cfg.local.timeout = std::chrono::seconds(20);
    scomm c(std::move(b), cfg);
    c.engine()->expected = c.local().stream();
    for (const std::size_t count : {std::size_t{1}, std::size_t{77}}) {
      bad[r] += check_collectives<float, ark::op::sum>(c, count, 21 + count, 5);
      bad[r] += check_collectives<float, ark::op::avg>(c, count, 22 + count, 0);
      bad[r] += check_collectives<std::int32_t, ark::op::max>(c, count, 23 + count, 2);
    }
    wrong_stream[r] = c.engine()->wrong_stream;
    calls[r] = c.engine()->calls;
  });
  for (int r = 0; r < 6; ++r) {
    CAPTURE(r);
    CHECK(errors[r] == "");
    CHECK(bad[r] == 0);
    CHECK(calls[r] > 0);
    CHECK(wrong_stream[r] == 0);
  }
}

TEST_CASE("hierarchy: calls larger than the scratch and repeated calls on the default scratch") {
  std::vector<std::size_t> bad(4, 0);
  const auto errors = run_threads(4, [&](ark::in_process_bootstrap b, int r) {
    hcomm c(std::move(b), config_for("n" + std::to_string(r % 2), 4096));
    for (int k = 0; k < 3; ++k) bad[r] += check_collectives<float, ark::op::sum>(c, 3001 + k, 40 + k, k % 4);
  });
  for (int r = 0; r < 4; ++r) {
    CHECK(errors[r] == "");
    CHECK(bad[r] == 0);
  }
}

TEST_CASE("hierarchy: a scratch that cannot hold a chunk of every rank's block is refused on every rank") {
  // 17 ranks (one node): 16 bytes a rank is 272, above the 256 asked for
  const auto errors = run_threads(
      17, [](ark::in_process_bootstrap b, int) { hcomm c(std::move(b), config_for("host", 256)); });
  for (const auto& e : errors) CHECK(e.find("scratch_bytes must be at least 272") != std::string::npos);
}

TEST_CASE("hierarchy: bad calls are refused on the calling rank before anything moves, outputs untouched") {
  std::vector<int> refused(4, 0);
  const auto errors = run_threads(4, [&](ark::in_process_bootstrap b, int r) {
    hcomm c(std::move(b), config_for("n" + std::to_string(r / 2)));
    std::vector<float> in(64, 1.0f), out(64, -3.0f);
    auto refuses = [&](auto&& f) {
      try {
        f();
      } catch (const ark::invalid_argument&) {
        refused[r] += 1;
      }
    };
    ark::op::dynamic premul{ark::op::dynamic::kind::premul_sum};
    refuses([&] { c.all_reduce(in.data(), out.data(), 8, premul); });
    refuses([&] { c.all_reduce<float>(nullptr, out.data(), 8); });
    refuses([&] { c.broadcast(in.data(), out.data(), 8, 4); });
    refuses([&] { c.reduce(in.data(), out.data(), 8, -1); });
    refuses([&] { c.reduce_scatter(out.data() + 1, out.data(), 8); }); // overlapping, not in place
    refuses([&] { c.all_gather(out.data() + 1, out.data(), 8); });
    refuses([&] { c.all_to_all(out.data(), out.data(), 8); }); // in place: not served
    for (float v : out) refused[r] += v != -3.0f ? 100 : 0;
    // the communicator still works afterwards
    c.all_reduce(in.data(), out.data(), 64);
    for (int i = 0; i < 64; ++i) refused[r] += out[i] != 4.0f ? 100 : 0;
  });
  for (int r = 0; r < 4; ++r) {
    CHECK(errors[r] == "");
    CHECK(refused[r] == 7);
  }
}

TEST_CASE("hierarchy: a rank that never comes to a call is an error on every other rank within the bound") {
  using namespace std::chrono_literals;
  std::vector<long> took(4, 0);
  const auto errors = run_threads(
      4,
      [&](ark::in_process_bootstrap b, int r) {
        auto cfg = config_for("n" + std::to_string(r / 2));
        cfg.local.timeout = 400ms;
        hcomm c(std::move(b), cfg);
        std::vector<float> in(1000, 1.0f), out(1000);
        c.all_reduce(in.data(), out.data(), 1000); // every rank once
        if (r == 3) return;                        // then rank 3 stays away
        const auto t0 = std::chrono::steady_clock::now();
        try {
          c.all_reduce(in.data(), out.data(), 1000);
        } catch (...) {
          took[r] =
              std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
                  .count();
          throw;
        }
      },
      400ms);
  // rank 2 waits for rank 3 in its node; rank 1 on its rail (the engine); rank 0 on its rail for
  // rank 2, which gave up
  for (int r = 0; r < 3; ++r) {
    CAPTURE(r);
    CHECK(errors[r].rfind("timeout: ", 0) == 0);
    CHECK(took[r] < 5000);
  }
  CHECK(errors[3] == "");
}
