// tests/soak/soak.hpp: random calls over the public API, checked against a reference, on every
// rank of a world: ranks as threads of one process (sharing GPUs where there are fewer), or one
// process per rank (GPUs only: the host platform's ranks share one address space).
//
// Every rank draws the same sequence of calls from one seed: collective, algorithm, backend,
// depth, dtype and op (an entry of the table below), size class, in place or not, root, the
// stream (the communicator's or one of the rank's own) and options (workers, an SM budget that
// may be 0). Calls run in batches enqueued back to back into slices of two registered buffers,
// then the rank synchronizes and checks every byte it uploaded: results against the reference,
// everything else (guards, inputs, outputs of refused calls, a reduce's non-roots) untouched.
// A call the soak knows to be invalid (the rules in `refusal`) must be refused with
// invalid_argument naming the reason, and every other call must run: a refusal of a valid call,
// a timeout, a wrong byte end the configuration as a failure. The configurations run in turn
// (the defaults, automatic slots on the host, small slots, the CPU proxy, device graphs), each over
// a fresh communicator.
//
//   ark_soak [--world N] [--calls N] [--seconds S] [--seed N] [--processes] [--configs a,b]
#pragma once

#include "../support/reference.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace ark_soak {

using namespace ark_test;

enum class bk { automatic, thread_copy, ll_packet, proxy_engine, tma, copy_engine };

template <class B>
constexpr bk kind_of() {
  if constexpr (std::is_same_v<B, ark::dma::automatic>)
    return bk::automatic;
  else if constexpr (std::is_same_v<B, ark::dma::copy_engine>)
    return bk::copy_engine;
  else if constexpr (B::ll)
    return bk::ll_packet;
  else if constexpr (B::direct)
    return bk::thread_copy;
  else if constexpr (B::id == ark::dma::proxy_engine<1>::id)
    return bk::proxy_engine;
  else
    return bk::tma;
}

inline const char* name_of(bk b) {
  constexpr const char* names[] = {"auto", "thread_copy", "ll_packet", "proxy_engine", "tma", "copy_engine"};
  return names[static_cast<int>(b)];
}
template <class Op>
constexpr const char* op_name() {
  if constexpr (std::is_same_v<Op, ark::op::sum>)
    return "sum";
  else if constexpr (std::is_same_v<Op, ark::op::prod>)
    return "prod";
  else if constexpr (std::is_same_v<Op, ark::op::min>)
    return "min";
  else if constexpr (std::is_same_v<Op, ark::op::max>)
    return "max";
  else
    return "avg";
}

/// One call's arguments as the entry sees them.
struct args {
  std::uint64_t seed = 0;
  int world = 1, rank = 0, root = 0;
  std::size_t count = 0;
};

/// One entry of the table: collective K by A over B on T with Op, type-erased.
template <class P>
struct entry {
  std::string name;
  ark::collective k;
  bk backend;
  unsigned depth;
  bool zero_copy; ///< algo::zero_copy named: reads the registered buffers in place
  std::size_t elem, align;
  void (*call)(ark::communicator<P>&, const std::byte* in, std::byte* out, const args&,
               const ark::call_options<P>&);
  /// Writes the rank's input (in_elems of them) at `dst`.
  void (*input)(const args&, std::byte* dst);
  /// Checks out[0, out_elems) of the rank; returns the wrong elements, describes the first.
  std::size_t (*wrong)(const args&, const std::byte* out, std::string& first);
  /// Whether element i of the rank's output is specified (a reduce's non-roots: none).
  bool (*written)(const args&);
};

template <ark::collective K, class A, class B, class T, class Op, class P>
entry<P> make_entry() {
  entry<P> e;
  e.k = K;
  e.backend = kind_of<B>();
  e.depth = B::depth;
  e.zero_copy = std::is_same_v<A, ark::algo::zero_copy>;
  std::string b = name_of(e.backend);
  if (e.backend != bk::automatic && e.backend != bk::copy_engine) b += "<" + std::to_string(B::depth) + ">";
  e.name =
      std::string(ark::to_string(K)) + "<" + A::name + ", " + b + "> " + ark::to_string(ark::dtype_of<T>);
  if constexpr (K == ark::collective::all_reduce || K == ark::collective::reduce_scatter ||
                K == ark::collective::reduce)
    e.name += std::string(" ") + op_name<Op>();
  e.elem = sizeof(T);
  e.align = alignof(T);
  e.call = [](ark::communicator<P>& c, const std::byte* in_b, std::byte* out_b, const args& a,
              const ark::call_options<P>& o) {
    const T* in = reinterpret_cast<const T*>(in_b);
    T* out = reinterpret_cast<T*>(out_b);
    if constexpr (K == ark::collective::all_reduce)
      c.template all_reduce<A, B>(in, out, a.count, Op{}, o);
    else if constexpr (K == ark::collective::reduce_scatter)
      c.template reduce_scatter<A, B>(in, out, a.count, Op{}, o);
    else if constexpr (K == ark::collective::all_gather)
      c.template all_gather<A, B>(in, out, a.count, o);
    else if constexpr (K == ark::collective::broadcast)
      c.template broadcast<B>(in, out, a.count, a.root, o);
    else if constexpr (K == ark::collective::all_to_all)
      c.template all_to_all<B>(in, out, a.count, o);
    else if constexpr (K == ark::collective::gather)
      c.template gather<B>(in, out, a.count, a.root, o);
    else if constexpr (K == ark::collective::scatter)
      c.template scatter<B>(in, out, a.count, a.root, o);
    else if constexpr (K == ark::collective::p2p) { // a ring shift: to the next rank, from the previous
      c.group_start();
      try {
        c.template send<B>(in, a.count, (a.rank + 1) % a.world, o);
        c.template recv<B>(out, a.count, (a.rank + a.world - 1) % a.world, o);
      } catch (...) {
        c.group_end(); // what was added runs: the peers' groups expect it
        throw;
      }
      c.group_end();
    } else
      c.template reduce<B>(in, out, a.count, a.root, Op{}, o);
  };
  e.input = [](const args& a, std::byte* dst) {
    const std::size_t n = in_elems(K, a.count, a.world);
    for (std::size_t i = 0; i < n; ++i) {
      const T v = ark_test::input<T, Op>(a.seed, a.rank, i);
      std::memcpy(dst + i * sizeof(T), &v, sizeof(T));
    }
  };
  e.written = [](const args& a) {
    return (K != ark::collective::reduce && K != ark::collective::gather) || a.rank == a.root;
  };
  e.wrong = [](const args& a, const std::byte* out, std::string& first) {
    const std::size_t n = out_elems(K, a.count, a.world);
    std::size_t bad = 0;
    std::vector<T> contrib(static_cast<std::size_t>(a.world));
    for (std::size_t i = 0; i < n; ++i) {
      T got;
      std::memcpy(&got, out + i * sizeof(T), sizeof(T));
      bool ok;
      if constexpr (K == ark::collective::all_gather || K == ark::collective::broadcast ||
                    K == ark::collective::all_to_all || K == ark::collective::gather ||
                    K == ark::collective::scatter || K == ark::collective::p2p) {
        // all-gather and gather: block q is rank q's input; all-to-all: block q is block `rank`
        // of rank q's input; broadcast: the root's input; scatter: block `rank` of the root's
        const bool from_root = K == ark::collective::broadcast || K == ark::collective::scatter;
        const int from = from_root ? a.root : static_cast<int>(i / a.count);
        // send/recv (a ring shift): the previous rank's input
        const int from_p2p = (a.rank + a.world - 1) % a.world;
        const std::size_t j = K == ark::collective::broadcast || K == ark::collective::p2p ? i
                              : K == ark::collective::scatter ? a.rank * a.count + i
                              : K == ark::collective::all_gather || K == ark::collective::gather
                                  ? i % a.count
                                  : a.rank * a.count + i % a.count;
        const T want = ark_test::input<T, Op>(a.seed, K == ark::collective::p2p ? from_p2p : from, j);
        ok = std::memcmp(&got, &want, sizeof(T)) == 0;
      } else {
        const std::size_t j = K == ark::collective::reduce_scatter ? a.rank * a.count + i : i;
        for (int r = 0; r < a.world; ++r) contrib[r] = ark_test::input<T, Op>(a.seed, r, j);
        ok = matches<T, Op>(got, reduce_reference<T, Op>(contrib), a.world);
      }
      if (!ok && bad++ == 0) first = "element " + std::to_string(i) + " is " + show(got);
    }
    return bad;
  };
  return e;
}

