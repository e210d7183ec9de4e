// algo::one_step: one-shot's single-step LL path alone (algorithms/one_shot.hpp), named by the
// caller, from the host or inside a kernel; call_plan::one_step says whether a call fits. Checked
// against the reference on random data, mixed with one_shot on the peers (one protocol), and
// refused, on every rank and before anything moves, when a share does not fit one step.
#include "../support/collective_check.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <string>

using namespace ark_test;

namespace {

using ll2 = ark::dma::ll_packet<2>;

/// With small_config(16), a worker holds at most 16 threads x 8 bytes: float 32 elements, fp16
/// 64, uint8 128, double 16 (and one LL slot, 512 bytes).
std::size_t most_per_worker(std::size_t elem_bytes) { return 16 * 8 / elem_bytes; }

/// Every rank's all-reduce of `calls` rounds from inside one launch of `workers` workers: even
/// ranks call A (one_step or a one_step_world), odd ranks one_shot. Each thread 0 records its
/// worker's verdict.
template <class A>
struct mixed_calls {
  ark::device_comm<host> comm;
  int rank;
  const float* in;
  float* out;
  std::size_t n;
  int calls;
  bool* ok;
  template <class G>
  void operator()(G& g, unsigned w, unsigned nw) const {
    bool all = true;
    for (int k = 0; k < calls; ++k) {
      const float* i = in + k * n;
      float* o = out + k * n;
      all = (rank % 2 == 0 ? comm.all_reduce<A, ll2>(g, w, nw, i, o, n)
                           : comm.all_reduce<ark::algo::one_shot, ll2>(g, w, nw, i, o, n)) &&
            all;
    }
    if (g.thread_rank() == 0) ok[w] = all;
  }
};

float input_at(int rank, int call, std::size_t i) {
  return static_cast<float>((rank * 7 + call * 3 + static_cast<int>(i) * 5) % 13 - 6);
}

} // namespace

TEST_CASE_TEMPLATE("one_step: every dtype, op, depth and world, from the host, against the reference", T,
                   float, double, ark::fp16, ark::bf16, std::int32_t, std::int64_t, std::uint8_t) {
  const std::size_t most = most_per_worker(sizeof(T));
  run_matrix<ark::collective::all_reduce, T>(type_list<ark::algo::one_step>{},
                                             all_depths<ark::dma::ll_packet>{}, all_ops{}, small_config(16),
                                             {1, 2, 3, 4, 8}, {0, 1, 7, most - 1, most});
  // the backend left automatic is LL for one_step, whatever select() picks (here thread copies
  // from 16 bytes on)
  auto tc_above_16 = small_config(16);
  tc_above_16.tuning.ll_max_bytes = 16;
  run_matrix<ark::collective::all_reduce, T>(type_list<ark::algo::one_step>{},
                                             type_list<ark::dma::automatic>{}, type_list<ark::op::max>{},
                                             tc_above_16, {2, 3}, {most});
}

/// An automatic all-reduce on three workers (call_options::workers).
template <class T, class Op>
void all_reduce_on_three(comm_t& c, const T* in, T* out, std::size_t count, int) {
  ark::call_options<host> three;
  three.workers = 3;
  c.all_reduce(in, out, count, Op{}, three);
}

// An automatic all-reduce that select() gives to one-shot over LL runs one_step's kernel where
// call_plan::one_step holds (communicator::run) and one_shot's beyond: exact on both sides of the
// limit, with one worker and with three (a share that does not fit would be refused by the kernel).
template <class T, class Ops, class Backends>
void automatic_around_the_limit(Ops ops, Backends backends) {
  const std::size_t most = most_per_worker(sizeof(T));
  run_matrix<ark::collective::all_reduce, T>(type_list<ark::algo::automatic>{}, backends, ops,
                                             small_config(16), {1, 2, 3, 5},
                                             {0, 1, most - 1, most, most + 1, 3 * most + 5});
  ark::call_options<host> three;
  three.workers = 3;
  for (int world : {2, 3}) {
    test_world w(world, small_config(16));
    std::uint64_t seed = 1;
    // three workers hold 3 * most elements in one step each; one element more and one is over
    for (std::size_t count : {3 * most - 1, 3 * most, 3 * most + 1})
      for (bool in_place : {false, true})
        check_collective<ark::collective::all_reduce, T, ark::op::sum, host>(
            w, {count, 0, in_place, seed++}, {&all_reduce_on_three<T, ark::op::sum>, "automatic", 0, 0});
    w.run([&](comm_t& c, int) {
      using ark::collective::all_reduce;
      CHECK(c.plan<all_reduce, ark::algo::automatic, ark::dma::automatic, T>(most).one_step);
      CHECK_FALSE(c.plan<all_reduce, ark::algo::automatic, ark::dma::automatic, T>(most + 1).one_step);
      CHECK(c.plan<all_reduce, ark::algo::automatic, ark::dma::automatic, T>(3 * most, three).one_step);
      CHECK_FALSE(
          c.plan<all_reduce, ark::algo::automatic, ark::dma::automatic, T>(3 * most + 1, three).one_step);
    });
  }
}

