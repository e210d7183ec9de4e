// tests/support/collective_check.hpp: runs one collective on every rank of a test_world, twice
// (outputs poisoned with two different patterns, guard elements past the end), and checks every
// output element of every rank against the reference, that both runs agree bit for bit, that
// all-reduce results are bitwise identical across ranks, and that nothing past the end was written.
#pragma once

#include "harness.hpp"

#include <atomic>
#include <map>
#include <stdexcept>

namespace ark_test {

struct case_params {
  std::size_t count = 0;
  int root = 0;
  bool in_place = false;
  std::uint64_t seed = 1;
  /// the buffers registered with the communicator for the call (at the same place on every
  /// rank), so that zero-copy paths may read them in place
  bool registered = false;
};

inline constexpr std::size_t guard = 16;

template <ark::collective K>
std::size_t in_elems(std::size_t count, int world) {
  return in_elems(K, count, world);
}
template <ark::collective K>
std::size_t out_elems(std::size_t count, int world) {
  return out_elems(K, count, world);
}

/// Calls collective K with algorithm A (ignored where only direct implements K) and backend B.
template <ark::collective K, class A, class B, class T, class Op, class P>
void call(ark::communicator<P>& c, const T* in, T* out, std::size_t count, int root) {
  if constexpr (K == ark::collective::all_reduce)
    c.template all_reduce<A, B>(in, out, count, Op{});
  else if constexpr (K == ark::collective::reduce_scatter)
    c.template reduce_scatter<A, B>(in, out, count, Op{});
  else if constexpr (K == ark::collective::all_gather)
    c.template all_gather<A, B>(in, out, count);
  else if constexpr (K == ark::collective::broadcast)
    c.template broadcast<B>(in, out, count, root);
  else if constexpr (K == ark::collective::all_to_all)
    c.template all_to_all<B>(in, out, count);
  else if constexpr (K == ark::collective::gather)
    c.template gather<B>(in, out, count, root);
  else if constexpr (K == ark::collective::scatter)
    c.template scatter<B>(in, out, count, root);
  else
    c.template reduce<B>(in, out, count, root, Op{});
}

/// The element `out[i]` of rank `rank` must equal: returns the contributions to reduce (one
/// element: a copy) in rank order, or an empty vector if the element is unspecified.
template <ark::collective K, class T, class Op>
std::vector<T> expected_inputs(const case_params& p, int world, int rank, std::size_t i) {
  std::vector<T> v;
  switch (K) {
  case ark::collective::all_reduce:
    for (int r = 0; r < world; ++r) v.push_back(input<T, Op>(p.seed, r, i));
    break;
  case ark::collective::reduce_scatter:
    for (int r = 0; r < world; ++r) v.push_back(input<T, Op>(p.seed, r, rank * p.count + i));
    break;
  case ark::collective::all_gather:
    v.push_back(input<T, Op>(p.seed, static_cast<int>(i / p.count), i % p.count));
    break;
  case ark::collective::broadcast:
    v.push_back(input<T, Op>(p.seed, p.root, i));
    break;
  case ark::collective::all_to_all: // block q: block `rank` of rank q's input
    v.push_back(input<T, Op>(p.seed, static_cast<int>(i / p.count), rank * p.count + i % p.count));
    break;
  case ark::collective::gather: // the root's block q: rank q's input
    if (rank == p.root) v.push_back(input<T, Op>(p.seed, static_cast<int>(i / p.count), i % p.count));
    break;
  case ark::collective::scatter: // block `rank` of the root's input
    v.push_back(input<T, Op>(p.seed, p.root, rank * p.count + i));
    break;
  default:
    if (rank == p.root)
      for (int r = 0; r < world; ++r) v.push_back(input<T, Op>(p.seed, r, i));
  }
  return v;
}

/// What one case calls: collective K with a given algorithm and backend.
template <class T, class P = host>
struct callee {
  void (*fn)(ark::communicator<P>&, const T*, T*, std::size_t, int);
  const char* algorithm;
  int backend;
  unsigned depth;
};

template <ark::collective K, class A, class B, class T, class Op, class P = host>
callee<T, P> make_callee() {
  return {&call<K, A, B, T, Op, P>, A::name, B::id, B::depth};
}

/// Device memory a rank's thread keeps for reuse instead of freeing it: freeing GPU memory waits
/// for every kernel on that GPU, and a rank whose GPU a peer shares would wait there for the
/// peer's next call, which waits for this rank. Freed when the thread ends (the world's end).
template <class P>
struct memory_cache {
  std::multimap<std::pair<std::size_t, int>, typename P::memory> spare; // by (bytes, device)
  ~memory_cache() {
    for (auto& kv : spare) P::release(kv.second);
  }
  typename P::memory take(std::size_t bytes, int device) {
    const auto it = spare.find({bytes, device});
    if (it == spare.end()) return P::allocate(bytes, device);
    const auto m = it->second;
    spare.erase(it);
    return m;
  }
  void give(const typename P::memory& m) { spare.insert({{m.bytes, m.device}, m}); }
};

/// Buffers in the platform's memory on rank `rank`'s device, for one call: the input and the
/// (poisoned) output are copied in, the output copied back, so the same check serves host and GPU
/// ranks. GPU memory is reused by the rank's thread, never freed while the world runs.
template <class P>
struct platform_buffer {
  static constexpr bool reuse = !std::is_same_v<P, host>;
  typename P::memory mem;
  platform_buffer(std::size_t bytes, int rank) {
    if constexpr (reuse)
      mem = cache().take(bytes + 64, rank_device<P>(rank));
    else
      mem = P::allocate(bytes + 64, rank_device<P>(rank));
  }
  ~platform_buffer() {
    if constexpr (reuse)
      cache().give(mem);
    else
      P::release(mem);
  }
  platform_buffer(const platform_buffer&) = delete;
  platform_buffer& operator=(const platform_buffer&) = delete;
  template <class T>
  T* as() const {
    return reinterpret_cast<T*>(mem.ptr);
  }
  static memory_cache<P>& cache() {
    thread_local memory_cache<P> c;
    return c;
  }
};

/// A buffer registered with a communicator for a scope (when `on`): collective, like the call.
template <class P>
struct registered_while {
  ark::communicator<P>* c = nullptr;
  void* p = nullptr;
  registered_while(ark::communicator<P>& comm, bool on, const platform_buffer<P>& b) {
    if (!on || b.mem.bytes == 0) return;
    comm.register_buffer(b.mem.ptr, b.mem.bytes);
    c = &comm, p = b.mem.ptr;
  }
  ~registered_while() {
    if (c) c->deregister_buffer(p);
  }
  registered_while(const registered_while&) = delete;
  registered_while& operator=(const registered_while&) = delete;
};

/// In place, the output is a block of the input: what follows it is input, not a guard.
template <ark::collective K>
inline constexpr bool input_after_output =
    K == ark::collective::reduce_scatter || K == ark::collective::scatter;

/// Checks one case; templated on what the check depends on only, so that each (algorithm,
/// backend) pair adds nothing but its own call to the build.
template <ark::collective K, class T, class Op, class P>
void check_collective(basic_world<P>& w, const case_params& p, const callee<T, P>& f) {
  const int world = w.size();
  const std::size_t nin = in_elems<K>(p.count, world), nout = out_elems<K>(p.count, world);
  std::vector<std::vector<T>> runs[2];
  runs[0].resize(world), runs[1].resize(world);
  w.run([&](ark::communicator<P>& c, int rank) {
    for (int run = 0; run < 2; ++run) {
      const unsigned char pattern = run ? 0x5a : 0xff;
      std::vector<T> in(nin), out(nout + guard);
      for (std::size_t i = 0; i < nin; ++i) in[i] = input<T, Op>(p.seed, rank, i);
      poison(out, pattern);
      if (!p.in_place) {
        platform_buffer<P> din(nin * sizeof(T), rank), dout(out.size() * sizeof(T), rank);
        P::copy(din.template as<T>(), in.data(), nin * sizeof(T));
        P::copy(dout.template as<T>(), out.data(), out.size() * sizeof(T));
        const registered_while reg_in(c, p.registered, din), reg_out(c, p.registered, dout);
        f.fn(c, din.template as<T>(), dout.template as<T>(), p.count, p.root);
        c.synchronize();
        P::copy(out.data(), dout.template as<T>(), out.size() * sizeof(T));
      } else {
        // one buffer: the input sits where the collective reads it in place
        std::vector<T> buf(std::max(nin, nout) + guard);
        poison(buf, pattern);
        std::size_t in_off = 0, out_off = 0;
        if (K == ark::collective::reduce_scatter) out_off = rank * p.count;
        if (K == ark::collective::scatter) out_off = p.root * p.count; // every rank's out at the root's block
        if (K == ark::collective::all_gather || K == ark::collective::gather) in_off = rank * p.count;
        if ((K != ark::collective::broadcast && K != ark::collective::scatter) || rank == p.root)
          std::copy(in.begin(), in.end(), buf.begin() + in_off);
        platform_buffer<P> dbuf(buf.size() * sizeof(T), rank);
        T* d = dbuf.template as<T>();
        P::copy(d, buf.data(), buf.size() * sizeof(T));
        const registered_while reg(c, p.registered, dbuf);
        f.fn(c, d + in_off, d + out_off, p.count, p.root);
        c.synchronize();
        P::copy(buf.data(), d, buf.size() * sizeof(T));
        std::copy(buf.begin() + out_off, buf.begin() + out_off + nout, out.begin());
        // the guard is what follows the output in the same buffer
        std::copy(buf.begin() + out_off + nout, buf.begin() + out_off + nout + guard, out.begin() + nout);
        if (input_after_output<K>) { // elements past this rank's block hold input
          for (std::size_t g = 0; g < guard; ++g) std::memset(&out[nout + g], pattern, sizeof(T));
        }
      }
      runs[run][rank] = std::move(out);
    }
  });
  std::vector<std::string> failures;
  auto fail = [&](const std::string& s) {
    if (failures.size() < 5) failures.push_back(s);
  };
  std::vector<unsigned char> guard_bytes[2];
  for (int run = 0; run < 2; ++run) guard_bytes[run].assign(guard * sizeof(T), run ? 0x5a : 0xff);
  for (int rank = 0; rank < world; ++rank) {
    for (int run = 0; run < 2; ++run) {
      const auto& out = runs[run][rank];
      if (!(p.in_place && input_after_output<K>)&&std::memcmp(out.data() + nout, guard_bytes[run].data(),
                                                              guard * sizeof(T)) != 0)
        fail("rank " + std::to_string(rank) + ": wrote past the end of the output");
    }
    if (K == ark::collective::gather && rank != p.root && !p.in_place) // not the root's: never written
      for (int run = 0; run < 2; ++run)
        for (std::size_t i = 0; i < nout; ++i)
          if (reinterpret_cast<const unsigned char*>(&runs[run][rank][i])[0] != (run ? 0x5a : 0xff)) {
            fail("rank " + std::to_string(rank) + ": wrote into the output of a gather to another root");
            break;
          }
    for (std::size_t i = 0; i < nout; ++i) {
      const std::vector<T> vals = expected_inputs<K, T, Op>(p, world, rank, i);
      if (vals.empty()) continue;
      for (int run = 0; run < 2; ++run) {
        const T got = runs[run][rank][i];
        bool ok;
        std::string want;
        if (vals.size() == 1 && K != ark::collective::all_reduce && K != ark::collective::reduce_scatter &&
            K != ark::collective::reduce) {
          ok = std::memcmp(&got, &vals[0], sizeof(T)) == 0;
          want = show(vals[0]);
        } else {
          const auto ref = reduce_reference<T, Op>(vals);
          ok = matches(got, ref, world);
          want = is_float<T> && !std::is_same_v<Op, ark::op::min> && !std::is_same_v<Op, ark::op::max>
                     ? std::to_string(ref.value)
                     : show(ref.exact);
        }
        if (!ok)
          fail("rank " + std::to_string(rank) + " run " + std::to_string(run) + " element " +
               std::to_string(i) + ": got " + show(got) + ", want " + want);
      }
      if (std::memcmp(&runs[0][rank][i], &runs[1][rank][i], sizeof(T)) != 0)
        fail("rank " + std::to_string(rank) + " element " + std::to_string(i) + ": two runs differ bitwise");
      if (K == ark::collective::all_reduce && rank > 0 &&
          std::memcmp(&runs[0][rank][i], &runs[0][0][i], sizeof(T)) != 0)
        fail("element " + std::to_string(i) + ": ranks 0 and " + std::to_string(rank) + " differ bitwise");
    }
  }
  INFO(ark::to_string(K), " ", f.algorithm, " backend ", f.backend, " depth ", f.depth, " ",
       ark::dtype_traits<T>::name, " op ", int(ark::op_id<Op>), " world ", world, " count ", p.count,
       p.in_place ? " in place" : "", " root ", p.root);
  CHECK_MESSAGE(failures.empty(), (failures.empty() ? std::string() : failures[0]));
}

/// Sizes every matrix covers: zero, one, odd, not a multiple of a slot, several slots.
inline const std::vector<std::size_t>& matrix_sizes() {
  static const std::vector<std::size_t> sizes{0, 1, 7, 67, 1000, 3001};
  return sizes;
}

inline const std::vector<int>& matrix_worlds() {
  static const std::vector<int> worlds{1, 2, 3, 4, 8};
  return worlds;
}

template <class... Ts>
struct type_list {};

/// Calls f(Ts{}) for each type.
template <class... Ts, class F>
void for_each_type(type_list<Ts...>, F&& f) {
  (f(Ts{}), ...);
}

using all_ops = type_list<ark::op::sum, ark::op::prod, ark::op::min, ark::op::max, ark::op::avg>;

template <template <unsigned> class B>
using all_depths = type_list<B<1>, B<2>, B<4>, B<8>>;

} // namespace ark_test

