// ark/hierarchy/communicator.hpp: collectives over several nodes. Inside a node ark's own
// communicator moves the data (its transports, over the node-local team); between nodes an
// inter-node engine (internode/engine.hpp: MPI, or any model) carries each rail's share: rail l
// is local rank l of every node, so every rank talks across nodes, each for its own part.
//
//   auto group = std::make_shared<ark::in_process_group>(4);  // or mpi_bootstrap, unix sockets
//   ark::hierarchical_communicator<ark::platform::host, ark::bootstrap_engine> comm(
//       ark::in_process_bootstrap(group, rank));
//   comm.all_reduce(in, out, count);
//
// Built collectively from one bootstrap that can split (splittable_bootstrap): the ranks learn
// their nodes (hierarchy/nodes.hpp), split off the node's bootstrap (for ark's communicator) and
// the rail's (for the engine, made by `make_engine(rail bootstrap)`, by default E(rail)). Every
// node holds the same number L of ranks, N nodes in all (learn_nodes refuses others).
//
// The algorithms (L > 1 and N > 1; one node is ark's communicator alone, one rank a node the
// engine alone):
//   all-reduce      local reduce-scatter into the rank's shard of out (1/L of the data), the
//                   rail's all-reduce of that shard, local all-gather of the shards; the count's
//                   last count % L elements: a local all-reduce, then each rail's engine
//   reduce-scatter  in's blocks reordered in scratch by rail ([local][node]), local
//                   reduce-scatter of the rails' columns, the rail's reduce-scatter of the column
//   all-gather      the rail's all-gather (the rank's block from every node), local all-gather of
//                   the columns, the blocks put in rank order
//   broadcast       the root's rail from the root's node, then every node from its rank on it
//   reduce          every node to its rank on the root's rail, then that rail's reduce to the root
//   all-to-all      in's blocks sorted by destination local rank ([local][node]), a local
//                   all-to-all (each rank gets what its node sends to its rail), sorted by
//                   destination node, the rail's all-to-all, the blocks put in sender order
// A sum or an average crosses nodes as a sum; an average is divided once, at the end, by the
// job's world (as one communicator over every rank divides). Reduce-scatter, all-gather, reduce
// and all-to-all go through `scratch_bytes` of scratch, in chunks that fit it.
//
// Memory: an internode_engine takes host memory. On the host platform it reads the buffers
// themselves, and a chunk's steps run one after the other. On a GPU every collective runs in
// chunks through pinned staging (two slots of scratch_bytes), pipelined: the next chunk's
// node-local steps and its copy to the host run on the GPU while the engine works on this one
// (run_chunks). An engine that takes device memory (internode/engine.hpp: a GPU-aware MPI) gets
// the same two slots in the platform's memory instead, on every platform, and the same pipeline;
// it is given only those slots, never the caller's buffers, since a call of it that timed out
// keeps its buffers (the slots are then never freed), and the communicator divides averages on
// the GPU itself. A stream_engine (NCCL's) gets the buffers themselves and the call's stream:
// nothing is staged and nothing waits on the host.
#pragma once

#include "ark/communicator/communicator.hpp"
#include "ark/hierarchy/nodes.hpp"
#include "ark/internode/engine.hpp"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace ark {

namespace detail {
/// p[i] /= by for i < n, in T's accumulation type (as the engines divide an average): the work of a
/// launch, a grid-stride loop over every thread of every worker.
template <class T>
struct divide_elements {
  T* p;
  std::size_t n;
  std::uint32_t by;
  ARK_HD void at(std::size_t i) const { p[i] = from_acc<T>(to_acc(p[i]) / static_cast<acc_t<T>>(by)); }
  template <class G>
  ARK_HD void operator()(const G& g, unsigned worker, unsigned workers) const {
    const std::size_t stride = std::size_t(workers) * g.size();
    for (std::size_t i = std::size_t(worker) * g.size() + g.thread_rank(); i < n; i += stride) at(i);
  }
};
} // namespace detail