template <class... Ts>
struct types {};
using dtypes = types<float, double, std::int32_t, std::int64_t, std::uint8_t, ark::fp16, ark::bf16>;
using op_types = types<ark::op::sum, ark::op::prod, ark::op::min, ark::op::max, ark::op::avg>;

template <std::size_t I, class T0, class... Ts>
struct nth_t {
  using type = typename nth_t<I - 1, Ts...>::type;
};
template <class T0, class... Ts>
struct nth_t<0, T0, Ts...> {
  using type = T0;
};
template <std::size_t I, class L>
struct pick;
template <std::size_t I, class... Ts>
struct pick<I, types<Ts...>> {
  using type = typename nth_t<I % sizeof...(Ts), Ts...>::type;
};

/// Entry I of the table picks its dtype and op by I, so that the table's entries, few enough to
/// compile quickly, cover every dtype and op several times over.
template <std::size_t I, ark::collective K, class A, class B, class P>
entry<P> at() {
  return make_entry<K, A, B, typename pick<I, dtypes>::type, typename pick<I * 3 + I / 7, op_types>::type,
                    P>();
}

/// Entries the HIP compile check leaves out: it only compiles the soak (every library path it
/// instantiates is compiled for HIP by the GPU tests too), and the whole table doubled the time
/// of CI's build of it for two AMD targets.
#if defined(ARK_HIP_COMPILE_CHECK)
#define ARK_SOAK_FULL(...)
#else
#define ARK_SOAK_FULL(...) __VA_ARGS__,
#endif