TEST_CASE("one_step: an automatic all-reduce on both sides of the one-step limit") {
  automatic_around_the_limit<float>(all_ops{}, type_list<ark::dma::automatic, ll2>{});
  automatic_around_the_limit<ark::fp16>(type_list<ark::op::sum, ark::op::max>{},
                                        type_list<ark::dma::automatic>{});
  automatic_around_the_limit<std::int64_t>(type_list<ark::op::sum>{}, type_list<ark::dma::automatic>{});
}

// Two threads a worker and up to seven peers: each thread writes the headers of several peers.
TEST_CASE("one_step: fewer threads than peers") {
  run_matrix<ark::collective::all_reduce, float>(type_list<ark::algo::one_step>{},
                                                 type_list<ark::dma::ll_packet<2>>{}, all_ops{},
                                                 small_config(2), {4, 8}, {1, 3, 4});
}

namespace {
/// mixed_calls<A> on a team of `world` ranks: three workers, 25 calls from inside one launch.
template <class A>
void mixed_with_one_shot(int world) {
  test_world w(world, small_config(16));
  // 3 workers split 61 floats 20 / 20 / 21 (4-element units): each share takes one step
  const std::size_t n = 61;
  const int calls = 25;
  std::vector<std::vector<float>> outs(world);
  std::vector<std::array<bool, 3>> oks(world);
  w.run([&](comm_t& c, int rank) {
    std::vector<float> in(calls * n + 1);
    outs[rank].assign(calls * n + 1, -100.0f); // poison, and a guard past the end
    for (int k = 0; k < calls; ++k)
      for (std::size_t i = 0; i < n; ++i) in[k * n + i] = input_at(rank, k, i);
    oks[rank] = {false, false, false};
    host::launch(
        c.stream(), ark::launch_shape{3, 16},
        mixed_calls<A>{c.device_handle(), rank, in.data(), outs[rank].data(), n, calls, oks[rank].data()});
    c.synchronize();
  });
  for (int rank = 0; rank < world; ++rank) {
    CAPTURE(world);
    CAPTURE(rank);
    for (bool ok : oks[rank]) CHECK(ok);
    int wrong = 0;
    for (int k = 0; k < calls; ++k)
      for (std::size_t i = 0; i < n; ++i) {
        float want = 0;
        for (int r = 0; r < world; ++r) want += input_at(r, k, i);
        wrong += outs[rank][k * n + i] != want;
      }
    CHECK(wrong == 0);
    CHECK(outs[rank][calls * n] == -100.0f);
  }
}

/// Every rank of w calls A's all-reduce of n floats inside a kernel of one worker: each call must
/// fail on every rank, record an error whose message holds `want`, and leave the output alone.
template <class A>
void refused_on_every_rank(test_world& w, int world, std::size_t n, const std::string& want) {
  std::vector<std::vector<float>> outs(world, std::vector<float>(n, -1.0f));
  std::vector<char> ok(world, 1);
  const auto errs = w.try_run([&](comm_t& c, int rank) {
    std::vector<float> in(n, 1.0f);
    host::launch(c.stream(), ark::launch_shape{1, 16}, [&](auto& g, unsigned wk, unsigned nw) {
      const bool r = c.device_handle().all_reduce<A, ll2>(g, wk, nw, in.data(), outs[rank].data(), n);
      if (g.thread_rank() == 0) ok[rank] = r;
    });
    c.synchronize();
  });
  for (int rank = 0; rank < world; ++rank) {
    CAPTURE(rank);
    CHECK_FALSE(ok[rank]);
    REQUIRE(static_cast<bool>(errs[rank]));
    const std::string msg = message_of<ark::error>([&] { std::rethrow_exception(errs[rank]); });
    CHECK(contains(msg, want));
    for (float v : outs[rank]) CHECK(v == -1.0f);
  }
}
} // namespace