template <device P, class E>
requires internode_engine<E> || stream_engine<E, P>
class hierarchical_communicator {
public:
  struct config {
    communicator_config<P> local{}; ///< the node-local communicator's (device, timeout, ...)
    node_options nodes = node_options::from_env();
    /// Scratch of reduce-scatter, all-gather and reduce: larger calls run in chunks that fit.
    std::size_t scratch_bytes = std::size_t(8) << 20; ///< at least 256, and 16 bytes a rank
  };

  /// Collective over the bootstrap's ranks; make_engine(rail bootstrap) makes the engine.
  template <splittable_bootstrap Boot, class MakeEngine>
  requires std::is_invocable_r_v<E, MakeEngine&, Boot>
  hierarchical_communicator(Boot boot, MakeEngine make_engine, config cfg = {})
      : map_(learn_nodes(boot, cfg.nodes)), scratch_bytes_(cfg.scratch_bytes) {
    check_scratch();
    local_.emplace(boot.split(map_.node, map_.local_rank), cfg.local);
    if (map_.nodes > 1) engine_.emplace(make_engine(boot.split(map_.local_rank, map_.node)));
    scratch_ = P::allocate(cfg.scratch_bytes, cfg.local.device);
    make_staging(cfg.local.device);
  }
  template <splittable_bootstrap Boot>
  requires std::is_constructible_v<E, Boot>
  explicit hierarchical_communicator(Boot boot, config cfg = {})
      : hierarchical_communicator(
            std::move(boot), [](Boot b) { return E(std::move(b)); }, std::move(cfg)) {}

  /// From parts the caller made: the layout, the node's bootstrap (over its local_size ranks,
  /// ranked by local rank) and, with several nodes, the rail's engine (ranked by node). For jobs
  /// whose layout is known in advance, e.g. a process per node whose ranks are its threads: the
  /// node's bootstrap in_process, each thread's engine on an MPI communicator of its own.
  /// Collective over the node's ranks.
  template <bootstrap LocalBoot>
  hierarchical_communicator(node_map layout, LocalBoot local, std::optional<E> engine, config cfg = {})
      : map_(std::move(layout)), scratch_bytes_(cfg.scratch_bytes) {
    check_scratch();
    if (local.size() != map_.local_size || local.rank() != map_.local_rank)
      detail::throw_invalid("hierarchical_communicator", "the node's bootstrap is not the layout's node");
    if (map_.nodes > 1 && (!engine || engine->size() != map_.nodes || engine->rank() != map_.node))
      detail::throw_invalid("hierarchical_communicator", "the engine is not the layout's rail");
    local_.emplace(std::move(local), cfg.local);
    if (map_.nodes > 1) engine_ = std::move(engine);
    scratch_ = P::allocate(cfg.scratch_bytes, cfg.local.device);
    make_staging(cfg.local.device);
  }

  hierarchical_communicator(const hierarchical_communicator&) = delete;
  hierarchical_communicator& operator=(const hierarchical_communicator&) = delete;
  ~hierarchical_communicator() {
    if (scratch_.ptr) P::release(scratch_);
    if (device_stage_.ptr && !engine_timed_out_) P::release(device_stage_); // else the engine keeps it
    if constexpr (staged) P::release_pinned(stage_);
    if constexpr (!P::synchronous_launch)
      if (events_[0]) P::destroy_event(events_[0]), P::destroy_event(events_[1]);
  }

  int rank() const { return map_.rank; }
  int world() const { return map_.world; }
  const node_map& nodes() const { return map_; }
  /// The node-local communicator (ark's transports), for calls that stay in the node.
  communicator<P>& local() { return *local_; }
  /// The rail's engine; null with one node.
  E* engine() { return engine_ ? &*engine_ : nullptr; }