/// The table: every collective by every algorithm and backend it offers, every depth, dtype and op.
template <class P>
std::vector<entry<P>> table() {
  namespace algo = ark::algo;
  namespace dma = ark::dma;
  using K = ark::collective;
  using tc1 = dma::thread_copy<1>;
  using tc2 = dma::thread_copy<2>;
  using tc4 = dma::thread_copy<4>;
  using tc8 = dma::thread_copy<8>;
  using ll1 = dma::ll_packet<1>;
  using ll2 = dma::ll_packet<2>;
  using ll4 = dma::ll_packet<4>;
  using ll8 = dma::ll_packet<8>;
  using pe1 = dma::proxy_engine<1>;
  using pe2 = dma::proxy_engine<2>;
  using pe4 = dma::proxy_engine<4>;
  using pe8 = dma::proxy_engine<8>;
  using dauto = dma::automatic;
  // one entry a line; ARK_SOAK_FULL marks those the HIP check leaves out
  // clang-format off
  std::vector<entry<P>> t{
      at<0, K::all_reduce, algo::automatic, dauto, P>(),
      ARK_SOAK_FULL(at<1, K::all_reduce, algo::automatic, tc2, P>())
      at<2, K::all_reduce, algo::automatic, ll4, P>(),
      ARK_SOAK_FULL(at<3, K::all_reduce, algo::automatic, pe8, P>())
      at<4, K::all_reduce, algo::one_shot, dauto, P>(),
      ARK_SOAK_FULL(at<5, K::all_reduce, algo::one_shot, tc4, P>())
      at<6, K::all_reduce, algo::one_shot, ll8, P>(),
      ARK_SOAK_FULL(at<7, K::all_reduce, algo::one_shot, pe1, P>())
      at<8, K::all_reduce, algo::two_shot, dauto, P>(),
      ARK_SOAK_FULL(at<9, K::all_reduce, algo::two_shot, tc8, P>())
      at<10, K::all_reduce, algo::two_shot, ll1, P>(),
      ARK_SOAK_FULL(at<11, K::all_reduce, algo::two_shot, pe2, P>())
      at<12, K::all_reduce, algo::ring, dauto, P>(),
      ARK_SOAK_FULL(at<13, K::all_reduce, algo::ring, tc1, P>())
      at<14, K::all_reduce, algo::ring, ll2, P>(),
      ARK_SOAK_FULL(at<15, K::all_reduce, algo::ring, pe4, P>())
      at<16, K::all_reduce, algo::automatic, dma::copy_engine, P>(),
      ARK_SOAK_FULL(at<17, K::all_reduce, algo::automatic, dma::copy_engine, P>())
      at<18, K::reduce_scatter, algo::automatic, dauto, P>(),
      ARK_SOAK_FULL(at<19, K::reduce_scatter, algo::automatic, ll8, P>())
      at<20, K::reduce_scatter, algo::direct, tc4, P>(),
      ARK_SOAK_FULL(at<21, K::reduce_scatter, algo::direct, ll1, P>())
      at<22, K::reduce_scatter, algo::direct, pe2, P>(),
      ARK_SOAK_FULL(at<23, K::reduce_scatter, algo::ring, tc8, P>())
      at<24, K::reduce_scatter, algo::ring, ll4, P>(),
      ARK_SOAK_FULL(at<25, K::reduce_scatter, algo::ring, pe1, P>())
      at<26, K::all_gather, algo::automatic, dauto, P>(),
      ARK_SOAK_FULL(at<27, K::all_gather, algo::automatic, tc1, P>())
      at<28, K::all_gather, algo::direct, ll2, P>(),
      ARK_SOAK_FULL(at<29, K::all_gather, algo::direct, tc8, P>())
      at<30, K::all_gather, algo::direct, pe4, P>(),
      ARK_SOAK_FULL(at<31, K::all_gather, algo::ring, ll8, P>())
      at<32, K::all_gather, algo::ring, tc2, P>(),
      ARK_SOAK_FULL(at<33, K::all_gather, algo::ring, pe8, P>())
      at<34, K::all_gather, algo::automatic, dma::copy_engine, P>(),
      ARK_SOAK_FULL(at<35, K::broadcast, algo::direct, dauto, P>())
      at<36, K::broadcast, algo::direct, tc4, P>(),
      ARK_SOAK_FULL(at<37, K::broadcast, algo::direct, ll1, P>())
      at<38, K::broadcast, algo::direct, pe2, P>(),
      ARK_SOAK_FULL(at<39, K::broadcast, algo::direct, dma::copy_engine, P>())
      at<40, K::reduce, algo::direct, dauto, P>(),
      ARK_SOAK_FULL(at<41, K::reduce, algo::direct, tc1, P>())
      at<42, K::reduce, algo::direct, ll8, P>(),
      ARK_SOAK_FULL(at<43, K::reduce, algo::direct, pe4, P>())
      at<44, K::all_to_all, algo::direct, dauto, P>(),
      ARK_SOAK_FULL(at<45, K::all_to_all, algo::direct, tc2, P>())
      at<46, K::all_to_all, algo::direct, tc8, P>(),
      ARK_SOAK_FULL(at<47, K::all_to_all, algo::direct, ll4, P>())
      at<48, K::all_to_all, algo::direct, pe1, P>(),
      ARK_SOAK_FULL(at<49, K::gather, algo::direct, dauto, P>())
      at<50, K::gather, algo::direct, ll2, P>(),
      ARK_SOAK_FULL(at<51, K::gather, algo::direct, pe4, P>())
      at<52, K::scatter, algo::direct, dauto, P>(),
      ARK_SOAK_FULL(at<53, K::scatter, algo::direct, tc8, P>())
      at<54, K::scatter, algo::direct, ll1, P>(),
      ARK_SOAK_FULL(at<55, K::p2p, algo::direct, dauto, P>())
      at<56, K::p2p, algo::direct, tc8, P>(),
      ARK_SOAK_FULL(at<57, K::p2p, algo::direct, ll2, P>())
      at<58, K::p2p, algo::direct, pe2, P>(),
      ARK_SOAK_FULL(at<64, K::all_reduce, algo::zero_copy, dauto, P>())
      ARK_SOAK_FULL(at<65, K::reduce_scatter, algo::zero_copy, tc2, P>())
      ARK_SOAK_FULL(at<66, K::all_gather, algo::zero_copy, tc1, P>())
      ARK_SOAK_FULL(at<67, K::all_reduce, algo::zero_copy, pe2, P>())
      ARK_SOAK_FULL(at<68, K::all_gather, algo::zero_copy, pe4, P>())
  };
  // clang-format on
#if defined(ARK_COMPILER_CUDA) && !defined(ARK_HIP_COMPILE_CHECK) // dma::tma: NVIDIA sm_90 and newer
  t.push_back(at<59, K::all_reduce, algo::two_shot, dma::tma<2>, P>());
  t.push_back(at<60, K::all_reduce, algo::ring, dma::tma<8>, P>());
  t.push_back(at<61, K::reduce_scatter, algo::direct, dma::tma<1>, P>());
  t.push_back(at<62, K::all_gather, algo::ring, dma::tma<4>, P>());
  t.push_back(at<63, K::reduce, algo::direct, dma::tma<4>, P>());
#endif
  return t;
}

// -- one call ---------------------------------------------------------------------------------------

/// What a configuration and a world allow, for predicting refusals.
struct limits {
  unsigned max_depth = 0, team_workers = 0, block_cap = 0, p2p_workers = 0;
  bool staging = false;
  bool graphs = false; ///< engine_path::device_graphs serves dma::proxy_engine
  std::size_t queues_per_rank = static_cast<std::size_t>(-1); ///< hardware queues a rank has to itself
};

/// One call of a batch: the entry, its arguments and options, where its slices lie.
template <class P>
struct call {
  const entry<P>* e = nullptr;
  args a;
  bool in_place = false;
  int stream = 0; ///< 0: the communicator's; 1, 2: the rank's own
  unsigned workers = 0;
  int max_ctas = -1;
  bool misaligned = false;
  std::size_t in_off = 0, out_off = 0; ///< byte offsets in the rank's in and out buffers
  std::size_t in_bytes = 0, out_bytes = 0;
  std::string refused; ///< the predicted refusal's reason (a part of its message), or empty