TEST_CASE("one_step: device calls mixed with one_shot on the peers, three workers, worlds 1 to 5, repeated") {
  for (int world : {1, 2, 3, 4, 5}) mixed_with_one_shot<ark::algo::one_step>(world);
}

// algo::one_step_world<N>: the path of N ranks alone, named from the host and inside a kernel,
// mixed with peers on one_shot, and refused on a team of another size.
TEST_CASE_TEMPLATE("one_step_world: named from the host, every op and depth, against the reference", T, float,
                   ark::bf16, std::int64_t) {
  const std::size_t most = most_per_worker(sizeof(T));
  const std::vector<std::size_t> sizes{0, 1, 7, most - 1, most};
  run_matrix<ark::collective::all_reduce, T>(type_list<ark::algo::one_step_world<1>>{}, type_list<ll2>{},
                                             all_ops{}, small_config(16), {1}, sizes);
  run_matrix<ark::collective::all_reduce, T>(type_list<ark::algo::one_step_world<2>>{},
                                             all_depths<ark::dma::ll_packet>{}, all_ops{}, small_config(16),
                                             {2}, sizes);
  run_matrix<ark::collective::all_reduce, T>(type_list<ark::algo::one_step_world<3>>{}, type_list<ll2>{},
                                             all_ops{}, small_config(16), {3}, sizes);
  run_matrix<ark::collective::all_reduce, T>(type_list<ark::algo::one_step_world<4>>{}, type_list<ll2>{},
                                             all_ops{}, small_config(16), {4}, sizes);
  run_matrix<ark::collective::all_reduce, T>(type_list<ark::algo::one_step_world<5>>{},
                                             type_list<ark::dma::automatic>{}, type_list<ark::op::sum>{},
                                             small_config(16), {5}, sizes);
}

TEST_CASE("one_step_world: device calls mixed with one_shot on the peers, three workers, repeated") {
  mixed_with_one_shot<ark::algo::one_step_world<1>>(1);
  mixed_with_one_shot<ark::algo::one_step_world<2>>(2);
  mixed_with_one_shot<ark::algo::one_step_world<3>>(3);
  mixed_with_one_shot<ark::algo::one_step_world<4>>(4);
}

// one_step_world<N> up to four ranks computes its channels before the round is known
// (all_reduce_one_shot_ll's Early) and, with implied credits, stores its headers after its data
// packets. A call whose count differs on one rank, after calls that exchanged packets, is still
// named a mismatch on every rank, at once: at two ranks, and at four with two threads a worker
// (thread 0 writes the headers of the first and third peers after it).
TEST_CASE("one_step_world: a count that differs after exchanged calls is a mismatch on every rank, at once") {
  auto run = [](int world, unsigned threads, auto algo) {
    using A = decltype(algo);
    auto cfg = small_config(threads);
    cfg.timeout = std::chrono::seconds(60);
    test_world w(world, cfg);
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::vector<float>> outs(world);
    const auto errs = w.try_run([&](comm_t& c, int rank) {
      const std::size_t n = 2 * threads; // a vector per thread at most: one step
      std::vector<float> in(n);
      outs[rank].assign(n, -7.0f);
      for (int k = 0; k < 3; ++k) { // exchanged: implied credits, headers after the data
        for (std::size_t i = 0; i < n; ++i) in[i] = input_at(rank, k, i);
        c.all_reduce<A, ll2>(in.data(), outs[rank].data(), n);
        c.synchronize();
        for (std::size_t i = 0; i < n; ++i) {
          float want = 0;
          for (int r = 0; r < world; ++r) want += input_at(r, k, i);
          REQUIRE(outs[rank][i] == want);
        }
      }
      std::fill(outs[rank].begin(), outs[rank].end(), -7.0f);
      c.all_reduce<A, ll2>(in.data(), outs[rank].data(), rank == world - 1 ? n / 2 : n);
      c.synchronize();
    });
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));
    for (int r = 0; r < world; ++r) {
      REQUIRE(errs[r]);
      CHECK_THROWS_AS(std::rethrow_exception(errs[r]), ark::mismatch_error);
      // known before any output is stored
      CHECK(std::all_of(outs[r].begin(), outs[r].end(), [](float v) { return v == -7.0f; }));
    }
  };
  run(2, 16, ark::algo::one_step_world<2>{});
  run(4, 2, ark::algo::one_step_world<4>{});
}