  /// out[i] = in[i] reduced over every rank of every node. In place when in == out.
  template <element T, class Op = op::sum>
  void all_reduce(const T* in, T* out, std::size_t count, Op op = {}, const call_options<P>& o = {}) {
    const char* call = "hierarchical all_reduce";
    const engine_reduction r = to_engine(op, call);
    check_buffers(call, count, in, count, out, count, in == out);
    const auto lop = local_op(op);
    if (map_.nodes == 1) return local_->all_reduce(in, out, count, op, o);
    const std::size_t L = static_cast<std::size_t>(map_.local_size),
                      me = static_cast<std::size_t>(map_.local_rank), c = count / L, done = c * L;
    // chunk j of the shards: an all-reduce of its own over [at * L, + m * L), the rank's shard m
    const auto ch = chunks(c, 0, 2 * sizeof(T));
    auto shard = [&](std::size_t j) { return out + ch[j].at * L + me * ch[j].m; };
    run_chunks(
        ch.size(), o,
        [&](std::size_t j) {
          const std::size_t at = ch[j].at, bytes = ch[j].m * sizeof(T);
          if (L == 1) return crossing{in + at, out + at, bytes, bytes};
          local_->reduce_scatter(in + at * L, shard(j), ch[j].m, lop, o);
          return crossing{shard(j), shard(j), bytes, bytes};
        },
        [&](std::size_t j, const void* a, void* b, auto... st) {
          engine_->all_reduce(a, b, ch[j].m, dtype_of<T>, engine_op(r), st...);
          divide<T>(b, ch[j].m, r, o);
        },
        [&](std::size_t j) {
          if (L > 1) local_->all_gather(shard(j), out + ch[j].at * L, ch[j].m, o);
        });
    if (done < count) { // fewer than L elements: reduced in the node, then by every rail alike
      const std::size_t n = count - done;
      once(
          o,
          [&] {
            local_->all_reduce(in + done, out + done, n, lop, o);
            return crossing{out + done, out + done, n * sizeof(T), n * sizeof(T)};
          },
          [&](const void* a, void* b, auto... st) {
            engine_->all_reduce(a, b, n, dtype_of<T>, engine_op(r), st...);
            divide<T>(b, n, r, o);
          });
    }
  }

  /// in: world() blocks of `count`; out (count elements) = block rank() reduced over every rank.
  /// In place when out == in + rank() * count.
  template <element T, class Op = op::sum>
  void reduce_scatter(const T* in, T* out, std::size_t count, Op op = {}, const call_options<P>& o = {}) {
    const char* call = "hierarchical reduce_scatter";
    const engine_reduction r = to_engine(op, call);
    const std::size_t W = static_cast<std::size_t>(world());
    check_buffers(call, count, in, count * W, out, count, out == in + rank() * count);
    if (map_.nodes == 1) return local_->reduce_scatter(in, out, count, op, o);
    const std::size_t N = static_cast<std::size_t>(map_.nodes), L = static_cast<std::size_t>(map_.local_size);
    if (L == 1 && !through_staging()) // nodes in rank order, one rank each: the engine alone, on the buffers
      return once(
          o,
          [&] {
            return crossing{in, out, count * W * sizeof(T), count * sizeof(T)};
          },
          [&](const void* a, void* b, auto... st) {
            engine_->reduce_scatter(a, b, count, dtype_of<T>, r, st...);
          });
    const auto lop = local_op(op);
    T* s = scratch<T>();
    const auto ch = chunks(count, W * sizeof(T), (N + 1) * sizeof(T));
    run_chunks(
        ch.size(), o,
        [&](std::size_t j) {
          const std::size_t at = ch[j].at, m = ch[j].m;
          by_rail(s, in, count, at, m, o); // local rank l keeps column l
          T* column = s + static_cast<std::size_t>(map_.local_rank) * N * m;
          if (L > 1) local_->reduce_scatter(s, column, N * m, lop, o);
          return crossing{column, out + at, N * m * sizeof(T), m * sizeof(T)};
        },
        [&](std::size_t j, const void* a, void* b, auto... st) {
          engine_->reduce_scatter(a, b, ch[j].m, dtype_of<T>, engine_op(r), st...);
          divide<T>(b, ch[j].m, r, o);
        },
        [](std::size_t) {});
  }