  std::string describe() const {
    static const char* streams[] = {"the communicator's stream", "user stream 1", "user stream 2"};
    std::string s = e->name + ", count " + std::to_string(a.count) + (in_place ? ", in place" : "") +
                    ", root " + std::to_string(a.root) + ", " + streams[stream];
    if (workers) s += ", workers " + std::to_string(workers);
    if (max_ctas >= 0) s += ", max_ctas " + std::to_string(max_ctas);
    if (misaligned) s += ", misaligned";
    return s;
  }
};

/// The reason a call must be refused before it launches, as the API documents it (docs/guide.md,
/// communicator.hpp, options.hpp), in the order the checks run; empty for a valid call.
template <class P>
std::string refusal(const call<P>& c, const limits& l) {
  const entry<P>& e = *c.e;
  using K = ark::collective;
  if (c.misaligned) return "is not aligned to its element type";
  if (e.k == K::p2p) { // communicator::send/recv's checks, then the group's at its end
    if (c.workers && c.max_ctas > 0 && c.workers > static_cast<unsigned>(c.max_ctas))
      return "exceeds max_ctas";
    if (c.max_ctas == 0) return "max_ctas = 0";
    if (c.workers > l.p2p_workers) return "exceeds team_config.p2p_workers";
    // an automatic backend is thread copies of the default depth
    if ((e.backend == bk::automatic ? ark::default_depth : e.depth) > l.max_depth)
      return "exceeds team_config.max_depth";
    if (e.backend == bk::proxy_engine && !l.staging) return "needs staging";
    if (c.workers && l.block_cap && c.workers > l.block_cap) return "blocks a call may use";
    if (c.in_place && c.a.count) return "overlap"; // the receive's buffer is the send's
    return "";
  }
  if (e.k == K::all_to_all && c.in_place && c.a.count) return "overlap"; // no in-place form
  // named zero-copy over the engine that device graphs serve (an all-gather on max_ctas = 0 is
  // the copy engine's alone, below)
  if (e.zero_copy && e.backend == bk::proxy_engine && l.graphs && !(e.k == K::all_gather && c.max_ctas == 0))
    return "needs engine_path::proxy";
  if (c.workers && c.max_ctas > 0 && c.workers > static_cast<unsigned>(c.max_ctas)) return "exceeds max_ctas";
  const bool ce = e.backend == bk::copy_engine;
  if (ce && e.k == K::all_reduce) {
    if (c.max_ctas == 0) return "max_ctas = 0";
    if (l.queues_per_rank < 4) return "hardware queues";
    if (c.workers && l.block_cap && c.workers > l.block_cap) return "blocks a call may use";
    return "";
  }
  if (ce || (c.max_ctas == 0 && (e.k == K::all_gather || e.k == K::broadcast || e.k == K::all_to_all ||
                                 e.k == K::gather || e.k == K::scatter)))
    return l.queues_per_rank < 1 ? "hardware queues" : "";
  if (c.max_ctas == 0) return "max_ctas = 0";
  if (c.workers && l.block_cap && c.workers > l.block_cap) return "blocks a call may use";
  if (c.workers > l.team_workers) return "exceeds team_config.workers";
  if (e.backend != bk::automatic && e.depth > l.max_depth) return "exceeds team_config.max_depth";
  if ((e.backend == bk::proxy_engine || e.backend == bk::tma) && !l.staging) return "needs staging";
  return "";
}

// -- coordination between the ranks -----------------------------------------------------------------

/// What a rank reports after each batch; every rank sees every rank's.
struct status {
  std::uint32_t failed = 0; ///< this rank's configuration failed
  std::uint32_t stop = 0;   ///< this rank's time is up
};

struct run_options {
  int world = 2;
  long calls = 2000;   ///< per world, over every configuration
  double seconds = 60; ///< per world: no batch starts after that
  std::uint64_t seed = 1;
  std::size_t max_bytes = 8 << 20; ///< the largest size class's bytes per rank
  std::vector<std::string> configs;
};

struct named_config_result {
  std::string config;
  long calls = 0, ran = 0, refused = 0, bytes_checked = 0;
  std::map<std::string, long> refusals; ///< by reason
  std::vector<std::string> failures;
};

/// The configurations, in the order they run.
template <class P>
std::vector<std::pair<std::string, typename ark::communicator<P>::config>>
configurations(const run_options& ro) {
  using cfg_t = typename ark::communicator<P>::config;
  constexpr bool gpu = !P::synchronous_launch;
  std::vector<std::pair<std::string, cfg_t>> all;
  const auto timeout = std::chrono::milliseconds(gpu ? 10000 : 30000);
  {
    cfg_t c; // the defaults (on GPUs: 128 workers, 512 KB slots, depth 4, no staging)
    c.timeout = timeout;
    all.emplace_back("defaults", c);
  }
  if constexpr (!gpu) {
    cfg_t c; // automatic slots in a budget that holds fewer workers than asked for at larger
             // worlds (on GPUs the defaults are automatic slots)
    c.team.slot_bytes = 0;
    c.team.scratch_budget = 32 << 20;
    c.timeout = timeout;
    all.emplace_back("automatic slots", c);
  }
  {
    cfg_t c; // staging, served by the CPU proxy: every backend
    c.team.workers = 8;
    c.team.max_depth = 8;
    c.team.slot_bytes = 64 << 10;
    c.team.ll_slot_bytes = 8 << 10;
    c.team.staging = true;
    c.tuning.threads = gpu ? 256 : 1;
    c.ce_chunk_bytes = 64 << 10;
    c.engine = ark::engine_path::proxy;
    c.timeout = timeout;
    all.emplace_back("proxy", c);
  }
  if constexpr (P::device_graph_launch) {
    cfg_t c; // staging, served by device graphs (a launcher kernel; the host runs its model)
    c.team.workers = 4;
    c.team.max_depth = 4;
    c.team.slot_bytes = 256 << 10;
    c.team.ll_slot_bytes = 8 << 10;
    c.team.staging = true;
    c.tuning.threads = gpu ? 256 : 1;
    c.engine = ark::engine_path::device_graphs;
    c.timeout = timeout;
    all.emplace_back("device graphs", c);
  }
  {
    cfg_t c; // small slots: many pipeline steps even at small sizes; early launch off. Last: the
             // slowest, so it gets the time the faster configurations leave
    c.team.workers = 8;
    c.team.max_depth = 8;
    c.team.slot_bytes = 4096;
    c.team.ll_slot_bytes = 2048;
    c.team.staging = false;
    c.tuning.threads = gpu ? 256 : 1;
    c.tuning.bytes_per_worker = 16 << 10;
    c.tuning.ll_bytes_per_worker = 2048;
    c.early_launch = false;
    c.ce_chunk_bytes = 16 << 10;
    c.timeout = timeout;
    all.emplace_back("small slots", c);
  }
  if (ro.configs.empty()) return all;
  std::vector<std::pair<std::string, cfg_t>> chosen;
  for (auto& c : all)
    if (std::find(ro.configs.begin(), ro.configs.end(), c.first) != ro.configs.end()) chosen.push_back(c);
  return chosen;
}