TEST_CASE("one_step_world: a team of another size is refused, from the host before launch, on the device on "
          "every rank") {
  test_world w(3, small_config(16));
  const std::size_t n = 8;
  std::vector<std::string> host_msgs(3);
  std::vector<std::vector<float>> outs(3, std::vector<float>(n, -1.0f));
  w.run([&](comm_t& c, int rank) {
    std::vector<float> in(n, 1.0f);
    host_msgs[rank] = message_of<ark::invalid_argument>(
        [&] { c.all_reduce<ark::algo::one_step_world<2>>(in.data(), outs[rank].data(), n); });
    auto plan_for_four = [&] {
      return c.plan<ark::collective::all_reduce, ark::algo::one_step_world<4>, ll2, float>(n);
    };
    CHECK_THROWS_AS(plan_for_four(), ark::invalid_argument);
    CHECK(c.plan<ark::collective::all_reduce, ark::algo::one_step_world<3>, ll2, float>(n).one_step);
    c.synchronize();
  });
  for (int rank = 0; rank < 3; ++rank) {
    CHECK(contains(host_msgs[rank], "algo::one_step_world<2> runs on a team of 2 ranks; this team has 3"));
    for (float v : outs[rank]) CHECK(v == -1.0f); // nothing ran
  }
  refused_on_every_rank<ark::algo::one_step_world<2>>(
      w, 3, n, "unsupported: algo::one_step_world<2> runs on a team of 2 ranks; this team has 3");
}

TEST_CASE("one_step: call_plan::one_step says whether every worker's share fits one LL step") {
  test_world w(2, small_config(16));
  w.run([](comm_t& c, int) {
    using ark::collective::all_reduce;
    using one_shot = ark::algo::one_shot;
    CHECK(c.plan<all_reduce, one_shot, ll2, float>(32).one_step);
    CHECK_FALSE(c.plan<all_reduce, one_shot, ll2, float>(33).one_step); // one worker: 33 > 32
    CHECK(c.plan<all_reduce, one_shot, ll2, float>(0).one_step);
    CHECK(c.plan<all_reduce, ark::algo::automatic, ark::dma::automatic, double>(16).one_step);
    CHECK_FALSE(c.plan<all_reduce, one_shot, ark::dma::thread_copy<2>, float>(8).one_step);
    CHECK_FALSE(c.plan<all_reduce, ark::algo::two_shot, ll2, float>(8).one_step);
    // three workers of 16 threads: shares up to 32 floats each
    ark::call_options<host> three;
    three.workers = 3;
    CHECK(c.plan<all_reduce, one_shot, ll2, float>(96, three).one_step);
    CHECK_FALSE(c.plan<all_reduce, one_shot, ll2, float>(100, three).one_step);
  });
}