  /// out (world() blocks of `count`): block q = rank q's in. In place when in == out + rank() * count.
  template <element T>
  void all_gather(const T* in, T* out, std::size_t count, const call_options<P>& o = {}) {
    const char* call = "hierarchical all_gather";
    const std::size_t W = static_cast<std::size_t>(world());
    check_buffers(call, count, in, count, out, count * W, in == out + rank() * count);
    if (map_.nodes == 1) return local_->all_gather(in, out, count, o);
    const std::size_t N = static_cast<std::size_t>(map_.nodes), L = static_cast<std::size_t>(map_.local_size);
    if (L == 1 && !through_staging())
      return once(
          o,
          [&] {
            return crossing{in, out, count * sizeof(T), count * W * sizeof(T)};
          },
          [&](const void* a, void* b, auto... st) { engine_->all_gather(a, b, count * sizeof(T), st...); });
    T* s = scratch<T>();
    const auto ch = chunks(count, W * sizeof(T), (N + 1) * sizeof(T));
    auto column = [&](std::size_t j) { return s + static_cast<std::size_t>(map_.local_rank) * N * ch[j].m; };
    run_chunks(
        ch.size(), o,
        [&](std::size_t j) { // the rail's all-gather: the rank's chunk from every node, [node n][m]
          return crossing{in + ch[j].at, column(j), ch[j].m * sizeof(T), N * ch[j].m * sizeof(T)};
        },
        [&](std::size_t j, const void* a, void* b, auto... st) {
          engine_->all_gather(a, b, ch[j].m * sizeof(T), st...);
        },
        [&](std::size_t j) {
          if (L > 1) local_->all_gather(column(j), s, N * ch[j].m, o); // s = [local l][node n][m]
          by_rank(out, s, count, ch[j].at, ch[j].m, false, o);
        });
  }

  /// out = root's in on every rank (root's out too, unless in == out).
  template <element T>
  void broadcast(const T* in, T* out, std::size_t count, int root, const call_options<P>& o = {}) {
    const char* call = "hierarchical broadcast";
    detail::check_root(call, root, world());
    check_buffers(call, count, rank() == root ? in : out, count, out, count, true);
    if (map_.nodes == 1) return local_->broadcast(in, out, count, map_.local_of[root], o);
    const int root_node = map_.node_of[root], root_local = map_.local_of[root];
    const bool mine = rank() == root;
    const auto ch = chunks(count, 0, 2 * sizeof(T));
    run_chunks(
        ch.size(), o,
        [&](std::size_t j) { // the root's rail from the root's node
          const std::size_t at = ch[j].at, bytes = ch[j].m * sizeof(T);
          return crossing{(mine ? in : out) + at, out + at, mine ? bytes : 0, bytes,
                          map_.local_rank == root_local};
        },
        [&](std::size_t j, const void* a, void* b, auto... st) {
          engine_->broadcast(a, b, ch[j].m * sizeof(T), root_node, st...);
        },
        [&](std::size_t j) { // then every node from its rank on that rail
          if (map_.local_size > 1) local_->broadcast(out + ch[j].at, out + ch[j].at, ch[j].m, root_local, o);
        });
  }