/// How a rank reaches its peers outside the communicator: batch status, and the bootstraps of
/// each configuration's communicator.
struct rank_link {
  std::function<void(const status&, std::vector<status>&)> exchange;
  std::function<ark::any_bootstrap(int config)> bootstrap;
};

/// Where an engine serves the rank's queues: each worker's requests posted, taken by a
/// device-graph launcher and completed, for the workers whose queue is not drained (a failure
/// reports them: a queue left posted but never taken names a launcher that never ran).
template <class P>
std::string engine_queues(const ark::communicator<P>& comm) {
  const ark::team_view& t = comm.team();
  if (!t.engine || !t.lay.has_staging()) return "";
  std::vector<std::byte> img(ark::dma::engine_bytes(t.lay));
  try {
    P::copy(img.data(), t.engine, img.size());
  } catch (const std::exception& x) {
    return std::string("; engine queues unreadable: ") + x.what();
  }
  std::string s = "; engine queues (worker: posted/taken by a launcher/completed, drained ones left out):";
  for (unsigned w = 0; w < t.lay.workers; ++w) {
    const auto* q = ark::dma::queue(t.lay, img.data(), w);
    if (q->posted != q->completed)
      s += " " + std::to_string(w) + ": " + std::to_string(q->posted) + "/" + std::to_string(q->taken) + "/" +
           std::to_string(q->completed);
  }
  return s;
}

/// The steady clock in milliseconds (one clock for every thread and process of the machine).
inline long ms_now() {
  return static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count());
}

inline std::uint64_t size_class_bytes(std::mt19937_64& rng, std::size_t max_bytes) {
  const unsigned r = static_cast<unsigned>(rng() % 100);
  auto within = [&](std::size_t lo, std::size_t hi) { // log-uniform
    hi = std::max(lo, std::min(hi, max_bytes));
    const double x = std::log(static_cast<double>(lo)) +
                     (std::log(static_cast<double>(hi)) - std::log(static_cast<double>(lo))) *
                         static_cast<double>(rng() % 10000) / 10000.0;
    return static_cast<std::uint64_t>(std::exp(x));
  };
  if (r < 8) return 0;
  if (r < 35) return within(1, 256);
  if (r < 65) return within(256, 16 << 10);
  if (r < 85) return within(16 << 10, 256 << 10);
  if (r < 97) return within(256 << 10, 2 << 20);
  return within(2 << 20, max_bytes);
}