namespace {
/// An LL backend of the caller's own with 16-byte vectors (the concept allows 8 or 16): each
/// vector is two of ll_packet's packets, so its slots are ll_packet's, and one thread holds twice
/// ll_packet's bytes in one step. With small_config(16): 16 threads x 16 bytes, 64 floats. It
/// sends whole vectors on the pipelined path too.
template <unsigned Depth>
struct wide_ll : ark::dma::ll_packet<Depth> {
  using base = ark::dma::ll_packet<Depth>;
  static constexpr std::uint8_t id = 201;
  static constexpr std::size_t vec_bytes = 16;
  template <class P>
  struct writer {
    ark::dma::ll_writer<P> w;
    void store(std::size_t i, const ark::vec<16>& v) const {
      w.store(2 * i, ark::vec<8>{{v.w[0]}});
      w.store(2 * i + 1, ark::vec<8>{{v.w[1]}});
    }
  };
  template <class P>
  struct reader {
    ark::dma::ll_reader<P> r;
    template <class Ctx>
    bool load(const Ctx& ctx, std::size_t i, ark::vec<16>& v) const {
      ark::vec<8> a, b;
      if (!r.load(ctx, 2 * i, a) || !r.load(ctx, 2 * i + 1, b)) return false;
      v.w[0] = a.w[0], v.w[1] = b.w[0];
      return true;
    }
  };
  template <class Ctx>
  static writer<typename Ctx::platform> tx(const Ctx& ctx, int peer, std::uint64_t step) {
    return {base::tx(ctx, peer, step)};
  }
  template <class Ctx>
  static reader<typename Ctx::platform> rx(const Ctx& ctx, int peer, std::uint64_t step) {
    return {base::rx(ctx, peer, step)};
  }
  /// The pipelined path's steps, in 16-byte vectors too: a receiver reads whole vectors.
  template <class Ctx>
  static bool send(const Ctx& ctx, ark::dma::peers ps, std::uint64_t step, const void* src,
                   std::size_t bytes) {
    if (!base::open_send(ctx, ps, step)) return false;
    const auto* s = static_cast<const std::byte*>(src);
    for (std::size_t i = ctx.g.thread_rank(); i < ark::div_up(bytes, vec_bytes); i += ctx.g.size()) {
      const auto v = ark::dma::load_prefix<typename Ctx::platform, vec_bytes>(s + 16 * i, bytes - 16 * i);
      for (int p = 0; p < ctx.world(); ++p)
        if (p != ctx.rank() && (ps.one < 0 || p == ps.one)) tx(ctx, p, step).store(i, v);
    }
    return true;
  }
};
static_assert(ark::dma_backend<wide_ll<2>>);
} // namespace

// The one-step limit follows the named backend's vectors: call_plan::one_step, a named one_step
// (refused on the host when the plan says it does not fit) and an automatic algorithm over it
// agree with the kernel, exact on both sides of 64 floats a worker.
TEST_CASE("one_step: a named LL backend of 16-byte vectors holds twice the elements in one step") {
  using wide = wide_ll<2>;
  const std::size_t most = 16 * 16 / sizeof(float);
  {
    test_world w(2, small_config(16));
    w.run([&](comm_t& c, int) {
      using ark::collective::all_reduce;
      CHECK(c.plan<all_reduce, ark::algo::one_shot, wide, float>(most).one_step);
      CHECK_FALSE(c.plan<all_reduce, ark::algo::one_shot, wide, float>(most + 1).one_step);
      CHECK(c.plan<all_reduce, ark::algo::automatic, wide, float>(most).one_step);
      CHECK_FALSE(c.plan<all_reduce, ark::algo::one_shot, ll2, float>(most).one_step); // 8-byte: 32
    });
  }
  run_matrix<ark::collective::all_reduce, float>(type_list<ark::algo::one_step>{}, type_list<wide>{},
                                                 all_ops{}, small_config(16), {1, 2, 3},
                                                 {0, 1, 33, most - 1, most});
  run_matrix<ark::collective::all_reduce, float>(type_list<ark::algo::automatic, ark::algo::one_shot>{},
                                                 type_list<wide>{}, type_list<ark::op::sum, ark::op::max>{},
                                                 small_config(16), {2, 3},
                                                 {most - 1, most, most + 1, 3 * most + 5});
}

TEST_CASE(
    "one_step: a share larger than one LL step is refused, from the host before launch, on the device on "
    "every rank") {
  test_world w(2, small_config(16));
  const std::size_t n = 33; // one worker: 33 floats, 32 fit
  std::vector<std::string> host_msgs(2);
  std::vector<std::vector<float>> outs(2, std::vector<float>(n, -1.0f));
  w.run([&](comm_t& c, int rank) {
    std::vector<float> in(n, 1.0f);
    host_msgs[rank] = message_of<ark::invalid_argument>(
        [&] { c.all_reduce<ark::algo::one_step>(in.data(), outs[rank].data(), n); });
    c.synchronize();
  });
  for (int rank = 0; rank < 2; ++rank) {
    CHECK(contains(host_msgs[rank], "algo::one_step needs every worker's share to fit one LL step"));
    CHECK(contains(host_msgs[rank], "33 elements in a share of 1 workers, at most 32 fit"));
    for (float v : outs[rank]) CHECK(v == -1.0f); // nothing ran
  }
  refused_on_every_rank<ark::algo::one_step>(
      w, 2, n,
      "unsupported: algo::one_step needs every worker's share to fit one "
      "LL step; worker 0's holds 33 elements, at most 32 fit");
}