  /// root's out = in reduced over every rank. Other ranks' out is not used (may be null).
  template <element T, class Op = op::sum>
  void reduce(const T* in, T* out, std::size_t count, int root, Op op = {}, const call_options<P>& o = {}) {
    const char* call = "hierarchical reduce";
    const engine_reduction r = to_engine(op, call);
    detail::check_root(call, root, world());
    check_buffers(call, count, in, count, rank() == root ? out : nullptr, rank() == root ? count : 0, true);
    if (map_.nodes == 1) return local_->reduce(in, out, count, map_.local_of[root], op, o);
    const int root_node = map_.node_of[root], root_local = map_.local_of[root];
    const bool mine = rank() == root;
    const auto lop = local_op(op);
    T* s = scratch<T>();
    const auto ch = chunks(count, sizeof(T), 2 * sizeof(T));
    run_chunks(
        ch.size(), o,
        [&](std::size_t j) { // the node's partial, in scratch on its rank on the root's rail
          const std::size_t at = ch[j].at, m = ch[j].m;
          const T* partial = in + at;
          if (map_.local_size > 1) {
            local_->reduce(in + at, s, m, root_local, lop, o);
            partial = s;
          }
          return crossing{partial, mine ? out + at : s, m * sizeof(T), mine ? m * sizeof(T) : 0,
                          map_.local_rank == root_local};
        },
        [&](std::size_t j, const void* a, void* b, auto... st) { // then that rail's reduce to the root
          engine_->reduce(a, b, ch[j].m, dtype_of<T>, engine_op(r), root_node, st...);
          if (mine) divide<T>(b, ch[j].m, r, o);
        },
        [](std::size_t) {});
  }

  /// in, out: world() blocks of `count`; block q of in goes to rank q, where it lands as block
  /// rank() of out. Not in place.
  template <element T>
  void all_to_all(const T* in, T* out, std::size_t count, const call_options<P>& o = {}) {
    const char* call = "hierarchical all_to_all";
    const std::size_t W = static_cast<std::size_t>(world());
    check_buffers(call, count, in, count * W, out, count * W, false);
    if (map_.nodes == 1) return local_->all_to_all(in, out, count, o);
    const std::size_t N = static_cast<std::size_t>(map_.nodes), L = static_cast<std::size_t>(map_.local_size);
    if (L == 1 && !through_staging()) // nodes in rank order, one rank each: the engine alone
      return once(
          o,
          [&] {
            return crossing{in, out, count * W * sizeof(T), count * W * sizeof(T)};
          },
          [&](const void* a, void* b, auto... st) { engine_->all_to_all(a, b, count * sizeof(T), st...); });
    T* s = scratch<T>();
    const auto ch = chunks(count, 2 * W * sizeof(T), 2 * W * sizeof(T));
    auto rows = [&](std::size_t j) { return s + W * ch[j].m; };
    run_chunks(
        ch.size(), o,
        [&](std::size_t j) {
          const std::size_t m = ch[j].m;
          T* r = rows(j);
          by_rail(s, in, count, ch[j].at, m, o); // the chunks of the blocks for each rank (n, l)
          if (L > 1) {
            // r = [sender's local l][node n][m]: what this node sends to rank (n, my local rank)
            local_->all_to_all(s, r, N * m, o);
            // s = [node n][sender's local l][m]: what goes to node n on this rail
            for (std::size_t n = 0; n < N; ++n)
              for (std::size_t l = 0; l < L; ++l)
                P::copy_async(s + (n * L + l) * m, r + (l * N + n) * m, m * sizeof(T), stream_of(o));
          }
          return crossing{s, r, W * m * sizeof(T), W * m * sizeof(T)};
        },
        [&](std::size_t j, const void* a, void* b, auto... st) {
          engine_->all_to_all(a, b, L * ch[j].m * sizeof(T), st...);
        },
        [&](std::size_t j) { // r = [sender's node n][sender's local l][m]
          by_rank(out, rows(j), count, ch[j].at, ch[j].m, true, o);
        });
  }

private:
  /// Whether the engine's steps go through host memory while launches are asynchronous (a GPU
  /// and an engine on host memory): then they go through the pinned staging, pipelined.
  static constexpr bool staged = !P::synchronous_launch && !stream_engine<E, P>;
  /// Whether the crossings go through the two staging slots: staged, or an engine that takes
  /// device memory (in the platform's memory, on every platform).
  bool through_staging() const { return staged || device_engine_; }