/// One rank's soak: every configuration in turn. `local_ranks`: the ranks of this process on the
/// rank's GPU (they share its context and hardware queues).
template <class P>
std::vector<named_config_result> run_rank(const run_options& ro, int rank, int device,
                                          std::size_t context_ranks, rank_link& link) {
  using comm_t = ark::communicator<P>;
  const int world = ro.world;
  const auto configs = configurations<P>(ro);
  const auto tab = table<P>();
  std::vector<named_config_result> results;
  const std::size_t per_rank_cap = ro.max_bytes;
  // both buffers hold a batch: the largest call (an all-gather's world x max_bytes) twice over
  const std::size_t buf_bytes = 2 * per_rank_cap * static_cast<std::size_t>(world) + (1 << 16);
  std::mt19937_64 rng(ro.seed); // the same sequence on every rank
  const auto world_end =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<long>(ro.seconds * 1000));
  for (std::size_t ci = 0; ci < configs.size(); ++ci) {
    // each configuration its share of the calls, and an equal share of the time left: what a
    // faster configuration did not use goes to the slower ones after it
    const auto now = std::chrono::steady_clock::now();
    const auto deadline = now + (world_end - now) / static_cast<long>(configs.size() - ci);
    bool stopped = false;
    named_config_result res;
    res.config = configs[ci].first;
    auto cfg = configs[ci].second;
    cfg.device = device;
    const long calls_here = ro.calls / static_cast<long>(configs.size());
    // memory and streams before the communicator's first call on any rank: where ranks share a
    // GPU, freeing memory or making a stream can wait for the kernels running there (docs/guide.md)
    // streams of the rank's own: two, or what the rank's share of its context's hardware queues
    // leaves beside the communicator's (docs/guide.md, "Ranks that share a GPU")
    int n_user = 2;
    if constexpr (!P::synchronous_launch)
      if (context_ranks > 1)
        n_user = std::clamp(static_cast<int>(static_cast<std::size_t>(P::hardware_queues()) / context_ranks -
                                             ark::detail::held_streams(cfg.team.staging)),
                            0, 2);
    auto in_mem = P::allocate(buf_bytes, device), out_mem = P::allocate(buf_bytes, device);
    std::vector<typename P::stream> user;
    for (int i = 0; i < n_user; ++i) user.push_back(P::create_stream(device));
    bool failed = false, keep_memory = false;
    std::vector<std::byte> in_img(buf_bytes), out_img(buf_bytes), in_got(buf_bytes), out_got(buf_bytes);
    try {
      comm_t comm(link.bootstrap(static_cast<int>(ci)), cfg);
      comm.register_buffer(in_mem.ptr, buf_bytes);
      comm.register_buffer(out_mem.ptr, buf_bytes);
      limits lim;
      lim.max_depth = cfg.team.max_depth;
      lim.team_workers = comm.team().lay.workers; // automatic slots: those the budget holds
      lim.p2p_workers = comm.team().lay.p2p;
      lim.block_cap = comm.block_cap();
      lim.staging = cfg.team.staging;
      lim.graphs = cfg.engine == ark::engine_path::device_graphs;
      if constexpr (!P::synchronous_launch)
        if (context_ranks > 1)
          lim.queues_per_rank = static_cast<std::size_t>(P::hardware_queues()) / context_ranks;
      std::vector<status> all(world);
      link.exchange(status{}, all); // every rank's memory, streams and windows made
      std::byte* in_base = static_cast<std::byte*>(in_mem.ptr);
      std::byte* out_base = static_cast<std::byte*>(out_mem.ptr);
      while (res.calls < calls_here && !failed) {
        // -- draw a batch of calls into slices of the two buffers
        std::vector<call<P>> batch;
        std::size_t in_used = 0, out_used = 0;
        const int want = 1 + static_cast<int>(rng() % 24);
        for (int b = 0; b < want && res.calls + static_cast<long>(batch.size()) < calls_here; ++b) {
          call<P> c;
          c.e = &tab[rng() % tab.size()];
          const entry<P>& e = *c.e;
          c.a.seed = rng();
          c.a.world = world;
          c.a.rank = rank;
          c.a.root = static_cast<int>(rng() % world);
          c.a.count = size_class_bytes(rng, per_rank_cap) / e.elem;
          c.in_place = rng() % 3 == 0;
          c.stream = static_cast<int>(rng() % 4) < 2 ? 0 : 1 + static_cast<int>(rng() % 2);
          if (c.stream > n_user) c.stream = 0;
          const unsigned o = static_cast<unsigned>(rng() % 100);
          if (o < 6)
            c.max_ctas = 0; // the copy engine alone
          else if (o < 12)
            c.max_ctas = 1 + static_cast<int>(rng() % 8); // an SM budget
          const unsigned w = static_cast<unsigned>(rng() % 100);
          if (w < 8)
            c.workers = 1 + static_cast<unsigned>(rng() % 4);
          else if (w < 11)
            c.workers = lim.team_workers + 1 + static_cast<unsigned>(rng() % 3);
          else if (w < 13 && lim.block_cap)
            c.workers = lim.block_cap + 1;
          c.misaligned = e.align > 1 && rng() % 50 == 0;
          const std::size_t n_in = in_elems(e.k, c.a.count, world) * e.elem;
          const std::size_t n_out = out_elems(e.k, c.a.count, world) * e.elem;
          // in place: the input lies in the output's slice (NCCL's in-place conventions)
          const std::size_t need_out = c.in_place ? std::max(n_in, n_out) : n_out;
          const std::size_t skew = (rng() % 8) * e.elem + (c.misaligned ? 1 : 0);
          const std::size_t in_off = (in_used + 255) / 256 * 256 + skew,
                            out_off = (out_used + 255) / 256 * 256 + skew;
          if (out_off + need_out + 64 > buf_bytes || in_off + n_in + 64 > buf_bytes) break;
          c.in_off = in_off, c.out_off = out_off, c.in_bytes = c.in_place ? 0 : n_in, c.out_bytes = need_out;
          in_used = in_off + c.in_bytes + 64;
          out_used = out_off + need_out + 64;
          c.refused = refusal(c, lim);
          batch.push_back(c);
        }
        if (batch.empty()) continue;
        // -- images: poison everywhere, inputs in place
        std::memset(in_img.data(), 0xA7, in_used);
        std::memset(out_img.data(), 0xFF, out_used); // NaN for every float type
        for (const auto& c : batch) {
          const entry<P>& e = *c.e;
          std::byte* in_at = c.in_place ? out_img.data() + c.out_off : in_img.data() + c.in_off;
          // in place: all_gather's and gather's input is block `rank` of the output; reduce_scatter's
          // output is block `rank` of the input, scatter's block `root` on every rank
          if (c.in_place && (e.k == ark::collective::all_gather || e.k == ark::collective::gather))
            in_at += rank * c.a.count * e.elem;
          e.input(c.a, in_at);
        }
        // when this rank reached each step of the batch (a failure reports them: a rank that
        // enqueued its calls late tells a host-side wait from a device-side one)
        std::vector<long> at{ms_now()};
        P::copy(in_base, in_img.data(), in_used);
        P::copy(out_base, out_img.data(), out_used);
        at.push_back(ms_now());
        // -- the calls, back to back
        std::string error;
        std::size_t enqueued = 0;
        for (const auto& c : batch) {
          const entry<P>& e = *c.e;
          ark::call_options<P> o;
          if (c.stream) o.stream = user[c.stream - 1];
          o.workers = c.workers;
          o.max_ctas = c.max_ctas;
          const std::byte* in = c.in_place ? out_base + c.out_off : in_base + c.in_off;
          std::byte* out = out_base + c.out_off;
          if (c.in_place) {
            if (e.k == ark::collective::all_gather || e.k == ark::collective::gather)
              in += rank * c.a.count * e.elem;
            // scatter: every rank's out at the root's block (the place the copy engine needs)
            if (e.k == ark::collective::reduce_scatter) out += rank * c.a.count * e.elem;
            if (e.k == ark::collective::scatter) out += c.a.root * c.a.count * e.elem;
          }
          ++res.calls;
          try {
            e.call(comm, in, out, c.a, o);
            ++enqueued;
            if (!c.refused.empty()) {
              error = "ran, but should be refused (" + c.refused + "): " + c.describe();
              break;
            }
            ++res.ran;
          } catch (const ark::invalid_argument& x) {
            if (c.refused.empty() || std::string(x.what()).find(c.refused) == std::string::npos) {
              error = (c.refused.empty() ? "a valid call refused: "
                                         : "refused for another reason than " + c.refused + ": ") +
                      c.describe() + ": " + x.what();
              break;
            }
            ++res.refused;
            ++res.refusals[c.refused];
          } catch (const std::exception& x) {
            error = "call " + c.describe() + " threw: " + x.what();
            break;
          }
          at.push_back(ms_now());
        }
        try {
          for (auto s : user) P::synchronize(s);
          comm.synchronize();
        } catch (const std::exception& x) {
          if (error.empty()) error = std::string("synchronize: ") + x.what();
        }
        at.push_back(ms_now());
        if (!error.empty()) {
          std::string calls = "; steady clock (ms): batch drawn, uploaded, after each call, synchronized:";
          for (long t : at) calls += " " + std::to_string(t);
          calls += "; the batch:";
          for (std::size_t i = 0; i < batch.size(); ++i)
            calls += "\n      " + std::to_string(i) + ": " + batch[i].describe() +
                     (batch[i].refused.empty() ? "" : " [refused: " + batch[i].refused + "]");
          res.failures.push_back("rank " + std::to_string(rank) + ": " + error + calls + engine_queues(comm));
          failed = keep_memory = true; // a failed peer's copies may still land in our buffers
        } else {
          // -- check every byte uploaded
          P::copy(in_got.data(), in_base, in_used);
          P::copy(out_got.data(), out_base, out_used);
          std::vector<std::uint8_t> result(out_used,
                                           0); // 1: a result, checked against the reference; 2: unspecified
          for (const auto& c : batch) {
            if (!c.refused.empty()) continue;
            const entry<P>& e = *c.e;
            std::size_t off = c.out_off, len = out_elems(e.k, c.a.count, world) * e.elem;
            if (c.in_place && (e.k == ark::collective::reduce_scatter || e.k == ark::collective::scatter)) {
              std::fill(result.begin() + c.out_off, result.begin() + c.out_off + c.out_bytes,
                        std::uint8_t{2});
              off += (e.k == ark::collective::scatter ? c.a.root : rank) * c.a.count * e.elem;
            }
            if (!e.written(c.a)) continue;
            std::fill(result.begin() + off, result.begin() + off + len, std::uint8_t{1});
            std::string first;
            const std::size_t bad = e.wrong(c.a, out_got.data() + off, first);
            res.bytes_checked += static_cast<long>(len);
            if (bad) {
              res.failures.push_back("rank " + std::to_string(rank) + ": " + std::to_string(bad) +
                                     " wrong elements (" + first + ") in " + c.describe());
              failed = true;
            }
          }
          for (std::size_t i = 0; i < out_used && !failed; ++i)
            if (!result[i] && out_got[i] != out_img[i]) {
              res.failures.push_back("rank " + std::to_string(rank) + ": byte " + std::to_string(i) +
                                     " of the output buffer changed outside every call's result");
              failed = true;
            }
          if (std::memcmp(in_got.data(), in_img.data(), in_used) != 0 && !failed) {
            res.failures.push_back("rank " + std::to_string(rank) + ": an input changed");
            failed = true;
          }
        }
        status mine;
        mine.failed = failed;
        mine.stop = std::chrono::steady_clock::now() > deadline;
        link.exchange(mine, all);
        for (const auto& s : all) {
          failed = failed || s.failed;
          stopped = stopped || s.stop;
        }
        if (stopped) break;
      }
      if (failed)
        comm.abort();
      else {
        comm.deregister_buffer(out_mem.ptr);
        comm.deregister_buffer(in_mem.ptr);
      }
    } catch (const std::exception& x) {
      res.failures.push_back("rank " + std::to_string(rank) + ": " + x.what());
      failed = keep_memory = true;
      std::vector<status> all(world);
      status mine;
      mine.failed = 1;
      try {
        link.exchange(mine, all);
      } catch (...) {
      }
    }
    for (auto s : user) {
      P::synchronize(s);
      P::destroy_stream(s);
    }
    if (!keep_memory) {
      P::release(in_mem);
      P::release(out_mem);
    }
    results.push_back(std::move(res));
    if (failed) {
      std::vector<status> all(world);
      link.exchange(status{}, all); // every rank past its communicator before the next one starts
    }
  }
  return results;
}