namespace ark_test {

/// Every world x algorithm x backend x op x size (in place and not) of collective K for type T.
template <ark::collective K, class T, class P = host, class Algos, class Backends, class Ops>
void run_matrix(Algos algos, Backends backends, Ops ops,
                typename ark::communicator<P>::config cfg = small_config<P>(),
                const std::vector<int>& worlds = matrix_worlds(),
                const std::vector<std::size_t>& sizes = matrix_sizes(), bool registered = false) {
  for (int world : worlds) {
    basic_world<P> w(world, cfg);
    for_each_type(algos, [&](auto a) {
      for_each_type(backends, [&](auto b) {
        for_each_type(ops, [&](auto op) {
          std::uint64_t seed = 1;
          for (std::size_t count : sizes)
            for (bool in_place : {false, true})
              if (!in_place || K != ark::collective::all_to_all) // all-to-all has no in-place form
                check_collective<K, T, decltype(op), P>(
                    w, {count, static_cast<int>(count % world), in_place, seed++, registered},
                    make_callee<K, decltype(a), decltype(b), T, decltype(op), P>());
        });
      });
    });
  }
}

/// Rank 0 calls the copy-engine all-reduce alone and times out; rank 1 calls only once rank 0's
/// call has ended. The flags rank 0 wrote before its waits failed are there; none after them may
/// be: rank 1 must time out too, not finish. (On GPUs rank 0's streams move on past the waits
/// that failed, and its copies behind them still land in rank 1's buffers: a call of rank 1 that
/// finished would hold a mix of data from rank 0's call and garbage.) Many rounds per call.
/// Each rank keeps its buffers until the other's call ended: a failed rank's copies still land.
template <class P>
void ce_all_reduce_late_peer(typename ark::communicator<P>::config cfg) {
  using namespace std::chrono_literals;
  cfg.ce_chunk_bytes = 4096;
  basic_world<P> w(2, cfg);
  std::atomic<int> ended{0}; // calls that ended: rank 0's first, then rank 1's
  std::chrono::milliseconds took[2]{};
  const auto errs = w.try_run([&](ark::communicator<P>& c, int rank) {
    const std::size_t n = std::size_t{1} << 16;
    platform_buffer<P> in(n * sizeof(float), rank), out(n * sizeof(float), rank);
    const std::vector<float> v(n, static_cast<float>(rank + 1));
    P::copy(in.template as<float>(), v.data(), n * sizeof(float));
    c.register_buffer(out.mem.ptr, n * sizeof(float));
    // both waits bounded: a rank that throws before its call must not hang the other
    auto wait_for = [&](int calls) {
      for (int i = 0; i < 30000 && ended.load() < calls; ++i) std::this_thread::sleep_for(1ms);
    };
    struct call_ended { // however it ended; then the buffers stay until both calls did
      std::atomic<int>& e;
      decltype(wait_for)& wait;
      ~call_ended() {
        e.fetch_add(1);
        wait(2);
      }
    };
    if (rank == 1) wait_for(1);
    if (ended.load() != rank) throw std::runtime_error("rank 0's call did not end within 30 s");
    const call_ended at_exit{ended, wait_for};
    ark::call_options<P> o;
    o.timeout = 300ms;
    time_until_throw(took[rank], [&] {
      c.template all_reduce<ark::algo::automatic, ark::dma::copy_engine>(
          in.template as<float>(), out.template as<float>(), n, ark::op::sum{}, o);
      c.synchronize();
    });
  });
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    REQUIRE(errs[r]);
    CHECK_THROWS_AS(std::rethrow_exception(errs[r]), ark::timeout_error);
    CHECK(took[r] >= 300ms);
    CHECK(took[r] < 3000ms);
  }
}

} // namespace ark_test