  /// What a chunk carries across nodes: the engine reads in_bytes at `in` and writes out_bytes
  /// at `out` (the platform's memory). A rank off the rail that a broadcast or a reduce crosses
  /// on does not cross (`crosses` false).
  struct crossing {
    const void* in = nullptr;
    void* out = nullptr;
    std::size_t in_bytes = 0, out_bytes = 0;
    bool crosses = true;
  };

  /// Runs k chunks of a collective, each in three parts: before(j) enqueues chunk j's node-local
  /// steps ahead of the engine and says what crosses; step(j, in, out, stream...) runs the engine;
  /// after(j) enqueues the node-local steps behind it. A stream engine gets the buffers and the
  /// call's stream; on a synchronous platform the engine gets the buffers. Staged (a GPU, an
  /// engine on host memory), the crossings go through the pinned staging, pipelined: chunk j + 1's
  /// steps ahead of the engine and its copy to the host are enqueued before the host waits for
  /// chunk j's copy and runs the engine on it, so the GPU's node-local steps run while the engine
  /// does. Two slots of scratch_bytes alternate, each a chunk's in then its out (the callers'
  /// chunks fit). Slot j % 2 next serves chunk j + 2: its copy to the host is enqueued after chunk
  /// j's copy back, on the same stream, and the host runs the engine on it only after that copy
  /// ended. A slot is reused only after its last use.
  template <class Before, class Step, class After>
  void run_chunks(std::size_t k, const call_options<P>& o, Before before, Step step, After after) {
    if constexpr (stream_engine<E, P>) {
      for (std::size_t j = 0; j < k; ++j) {
        const crossing x = before(j);
        if (x.crosses) step(j, x.in, x.out, stream_of(o));
        after(j);
      }
    } else if (!through_staging()) {
      for (std::size_t j = 0; j < k; ++j) {
        const crossing x = before(j);
        if (x.crosses) step(j, x.in, x.out);
        after(j);
      }
    } else {
      const auto st = stream_of(o);
      crossing x[2];
      std::byte* const base = static_cast<std::byte*>(device_engine_ ? device_stage_.ptr : stage_);
      auto slot = [&](std::size_t j) { return base + (j % 2) * scratch_bytes_; };
      auto ahead = [&](std::size_t j) {
        const crossing& c = x[j % 2] = before(j);
        if (c.crosses && c.in_bytes) P::copy_async(slot(j), c.in, c.in_bytes, st);
        if constexpr (!P::synchronous_launch) P::record(events_[j % 2], st);
      };
      if (k > 0) ahead(0);
      for (std::size_t j = 0; j < k; ++j) {
        if (j + 1 < k) ahead(j + 1);
        const crossing& c = x[j % 2];
        if (c.crosses) {
          if constexpr (!P::synchronous_launch) P::synchronize(events_[j % 2]);
          try {
            step(j, slot(j), slot(j) + c.in_bytes);
          } catch (const timeout_error&) {
            engine_timed_out_ = true; // the engine's call may still write its slot
            throw;
          }
          if (c.out_bytes) P::copy_async(c.out, slot(j) + c.in_bytes, c.out_bytes, st);
        }
        after(j);
      }
    }
  }
  /// One chunk, with nothing behind the engine: make() enqueues what comes ahead and says what
  /// crosses; step(in, out, stream...) runs the engine.
  template <class Make, class Step>
  void once(const call_options<P>& o, Make make, Step step) {
    run_chunks(
        1, o, [&](std::size_t) { return make(); },
        [&](std::size_t, const void* a, void* b, auto... st) { step(a, b, st...); }, [](std::size_t) {});
  }