/// Whether every rank of a world passed: results per rank, each over the configurations.
inline bool passed(const std::vector<std::vector<named_config_result>>& ranks) {
  for (const auto& rk : ranks)
    for (const auto& c : rk)
      if (!c.failures.empty()) return false;
  return true;
}

/// Prints a world's results (rank 0's counts: every rank makes the same calls) and every rank's
/// failures; returns whether the world passed.
inline bool report(const char* platform, const char* mode, int world,
                   const std::vector<std::vector<named_config_result>>& ranks, double seconds) {
  bool ok = true;
  long calls = 0, ran = 0, refused = 0;
  for (std::size_t c = 0; c < ranks[0].size(); ++c) {
    const auto& r = ranks[0][c];
    std::size_t failures = 0;
    for (const auto& rk : ranks)
      if (c < rk.size()) failures += rk[c].failures.size();
    std::string reasons;
    for (const auto& kv : r.refusals)
      reasons += (reasons.empty() ? "" : ", ") + kv.first + " " + std::to_string(kv.second);
    std::printf("soak %s, %s, world %d, %-13s: %6ld calls, %6ld ran, %5ld refused (%s), %ld failures\n",
                platform, mode, world, r.config.c_str(), r.calls, r.ran, r.refused,
                reasons.empty() ? "none" : reasons.c_str(), static_cast<long>(failures));
    calls += r.calls, ran += r.ran, refused += r.refused;
    for (const auto& rk : ranks)
      if (c < rk.size())
        for (const auto& f : rk[c].failures) {
          std::printf("  FAILED: %s\n", f.c_str());
          ok = false;
        }
  }
  std::printf("soak %s, %s, world %d: %ld calls (%ld ran, %ld refused as expected) in %.1f s: %s\n", platform,
              mode, world, calls, ran, refused, seconds, ok ? "passed" : "FAILED");
  std::fflush(stdout);
  return ok;
}

/// The ranks of `world` (as threads) on rank r's device: they share its context.
template <class P>
int device_of(int rank) {
  if constexpr (P::synchronous_launch)
    return rank;
  else {
    const int n = P::device_count();
    return n > 0 ? rank % n : rank;
  }
}

inline void usage() {
  std::fprintf(stderr,
               "ark_soak [--worlds 2,3] [--calls N] [--seconds S] [--seed N] [--max-bytes N] [--processes] "
               "[--configs name,name]\n");
}

inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> v;
  std::size_t at = 0;
  while (at <= s.size()) {
    const std::size_t end = std::min(s.find(',', at), s.size());
    if (end > at) v.push_back(s.substr(at, end - at));
    at = end + 1;
  }
  return v;
}

/// The whole program: every world of --worlds in turn, ranks as threads, or with --processes one
/// process per rank (this program again, with --rank and --socket). Exit 0 when every world
/// passed.
template <class P>
int soak_main(int argc, char** argv, const char* platform) {
  run_options ro;
  std::vector<int> worlds{2};
  bool processes = false;
  int child_rank = -1;
  std::string socket;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--processes") {
      processes = true;
      continue;
    }
    if (!v) return usage(), 64;
    ++i;
    if (a == "--worlds" || a == "--world") {
      worlds.clear();
      for (const auto& w : split_list(v)) worlds.push_back(std::atoi(w.c_str()));
    } else if (a == "--calls")
      ro.calls = std::atol(v);
    else if (a == "--seconds")
      ro.seconds = std::atof(v);
    else if (a == "--seed")
      ro.seed = std::strtoull(v, nullptr, 10);
    else if (a == "--max-bytes")
      ro.max_bytes = std::strtoull(v, nullptr, 10);
    else if (a == "--configs")
      ro.configs = split_list(v);
    else if (a == "--rank")
      child_rank = std::atoi(v);
    else if (a == "--socket")
      socket = v;
    else
      return usage(), 64;
  }
  for (int w : worlds)
    if (w < 1 || w > ark::max_world) return usage(), 64;
  if constexpr (!P::synchronous_launch) {
    if (P::device_count() < 1) {
      std::printf("soak %s: skipped: no GPU visible\n", platform);
      return 0;
    }
    if (child_rank >= 0) { // one rank of --processes
      ro.world = worlds.at(0);
      ark::any_bootstrap status_boot(
          ark::unix_socket_bootstrap(socket + ".s", child_rank, ro.world, std::chrono::seconds(300)));
      rank_link link;
      link.exchange = [&](const status& s, std::vector<status>& all) {
        status_boot.all_gather(&s, all.data(), sizeof s);
      };
      link.bootstrap = [&](int ci) {
        return ark::any_bootstrap(ark::unix_socket_bootstrap(socket + "." + std::to_string(ci), child_rank,
                                                             ro.world, std::chrono::seconds(60)));
      };
      const auto t0 = std::chrono::steady_clock::now();
      const auto mine = run_rank<P>(ro, child_rank, device_of<P>(child_rank), 1, link);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const bool ok = passed({mine});
      if (child_rank == 0 || !ok) report(platform, "one process per rank", ro.world, {mine}, secs);
      return ok ? 0 : 1;
    }
  } else if (processes) {
    std::printf(
        "soak %s: one process per rank needs GPUs (the host platform's ranks share one address space)\n",
        platform);
    return 64;
  }
  bool all_ok = true;
  for (int world : worlds) {
    ro.world = world;
    const auto t0 = std::chrono::steady_clock::now();
    bool ok = true;
    if (processes) {
      const std::string sock = "/tmp/ark-soak-" + std::to_string(::getpid()) + "-" + std::to_string(world);
      std::vector<pid_t> kids;
      for (int r = 0; r < world; ++r) {
        std::vector<std::string> args{argv[0],
                                      "--world",
                                      std::to_string(world),
                                      "--calls",
                                      std::to_string(ro.calls),
                                      "--seconds",
                                      std::to_string(ro.seconds),
                                      "--seed",
                                      std::to_string(ro.seed),
                                      "--max-bytes",
                                      std::to_string(ro.max_bytes),
                                      "--rank",
                                      std::to_string(r),
                                      "--socket",
                                      sock};
        std::string cfgs;
        for (const auto& c : ro.configs) cfgs += (cfgs.empty() ? "" : ",") + c;
        if (!cfgs.empty()) args.insert(args.end(), {"--configs", cfgs});
        std::vector<char*> cargs;
        for (auto& s : args) cargs.push_back(s.data());
        cargs.push_back(nullptr);
        pid_t pid = 0;
        if (::posix_spawn(&pid, argv[0], nullptr, nullptr, cargs.data(), environ) != 0) {
          std::printf("soak: could not start rank %d\n", r);
          ok = false;
          break;
        }
        kids.push_back(pid);
      }
      for (pid_t pid : kids) {
        int st = 0;
        ::waitpid(pid, &st, 0);
        ok = ok && WIFEXITED(st) && WEXITSTATUS(st) == 0;
      }
      std::printf("soak %s, one process per rank, world %d: %s in %.1f s\n", platform, world,
                  ok ? "passed" : "FAILED",
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      std::fflush(stdout);
    } else {
      auto status_group = std::make_shared<ark::in_process_group>(world, std::chrono::seconds(300));
      std::vector<std::shared_ptr<ark::in_process_group>> groups;
      for (std::size_t c = 0; c < configurations<P>(ro).size(); ++c)
        groups.push_back(std::make_shared<ark::in_process_group>(world, std::chrono::seconds(60)));
      std::vector<std::vector<named_config_result>> results(world);
      std::vector<std::thread> threads;
      for (int r = 0; r < world; ++r)
        threads.emplace_back([&, r] {
          ark::in_process_bootstrap status_boot(status_group, r);
          rank_link link;
          link.exchange = [&](const status& s, std::vector<status>& all) {
            status_boot.all_gather(&s, all.data(), sizeof s);
          };
          link.bootstrap = [&](int ci) {
            return ark::any_bootstrap(ark::in_process_bootstrap(groups[ci], r));
          };
          std::size_t sharing = 0;
          for (int q = 0; q < world; ++q) sharing += device_of<P>(q) == device_of<P>(r);
          try {
            results[r] = run_rank<P>(ro, r, device_of<P>(r), sharing, link);
          } catch (const std::exception& x) {
            named_config_result f;
            f.config = "?";
            f.failures.push_back("rank " + std::to_string(r) + ": " + x.what());
            results[r] = {f};
          }
        });
      for (auto& t : threads) t.join();
      ok = report(platform, "ranks as threads", world, results,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    all_ok = all_ok && ok;
  }
  return all_ok ? 0 : 1;
}

} // namespace ark_soak