  /// The staging (two slots of scratch_bytes: pinned, or the platform's memory for an engine
  /// that takes it) and its slots' events, made with the communicator: freeing or growing pinned
  /// memory later could wait for the whole GPU, peers' kernels included.
  void make_staging(int device) {
    if constexpr (!stream_engine<E, P>)
      if (engine_) device_engine_ = engine_takes_device_memory(*engine_);
    if (!through_staging() || map_.nodes == 1) return;
    if (device_engine_)
      device_stage_ = P::allocate(2 * scratch_bytes_, device);
    else if constexpr (staged)
      stage_ = P::allocate_pinned(2 * scratch_bytes_);
    if constexpr (!P::synchronous_launch) {
      events_[0] = P::create_event(device);
      events_[1] = P::create_event(device);
    }
  }

  /// The reduction the engine gets: an engine on device memory does not divide (divide() does).
  engine_reduction engine_op(engine_reduction r) const {
    if (device_engine_) r.divide_by = 1;
    return r;
  }
  /// After an engine on device memory: the average's division of the n elements at p (its
  /// staging slot), on the call's stream, in T's accumulation type as the engines divide.
  template <class T>
  void divide(void* p, std::size_t n, engine_reduction r, const call_options<P>& o) {
    if (!device_engine_ || r.divide_by <= 1 || n == 0) return;
    const detail::divide_elements<T> work{static_cast<T*>(p), n, r.divide_by};
    if constexpr (P::synchronous_launch) {
      for (std::size_t i = 0; i < n; ++i) work.at(i);
    } else {
      constexpr unsigned threads = 256;
      const auto blocks =
          static_cast<unsigned>(std::min<std::size_t>((n + 4 * threads - 1) / (4 * threads), 64));
      P::launch(stream_of(o), launch_shape{blocks, threads}, work);
    }
  }

  /// The engine's reduction for op: a sum for an average, divided by the world at the end.
  template <class Op>
  engine_reduction to_engine(const Op& op, const char* call) const {
    using K = op::dynamic::kind;
    const auto w = static_cast<std::uint32_t>(world());
    if constexpr (std::is_same_v<Op, op::sum>)
      return {K::sum, 1};
    else if constexpr (std::is_same_v<Op, op::prod>)
      return {K::prod, 1};
    else if constexpr (std::is_same_v<Op, op::min>)
      return {K::min, 1};
    else if constexpr (std::is_same_v<Op, op::max>)
      return {K::max, 1};
    else if constexpr (std::is_same_v<Op, op::avg>)
      return {K::sum, w};
    else if constexpr (std::is_same_v<Op, op::dynamic>) {
      if (op.k == K::premul_sum) detail::throw_invalid(call, "an inter-node engine has no premul_sum");
      return op.k == K::avg ? engine_reduction{K::sum, w} : engine_reduction{op.k, 1};
    } else {
      static_assert(std::is_same_v<Op, op::sum>, "a hierarchical collective reduces with ark's built-in ops "
                                                 "(sum, prod, min, max, avg, op::dynamic): those an "
                                                 "inter-node engine carries out");
      return {};
    }
  }
  /// The node's op: an average is summed in the node (divided once, by the engine).
  template <class Op>
  static auto local_op(const Op& op) {
    if constexpr (std::is_same_v<Op, op::avg>)
      return op::sum{};
    else if constexpr (std::is_same_v<Op, op::dynamic>)
      return op.k == op::dynamic::kind::avg ? op::dynamic{} : op;
    else
      return op;
  }

  typename P::stream stream_of(const call_options<P>& o) const {
    return o.stream ? o.stream : local_->stream();
  }

  /// The scratch holds a chunk of one element of every rank's block twice (all-to-all's two
  /// arrangements), of the widest element type: every call can run in chunks that fit.
  void check_scratch() const {
    const std::size_t least = std::max<std::size_t>(256, 2 * static_cast<std::size_t>(map_.world) * 8);
    if (scratch_bytes_ < least)
      detail::throw_invalid("hierarchical_communicator", "scratch_bytes must be at least " +
                                                             std::to_string(least) +
                                                             " (256, and 16 bytes a rank)");
  }
  /// s = [local l][node n][m]: the [at, at + m) chunk of rank (n, l)'s block of `count` in
  /// `blocks` (world() blocks in rank order), sorted by rail.
  template <class T>
  void by_rail(T* s, const T* blocks, std::size_t count, std::size_t at, std::size_t m,
               const call_options<P>& o) {
    const int N = map_.nodes, L = map_.local_size;
    for (int l = 0; l < L; ++l)
      for (int n = 0; n < N; ++n)
        P::copy_async(s + (static_cast<std::size_t>(l) * N + n) * m, blocks + map_.global(n, l) * count + at,
                      m * sizeof(T), stream_of(o));
  }
  /// The reverse: each rank's chunk from s ([local l][node n][m], or [node n][local l][m] when
  /// node_major) into its block of `blocks`.
  template <class T>
  void by_rank(T* blocks, const T* s, std::size_t count, std::size_t at, std::size_t m, bool node_major,
               const call_options<P>& o) {
    const int N = map_.nodes, L = map_.local_size;
    for (int l = 0; l < L; ++l)
      for (int n = 0; n < N; ++n) {
        const std::size_t slot =
            node_major ? static_cast<std::size_t>(n) * L + l : static_cast<std::size_t>(l) * N + n;
        P::copy_async(blocks + map_.global(n, l) * count + at, s + slot * m, m * sizeof(T), stream_of(o));
      }
  }
  /// [at, at + m) chunks of `count` elements: m rows of device_row bytes fit the scratch and,
  /// staged, m rows of staged_row bytes (a chunk's in and out) a staging slot; 0: no bound.
  struct chunk {
    std::size_t at, m;
  };
  std::vector<chunk> chunks(std::size_t count, std::size_t device_row, std::size_t staged_row) const {
    std::size_t per = count;
    if (device_row) per = std::min(per, scratch_bytes_ / device_row);
    if (through_staging() && staged_row) per = std::min(per, scratch_bytes_ / staged_row);
    per = std::max<std::size_t>(per, 1);
    std::vector<chunk> v;
    for (std::size_t at = 0; at < count; at += per) v.push_back({at, std::min(per, count - at)});
    return v;
  }
  template <class T>
  T* scratch() const {
    return static_cast<T*>(static_cast<void*>(scratch_.ptr));
  }

  /// The communicator's checks (communicator/checks.hpp): a `count` whose world of blocks would
  /// overflow, a null or misaligned buffer of a non-empty call, and an input and output that
  /// overlap other than where the call allows (`in_place`: as the call's in-place form has them).
  template <class T>
  void check_buffers(const char* call, std::size_t count, const T* in, std::size_t in_count, const T* out,
                     std::size_t out_count, bool in_place) const {
    detail::check_elements<T>(call, count, world());
    detail::check_buffer(call, "in", in, in_count);
    detail::check_buffer(call, "out", out, out_count);
    detail::check_overlap(call, in, in_count, out, out_count, in_place);
  }

  node_map map_;
  std::size_t scratch_bytes_;
  std::optional<communicator<P>> local_;
  std::optional<E> engine_;
  typename P::memory scratch_{};
  bool device_engine_ = false;        ///< the engine takes device memory (through device_stage_)
  bool engine_timed_out_ = false;     ///< a call of it timed out: it may still hold device_stage_
  void* stage_ = nullptr;             ///< pinned staging (staged, an engine on host memory)
  typename P::memory device_stage_{}; ///< staging in the platform's memory (device_engine_)
  typename P::event events_[2]{};     ///< a copy to a slot ended (GPUs, through staging)
};

} // namespace ark
