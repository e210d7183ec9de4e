// bench/ark_bench.cu: all-reduce (float sum, out of place), ark against NCCL in the same run; with
// --op, all-to-all (equal blocks) or send/recv (a ring shift: each rank sends to the next and
// receives from the previous, in one group) instead.
//
// One process drives every GPU, one host thread per GPU. For each size from --min to --max
// (factor 2) it times each ark algorithm and NCCL in three modes:
//   eager   one call (one kernel launch) per all-reduce, N calls back to back on a stream;
//   graph   N calls captured in a CUDA graph, the graph launched once;
//   device  one persistent kernel running N calls through the device-side API (ark only).
// Variants: ark_auto (the default choice), one_shot, one_step (one-shot's single-step LL path
// alone, algo::one_step: only where every worker's share fits one LL step; in device mode at two
// ranks the kernel names algo::one_step_world<2>, as a kernel built for two ranks would), two_shot,
// ring (each forced), ce (the copy-engine all-reduce, dma::copy_engine, into the registered out
// buffer; eager only: its flags carry a per-call epoch, so it is not captured; from --ce-min up),
// zero_copy (algo::zero_copy, reading the registered buffers in place: with --registered, which
// registers the input too, so that ark_auto reads in place from tuning::zero_copy_min_bytes as
// well), zc_tma and zc_ce (the same over dma::tma and dma::proxy_engine at the default depth: the reduced
// chunks pushed by bulk copies or the copy engine; eager and graph; zc_ce named in --only turns
// team_config::staging on, which the copy engine's proxy needs), dynamic (ark_auto with the
// sum named at run time, op::dynamic: the op the NCCL API passes, so that its rows against `nccl`
// under the shim show the shim's own cost; eager and graph) and nccl. Prints nccl-tests columns
// (size, time, algbw, busbw, check) plus ark's time over NCCL's in the same mode (device mode is
// compared with NCCL's graph mode, its fair floor), and writes a CSV. Each time is the median of
// three timed runs of N calls. All-to-all and send/recv run ark_auto, ll (LL packets named) and
// nccl, in the three modes (device mode: a kernel calling device_comm::all_to_all, or
// device_comm::p2p on the group of the send and the receive, on the blocks the host call would
// use); sizes are what one rank sends in all (all-to-all: world blocks), busbw as nccl-tests:
// all-to-all algbw x (n-1)/n, send/recv algbw.
//
// clang-format off
//   build/bench/ark_bench [--min BYTES] [--max BYTES] [--csv FILE] [--quick] [--no-early]
//                         [--registered] [--user-stream] [--slot BYTES] [--budget BYTES]
//                         [--workers N] [--p2p N] [--ll-slot BYTES] [--per-worker BYTES]
//                         [--ll-per-worker BYTES]
//                         [--ce-min BYTES] [--ce-chunk BYTES] [--only VARIANT,...] [--ranks N]
//                         [--op all_reduce|all_to_all|send_recv] [--agg N] [--paired]
//                         [--nodes N [--engine bootstrap|nccl|mpi]]
// clang-format on
// --no-early: the communicators launch plainly, not early (communicator::config::early_launch);
// --user-stream: every call on a stream the bench makes, as NCCL programs call, not on ark's own;
// --ranks: N ranks placed round-robin over the GPUs; where they share one, NCCL is tried and left
// out when it refuses (NCCL does; ark's NCCL API, apps/nccl, preloaded in its place, serves it:
// the nccl column is then the shim over ark); keep --max small enough that every rank's blocks fit
// at once; --slot, --budget, --workers, --p2p, --ll-slot: team_config::slot_bytes,
// ::scratch_budget, ::workers, ::p2p_workers and ::ll_slot_bytes instead of the defaults (--slot: explicit
// slots, the region unbounded; --budget: automatic slots in that many bytes); --per-worker, --ll-per-worker:
// tuning::bytes_per_worker and
// ::ll_bytes_per_worker (a call's blocks); --ce-chunk: communicator::config::ce_chunk_bytes;
// --paired (with nccl and dynamic): eager loops of the two also timed in alternation, 21 pairs a
// size, and the median of the pairs' differences printed below the table (the shim's cost under
// drift that rows timed one after the other do not share);
// --only: these variants, and NCCL where it runs; --agg: in eager and graph modes, calls are made
// N to a group (nccl-tests' -m: ncclGroupStart/End around them; ark's group_start/group_end,
// which batches like collectives into one launch); times stay per call.
// --nodes N: the hierarchical all-reduce instead (hierarchy/communicator.hpp), the ranks in N nodes
// of world / N (rank r in node r / (world / N); a node a GPU, round-robin), its rails over
// --engine (bootstrap: the reference engine, host memory, staged; nccl: NCCL on the GPUs'
// memory, which needs every node on a GPU of its own; mpi: MPI through host memory, one process
// a rank under mpirun, `mpirun -np 4 ark_bench --nodes 2 --engine mpi`, or one process a node
// whose ranks are threads, `mpirun -np 2 ark_bench --nodes 2 --ranks 4 --engine mpi`, where the
// build found MPI); each size also times the engine alone on the rail's share (size / (world / N)), so the
// columns say what ark's node-local steps add.
#include "ark/ark.hpp"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#if defined(ARK_COMPILER_CUDA)
#include "ark/internode/nccl_engine.hpp"

#include <dlfcn.h>
#include <nccl.h>
#define ARK_BENCH_NCCL 1
#endif
#if defined(ARK_BENCH_MPI)
#include "ark/bootstrap/mpi.hpp"
#include "ark/internode/mpi_engine.hpp"
#endif

namespace {

namespace rt = ark::detail::rt;
using gpu = ark::platform::gpu;
using comm_t = ark::communicator<gpu>;

enum class mode { eager, graph, device };
const char* mode_name(mode m) { return m == mode::eager ? "eager" : m == mode::graph ? "graph" : "device"; }

enum class variant {
  ark_auto,
  one_shot,
  one_step,
  two_shot,
  ring,
  ce,
  ll,
  nccl,
  zero_copy,
  zc_tma,
  zc_ce,
  dynamic
};
constexpr const char* variant_names[] = {"ark_auto", "one_shot", "one_step",  "two_shot", "ring",  "ce",
                                         "ll",       "nccl",     "zero_copy", "zc_tma",   "zc_ce", "dynamic"};

/// What is measured (--op).
enum class op_kind { all_reduce, all_to_all, send_recv };
constexpr const char* op_names[] = {"all_reduce", "all_to_all", "send_recv"};
const char* variant_name(variant v) { return variant_names[static_cast<int>(v)]; }

struct options {
  std::size_t min_bytes = 8;
  std::size_t max_bytes = std::size_t(1) << 30;
  std::string csv = "ark_bench.csv";
  bool quick = false;
  bool early_launch = true;         // communicator::config::early_launch (--no-early: plain launches)
  bool registered = false;          // the input registered too (--registered): zero-copy serves
  bool user_stream = false;         // every call on a stream of the bench's, not ark's own (--user-stream)
  std::size_t slot_bytes = 0;       // team_config::slot_bytes (--slot; 0: the default)
  std::size_t budget = 0;           // team_config::scratch_budget (--budget; 0: the default)
  unsigned workers = 0;             // team_config::workers (--workers; 0: the default)
  int p2p = -1;                     // team_config::p2p_workers (--p2p; -1: the default)
  std::size_t ll_slot = 0;          // team_config::ll_slot_bytes (--ll-slot; 0: the default)
  std::size_t per_worker = 0;       // tuning::bytes_per_worker (--per-worker; 0: the default)
  std::size_t ll_per_worker = 0;    // tuning::ll_bytes_per_worker (--ll-per-worker; 0: the default)
  std::size_t ce_min = 1 << 20;     // the copy-engine variant from this size up (--ce-min)
  std::size_t ce_chunk = 0;         // communicator::config::ce_chunk_bytes (--ce-chunk; 0: the default)
  unsigned only = 0;                // variants to run, a bit each (--only; 0: all)
  int ranks = 0;                    // ranks, round-robin over the GPUs (--ranks; 0: one per GPU)
  bool nccl = true;                 // NCCL beside ark (when ranks share a GPU: where the library serves it)
  op_kind op = op_kind::all_reduce; // --op
  int agg = 1;                      // calls a group in eager and graph modes (--agg)
  bool paired = false;              // --paired: eager nccl and dynamic also timed in alternation
  int nodes = 0;                    // --nodes: the hierarchical all-reduce over this many nodes
  std::string engine = "bootstrap"; // --engine: between the nodes
  bool runs(variant v) const {
    return v == variant::nccl ? nccl : !only || (only >> static_cast<int>(v)) & 1u;
  }
};

struct result {
  std::size_t bytes;
  mode m;
  variant v;
  double us;
  std::size_t wrong;
};
/// --paired: eager nccl and dynamic loops timed in alternation at one size; medians in µs a call.
struct paired_result {
  std::size_t bytes;
  double nccl_us, dynamic_us, difference_us; ///< the difference: the median of the pairs'
  int pairs;
};

/// Calls in a timed loop: enough to dwarf launch jitter, few for the big sizes.
int iterations(std::size_t bytes, bool quick) {
  const int n = bytes <= (64 << 10) ? 1000 : bytes <= (1 << 20) ? 300 : bytes <= (16 << 20) ? 50 : 10;
  return quick ? std::max(3, n / 10) : n;
}

/// The same over symmetric buffers: zero-copy (algo::zero_copy).
__global__ void __launch_bounds__(512, 1)
    device_loop_zero_copy(const ark::device_comm<gpu> comm, ark::symmetric<const float> in,
                          ark::symmetric<float> out, std::size_t n, int iters) {
  ark::block_scope block;
  for (int i = 0; i < iters; ++i)
    if (!comm.all_reduce(block, blockIdx.x, gridDim.x, in, out, n)) return;
}

template <class A>
__global__ void __launch_bounds__(512, 1)
    device_loop(const ark::device_comm<gpu> comm, const float* in, float* out, std::size_t n, int iters) {
  ark::block_scope block;
  for (int i = 0; i < iters; ++i)
    if (!comm.all_reduce<A, ark::dma::automatic>(block, blockIdx.x, gridDim.x, in, out, n)) return;
}

/// `iters` all-to-alls of blocks of n floats over backend B.
template <class B>
__global__ void __launch_bounds__(512, 1)
    device_loop_all_to_all(const ark::device_comm<gpu> comm, const float* in, float* out, std::size_t n,
                           int iters) {
  ark::block_scope block;
  for (int i = 0; i < iters; ++i)
    if (!comm.all_to_all<B>(block, blockIdx.x, gridDim.x, in, out, n)) return;
}

/// `iters` groups of the `n` sends and receives at `ops` (device memory) over backend B.
template <class B>
__global__ void __launch_bounds__(512, 1)
    device_loop_p2p(const ark::device_comm<gpu> comm, const ark::p2p_op* ops, unsigned n, int iters) {
  ark::block_scope block;
  for (int i = 0; i < iters; ++i)
    if (!comm.p2p<B>(block, blockIdx.x, gridDim.x, ops, n)) return;
}

struct shared_state {
  int world;
  options opt;
  std::shared_ptr<ark::in_process_group> group;
  std::barrier<> sync;
  std::vector<result> results; // filled by rank 0
  std::vector<paired_result> paired;
  ark::memory_report memory; // rank 0's communicator
#if defined(ARK_BENCH_NCCL)
  std::vector<ncclComm_t> nccl;
#endif
  shared_state(int w, options o)
      : world(w), opt(std::move(o)), group(std::make_shared<ark::in_process_group>(w)), sync(w) {}
};

class rank_runner {
public:
  rank_runner(shared_state& s, int rank) : s_(s), rank_(rank), device_(rank % gpu::device_count()) {
    comm_t::config cfg;
    cfg.device = device_;
    cfg.early_launch = s.opt.early_launch;
    if (s.opt.slot_bytes) cfg.team.slot_bytes = s.opt.slot_bytes;
    if (s.opt.budget) cfg.team.scratch_budget = s.opt.budget;
    if (s.opt.workers) cfg.team.workers = s.opt.workers;
    if (s.opt.p2p >= 0) cfg.team.p2p_workers = static_cast<unsigned>(s.opt.p2p);
    if (s.opt.ll_slot) cfg.team.ll_slot_bytes = s.opt.ll_slot;
    if (s.opt.per_worker) cfg.tuning.bytes_per_worker = s.opt.per_worker;
    if (s.opt.ll_per_worker) cfg.tuning.ll_bytes_per_worker = s.opt.ll_per_worker;
    if (s.opt.ce_chunk) cfg.ce_chunk_bytes = s.opt.ce_chunk;
    // the copy engine behind dma::proxy_engine runs only with staging (named in --only alone: it
    // changes what the budget holds)
    if ((s.opt.only >> static_cast<int>(variant::zc_ce)) & 1u) cfg.team.staging = true;
    // a stream of the bench's is made before the communicator: once a peer's communicator is
    // built its calls may run, and making a stream can wait for them (docs/guide.md, "Ranks that share
    // a GPU")
    if (s.opt.user_stream) stream_ = gpu::create_stream(device_);
    comm_ = std::make_unique<comm_t>(ark::in_process_bootstrap(s.group, rank), cfg);
    if (!s.opt.user_stream) stream_ = comm_->stream();
    on_.stream = stream_;
    const ark::memory_report held = comm_->memory();
    p2p_workers_ = held.p2p_workers;
    if (rank == 0) s.memory = held;
    const std::size_t n = s.opt.max_bytes / sizeof(float) + 16;
    in_ = gpu::allocate(n * sizeof(float), device_);
    out_ = gpu::allocate(n * sizeof(float), device_);
    ops_ = gpu::allocate(2 * sizeof(ark::p2p_op), device_);
    comm_->register_buffer(out_.ptr, n * sizeof(float)); // the copy-engine variant writes into it
    if (s.opt.registered) comm_->register_buffer(in_.ptr, n * sizeof(float)); // zero-copy reads it
    std::vector<float> host(std::min<std::size_t>(n, 1 << 24));
    for (std::size_t done = 0; done < n; done += host.size()) {
      const std::size_t k = std::min(host.size(), n - done);
      for (std::size_t i = 0; i < k; ++i) host[i] = value(done + i, rank);
      gpu::copy(in() + done, host.data(), k * sizeof(float));
    }
    rt::check(rt::event_create(&start_), "event");
    rt::check(rt::event_create(&stop_), "event");
  }
  ~rank_runner() {
    (void)rt::event_destroy(start_); // a destructor: nothing to report to
    (void)rt::event_destroy(stop_);
    if (s_.opt.user_stream) gpu::destroy_stream(stream_);
    gpu::release(in_);
    gpu::release(out_);
    gpu::release(ops_);
  }

  void run() {
    for (std::size_t bytes = s_.opt.min_bytes; bytes <= s_.opt.max_bytes; bytes *= 2)
      for (variant v : {variant::nccl, variant::ark_auto, variant::one_shot, variant::one_step,
                        variant::two_shot, variant::ring, variant::zero_copy, variant::zc_tma, variant::zc_ce,
                        variant::ce, variant::ll, variant::dynamic})
        for (mode m : {mode::eager, mode::graph, mode::device}) {
#if !defined(ARK_BENCH_NCCL)
          if (v == variant::nccl) continue;
#endif
          if (!s_.opt.runs(v)) continue;
          const bool reduce = s_.opt.op == op_kind::all_reduce;
          // all-reduce: every variant but ll; the others: ark_auto, ll and nccl
          if (reduce ? v == variant::ll : v != variant::ark_auto && v != variant::ll && v != variant::nccl)
            continue;
          if (!reduce && elems(bytes) == 0) continue;
          if ((v == variant::nccl || v == variant::dynamic) && m == mode::device) continue;
          if (v == variant::ce && (m != mode::eager || bytes < s_.opt.ce_min)) continue;
          if (v == variant::one_step && !fits_one_step(bytes)) continue;
          const bool zc = v == variant::zero_copy || v == variant::zc_tma || v == variant::zc_ce;
          if (zc && !s_.opt.registered) continue;
          if ((v == variant::zc_tma || v == variant::zc_ce) && m == mode::device) continue;
#if !defined(ARK_COMPILER_CUDA)
          if (v == variant::zc_tma) continue;
#endif
          measure(bytes, v, m);
        }
#if defined(ARK_BENCH_NCCL)
    if (s_.opt.paired && s_.opt.op == op_kind::all_reduce && s_.opt.runs(variant::nccl) &&
        s_.opt.runs(variant::dynamic))
      for (std::size_t bytes = s_.opt.min_bytes; bytes <= s_.opt.max_bytes; bytes *= 2) measure_paired(bytes);
#endif
  }

private:
  static float value(std::size_t i, int rank) { return static_cast<float>((i + 3 * rank) % 7); }
  /// Whether every worker's share of an all-reduce of `bytes` fits one LL step (algo::one_step).
  bool fits_one_step(std::size_t bytes) const {
    return comm_
        ->plan<ark::collective::all_reduce, ark::algo::one_shot, ark::dma::ll_packet<ark::default_depth>,
               float>(bytes / sizeof(float))
        .one_step;
  }
  /// Floats per rank's block: what an all-to-all sends each rank, the rest whole.
  std::size_t elems(std::size_t bytes) const {
    return s_.opt.op == op_kind::all_to_all ? bytes / sizeof(float) / s_.world : bytes / sizeof(float);
  }
  int next() const { return (rank_ + 1) % s_.world; }
  int prev() const { return (rank_ + s_.world - 1) % s_.world; }
  float* in() const { return reinterpret_cast<float*>(in_.ptr); }
  float* out() const { return reinterpret_cast<float*>(out_.ptr); }

  /// One all-to-all of blocks of n floats, or one ring shift of n floats (eager and graph modes).
  void enqueue_other(variant v, std::size_t n) {
    const bool a2a = s_.opt.op == op_kind::all_to_all;
    if (v == variant::nccl) {
#if defined(ARK_BENCH_NCCL)
      bool ok = ncclGroupStart() == ncclSuccess;
      for (int p = 0; p < s_.world; ++p) // nccl-tests' all-to-all: a send and a receive per peer
        if (a2a || p == next())
          ok = ok &&
               ncclSend(in() + (a2a ? p * n : 0), n, ncclFloat, p, s_.nccl[rank_], stream_) == ncclSuccess;
      for (int p = 0; p < s_.world; ++p)
        if (a2a || p == prev())
          ok = ok &&
               ncclRecv(out() + (a2a ? p * n : 0), n, ncclFloat, p, s_.nccl[rank_], stream_) == ncclSuccess;
      if (ncclGroupEnd() != ncclSuccess || !ok) throw std::runtime_error("NCCL send/recv failed");
#endif
      return;
    }
    auto run = [&](auto b) {
      using B = decltype(b);
      if (a2a) {
        comm_->all_to_all<B>(in(), out(), n, on_);
      } else {
        comm_->group_start();
        comm_->send<B>(in(), n, next(), on_);
        comm_->recv<B>(out(), n, prev(), on_);
        comm_->group_end();
      }
    };
    if (v == variant::ll)
      run(ark::dma::ll_packet<ark::default_depth>{});
    else
      run(ark::dma::automatic{});
  }

  /// One all-reduce of n floats, enqueued on the stream (eager and graph modes).
  void enqueue(variant v, std::size_t n) {
    if (s_.opt.op != op_kind::all_reduce) return enqueue_other(v, n);
    switch (v) {
    case variant::ark_auto:
      comm_->all_reduce(in(), out(), n, ark::op::sum{}, on_);
      break;
    case variant::one_shot:
      comm_->all_reduce<ark::algo::one_shot>(in(), out(), n, ark::op::sum{}, on_);
      break;
    case variant::one_step:
      comm_->all_reduce<ark::algo::one_step>(in(), out(), n, ark::op::sum{}, on_);
      break;
    case variant::two_shot:
      comm_->all_reduce<ark::algo::two_shot>(in(), out(), n, ark::op::sum{}, on_);
      break;
    case variant::ring:
      comm_->all_reduce<ark::algo::ring>(in(), out(), n, ark::op::sum{}, on_);
      break;
    case variant::zero_copy:
      comm_->all_reduce<ark::algo::zero_copy>(in(), out(), n, ark::op::sum{}, on_);
      break;
    case variant::zc_tma:
#if defined(ARK_COMPILER_CUDA) // TMA is NVIDIA sm_90's: run() skips the variant elsewhere
      comm_->all_reduce<ark::algo::zero_copy, ark::dma::tma<ark::default_depth>>(in(), out(), n,
                                                                                 ark::op::sum{}, on_);
#endif
      break;
    case variant::zc_ce:
      comm_->all_reduce<ark::algo::zero_copy, ark::dma::proxy_engine<ark::default_depth>>(
          in(), out(), n, ark::op::sum{}, on_);
      break;
    case variant::ce:
      comm_->all_reduce<ark::algo::automatic, ark::dma::copy_engine>(in(), out(), n, ark::op::sum{}, on_);
      break;
    case variant::dynamic:
      comm_->all_reduce(in(), out(), n, ark::op::dynamic{ark::op::dynamic::kind::sum}, on_);
      break;
    case variant::ll:
      break;
    case variant::nccl:
#if defined(ARK_BENCH_NCCL)
      if (ncclAllReduce(in(), out(), n, ncclFloat, ncclSum, s_.nccl[rank_], stream_) != ncclSuccess)
        throw std::runtime_error("ncclAllReduce failed");
#endif
      break;
    }
  }

  /// `iters` all-reduces run by one persistent kernel (device mode), on the blocks and threads the
  /// host would launch the same call with (communicator::plan).
  void launch_device_loop(variant v, std::size_t n, int iters) {
    if (s_.opt.op != op_kind::all_reduce) {
      // the host's automatic send/recv picks by size (communicator::issue_p2p_by_size); the
      // device side's automatic is thread copies, so the kernel names the host's choice
      const bool small = n * sizeof(float) <= comm_->configuration().tuning.ll_max_bytes;
      if (v == variant::ll || (s_.opt.op == op_kind::send_recv && small))
        launch_other_loop<ark::dma::ll_packet<ark::default_depth>>(n, iters);
      else
        launch_other_loop<ark::dma::automatic>(n, iters);
      return;
    }
    auto launch = [&](auto a) {
      using A = decltype(a);
      const ark::call_plan p = comm_->plan<ark::collective::all_reduce, A, ark::dma::automatic, float>(n);
      device_loop<A><<<p.ctas, p.threads, 0, stream_>>>(comm_->device_handle(), in(), out(), n, iters);
    };
    switch (v) {
    case variant::one_shot:
      launch(ark::algo::one_shot{});
      break;
    case variant::one_step:
      if (comm_->world() == 2)
        launch(ark::algo::one_step_world<2>{});
      else
        launch(ark::algo::one_step{});
      break;
    case variant::two_shot:
      launch(ark::algo::two_shot{});
      break;
    case variant::ring:
      launch(ark::algo::ring{});
      break;
    case variant::zero_copy: {
      const ark::call_plan p =
          comm_->plan<ark::collective::all_reduce, ark::algo::zero_copy, ark::dma::automatic>(in(), out(), n);
      device_loop_zero_copy<<<p.ctas, p.threads, 0, stream_>>>(comm_->device_handle(),
                                                               comm_->symmetric<const float>(in(), n),
                                                               comm_->symmetric(out(), n), n, iters);
      break;
    }
    default:
      launch(ark::algo::automatic{});
      break;
    }
    rt::check(rt::get_last_error(), "launch device loop");
  }

  /// `iters` all-to-alls, or ring shifts, of n floats over backend B by one persistent kernel
  /// (device mode), on the blocks the host's call would use: the all-to-all's plan; the
  /// point-to-point workers, within the rank's share of a GPU it shares (block_cap).
  template <class B>
  void launch_other_loop(std::size_t n, int iters) {
    if (s_.opt.op == op_kind::all_to_all) {
      const ark::call_plan p = comm_->plan<ark::collective::all_to_all, ark::algo::direct, B, float>(n);
      device_loop_all_to_all<B>
          <<<p.ctas, p.threads, 0, stream_>>>(comm_->device_handle(), in(), out(), n, iters);
    } else {
      unsigned workers = p2p_workers_;
      if (comm_->block_cap()) workers = std::min(workers, comm_->block_cap());
      device_loop_p2p<B><<<workers, comm_->configuration().tuning.threads, 0, stream_>>>(
          comm_->device_handle(), reinterpret_cast<const ark::p2p_op*>(ops_.ptr), s_.world == 1 ? 1 : 2,
          iters);
    }
  }
  /// Writes the ring shift of n floats that device_loop_p2p runs (before it is timed).
  void write_shift(std::size_t n) {
    ark::p2p_op ops[2];
    if (s_.world == 1) { // the send to this rank joined to its receive
      ops[0] = ark::make_p2p_op(ark::p2p_op::self, out(), n, rank_);
      ops[0].src = reinterpret_cast<std::uint64_t>(in());
    } else {
      ops[0] = ark::make_p2p_op(ark::p2p_op::send, static_cast<const float*>(in()), n, next());
      ops[1] = ark::make_p2p_op(ark::p2p_op::recv, out(), n, prev());
    }
    gpu::copy(ops_.ptr, ops, sizeof ops);
  }

  /// `calls` calls of variant v on the stream, --agg to a group.
  void enqueue_calls(variant v, std::size_t n, int calls) {
    for (int i = 0; i < calls; i += s_.opt.agg) {
      const int k = std::min(s_.opt.agg, calls - i);
      if (k > 1) group(v, true);
      for (int j = 0; j < k; ++j) enqueue(v, n);
      if (k > 1) group(v, false);
    }
  }
  void group(variant v, bool start) {
    if (v == variant::nccl) {
#if defined(ARK_BENCH_NCCL)
      if ((start ? ncclGroupStart() : ncclGroupEnd()) != ncclSuccess)
        throw std::runtime_error("NCCL group failed");
#endif
    } else if (start) {
      comm_->group_start();
    } else {
      comm_->group_end();
    }
  }

  void run_mode(variant v, mode m, std::size_t n, int iters, rt::graph_exec_t graph) {
    if (m == mode::eager)
      enqueue_calls(v, n, iters);
    else if (m == mode::graph)
      rt::check(rt::graph_launch(graph, stream_), "launch graph");
    else
      launch_device_loop(v, n, iters);
  }

  void measure(std::size_t bytes, variant v, mode m) {
    const std::size_t n = elems(bytes);
    const int iters = iterations(bytes, s_.opt.quick);
    rt::graph_t g{};
    rt::graph_exec_t exec{};
    if (m == mode::graph) { // capture the calls once; only replays are timed
      rt::check(rt::begin_capture(stream_), "capture");
      enqueue_calls(v, n, iters);
      rt::check(rt::end_capture(stream_, &g), "capture");
      rt::check(rt::graph_instantiate(&exec, g), "instantiate");
    }
    if (m == mode::device && s_.opt.op == op_kind::send_recv) write_shift(n);
    rt::check(rt::memset_async(out(), 0xff, bytes, stream_), "poison");
    run_mode(v, m, n, m == mode::graph ? iters : std::max(1, iters / 10), exec); // warm up
    rt::check(rt::stream_synchronize(stream_), "synchronize");
    comm_->synchronize();
    double runs[3]; // the median of three timed runs: one hiccup of a shared machine is not a result
    for (double& us : runs) us = timed_loop(iters, [&] { run_mode(v, m, n, iters, exec); });
    std::sort(runs, runs + 3);
    const std::size_t wrong = check(n);
    if (m == mode::graph) {
      rt::check(rt::graph_exec_destroy(exec), "graph");
      rt::check(rt::graph_destroy(g), "graph");
    }
    const std::size_t moved = s_.opt.op == op_kind::all_to_all ? n * s_.world * sizeof(float) : bytes;
    if (rank_ == 0) s_.results.push_back({moved, m, v, runs[1], wrong});
    s_.sync.arrive_and_wait();
  }

  /// One timed loop of the `iters` calls run() enqueues, every rank starting together; µs a call
  /// (the stream's time between events around them, after the stream and the communicator end).
  template <class F>
  double timed_loop(int iters, F&& run) {
    s_.sync.arrive_and_wait();
    float ms = 0;
    rt::check(rt::event_record(start_, stream_), "record");
    run();
    rt::check(rt::event_record(stop_, stream_), "record");
    rt::check(rt::stream_synchronize(stream_), "synchronize"); // the bench's stream or ark's
    comm_->synchronize();
    rt::check(rt::event_elapsed_ms(&ms, start_, stop_), "elapsed");
    return ms * 1000.0 / iters;
  }

  /// --paired: eager loops of nccl and of dynamic in alternation, 21 pairs, every rank starting
  /// each loop together. Rows timed one after the other drift apart by more than the few tenths of
  /// a microsecond the shim may add; loops side by side drift together, and the median of the
  /// pairs' differences keeps what is the shim's.
  void measure_paired(std::size_t bytes) {
    const std::size_t n = elems(bytes);
    const int iters = iterations(bytes, s_.opt.quick);
    auto loop = [&](variant v) { return timed_loop(iters, [&] { enqueue_calls(v, n, iters); }); };
    loop(variant::nccl), loop(variant::dynamic); // warm up
    constexpr int pairs = 21;
    std::vector<double> a, b, d;
    for (int i = 0; i < pairs; ++i) {
      const bool nccl_first = i % 2 == 0; // neither always first
      const double x = loop(nccl_first ? variant::nccl : variant::dynamic);
      const double y = loop(nccl_first ? variant::dynamic : variant::nccl);
      a.push_back(nccl_first ? x : y), b.push_back(nccl_first ? y : x), d.push_back(a.back() - b.back());
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    if (rank_ == 0) s_.paired.push_back({bytes, median(a), median(b), median(d), pairs});
    s_.sync.arrive_and_wait();
  }

  /// Wrong elements of the output: all of them up to 16 Mi elements, then every 97th and the
  /// last 1024 (the output was poisoned before the timed calls).
  /// (All-to-all: block q of the output is rank q's block `rank`; send/recv: the previous rank's
  /// input.)
  std::size_t check(std::size_t n) {
    const bool a2a = s_.opt.op == op_kind::all_to_all;
    const std::size_t total = a2a ? n * s_.world : n;
    got_.resize(total);
    gpu::copy(got_.data(), out(), total * sizeof(float));
    std::size_t wrong = 0;
    const std::size_t stride = total <= (16u << 20) ? 1 : 97;
    for (std::size_t i = 0; i < total; i += (i + 1024 >= total ? 1 : stride)) {
      float want = 0;
      if (a2a)
        want = value(rank_ * n + i % n, static_cast<int>(i / n));
      else if (s_.opt.op == op_kind::send_recv)
        want = value(i, prev());
      else
        for (int r = 0; r < s_.world; ++r) want += value(i, r);
      wrong += got_[i] != want;
    }
    return wrong;
  }

  shared_state& s_;
  int rank_, device_;
  std::unique_ptr<comm_t> comm_;
  gpu::stream stream_{};
  ark::call_options<gpu> on_; // every ark call's: on stream_
  gpu::memory in_, out_;
  gpu::memory ops_; // device mode's send and receive (device_loop_p2p)
  unsigned p2p_workers_ = 0;
  rt::event_t start_{}, stop_{};
  std::vector<float> got_;
};

// -- --nodes: the hierarchical all-reduce -------------------------------------------------------
struct node_result {
  std::size_t bytes;
  double us, engine_us; ///< the hierarchical all-reduce; the engine alone on the rail's share
  std::size_t wrong;
};

template <class E>
using hcomm_of = ark::hierarchical_communicator<gpu, E>;

/// Rank `rank` of the hierarchical all-reduce over engines E, its communicator made by
/// build(config, device) (its ranks threads of this process, or processes under mpirun, or
/// both): for each size, three timed loops of the all-reduce and three of the engine alone on the
/// rail's share (its memory: the GPU's for a stream engine, the host's else), each ending
/// synchronized on the host, every rank starting together (sync()); the medians go to *results
/// (rank 0).
template <class E, class Build, class Sync>
void run_nodes_rank(const options& opt, int world, int rank, Build build, Sync sync,
                    std::vector<node_result>* results) {
  using hcomm = hcomm_of<E>;
  const int L = world / opt.nodes, device = (rank / L) % gpu::device_count();
  gpu::use_device(device);
  const std::size_t most = opt.max_bytes / sizeof(float);
  // streams and memory before the communicator (docs/guide.md, "Ranks that share a GPU")
  const gpu::stream s = gpu::create_stream(device);
  gpu::memory in = gpu::allocate(most * sizeof(float) + 64, device);
  gpu::memory out = gpu::allocate(most * sizeof(float) + 64, device);
  std::vector<float> host(most), got(most), h_in(most / L + 1), h_out(most / L + 1);
  auto value = [](std::size_t i, int r) {
    return static_cast<float>((i + 3 * static_cast<std::size_t>(r)) % 7);
  };
  for (std::size_t i = 0; i < most; ++i) host[i] = value(i, rank);
  gpu::copy(in.ptr, host.data(), most * sizeof(float));
  {
    typename hcomm::config cfg;
    cfg.local.device = device;
    cfg.local.early_launch = opt.early_launch;
    cfg.nodes.name = "node" + std::to_string(rank / L);
    cfg.nodes.ranks_per_node = 0;
    const std::unique_ptr<hcomm> made = build(cfg, device);
    hcomm& c = *made;
    ark::call_options<gpu> o;
    o.stream = s;
    float* const x = reinterpret_cast<float*>(in.ptr);
    float* const y = reinterpret_cast<float*>(out.ptr);
    for (std::size_t bytes = opt.min_bytes; bytes <= opt.max_bytes; bytes *= 2) {
      const std::size_t n = bytes / sizeof(float), shard = std::max<std::size_t>(1, n / L);
      const int iters = std::min(iterations(bytes, opt.quick), 100);
      auto timed = [&](auto&& one) { // the median of three loops, every rank starting together
        double us[3];
        one();
        rt::check(rt::stream_synchronize(s), "synchronize");
        for (double& t : us) {
          sync();
          const auto t0 = std::chrono::steady_clock::now();
          for (int i = 0; i < iters; ++i) one();
          rt::check(rt::stream_synchronize(s), "synchronize");
          t = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
              iters;
        }
        std::sort(us, us + 3);
        return us[1];
      };
      rt::check(rt::memset_async(y, 0xff, bytes, s), "poison");
      const double us = timed([&] { c.all_reduce(x, y, n, ark::op::sum{}, o); });
      gpu::copy(got.data(), y, n * sizeof(float));
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < n; ++i) {
        float want = 0;
        for (int r = 0; r < world; ++r) want += value(i, r);
        wrong += got[i] != want;
      }
      double engine_us = 0;
      if (E* e = c.engine()) {
        if constexpr (ark::stream_engine<E, gpu>)
          engine_us = timed([&] { e->all_reduce(x, y, shard, ark::dtype::f32, {}, s); });
        else
          engine_us = timed([&] { e->all_reduce(h_in.data(), h_out.data(), shard, ark::dtype::f32, {}); });
      }
      if (rank == 0) results->push_back({bytes, us, engine_us, wrong});
      sync();
    }
    c.local().synchronize();
  }
  gpu::release(in);
  gpu::release(out);
  gpu::destroy_stream(s);
}

/// Prints --nodes' table of `world` ranks; returns the exit code.
int print_nodes(const options& opt, int world, const std::vector<node_result>& results,
                const std::string& command) {
  char date[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  const int L = world / opt.nodes;
  std::printf("# ark_bench --nodes: hierarchical all-reduce, float sum, %d nodes x %d ranks on %d x %s, "
              "engine %s\n# date %s; driver API %d\n# command: %s\n",
              opt.nodes, L, gpu::device_count(), rt::device_name(0).c_str(), opt.engine.c_str(), date,
              rt::driver_version(), command.c_str());
  std::printf("# busbw = algbw * 2(n-1)/n over all %d ranks; engine: the engine alone on the rail's share "
              "(size / %d); ark: what the node's steps and staging add, (time - engine) / engine\n",
              world, L);
  std::printf("%12s %11s %10s %9s %9s %6s %12s %8s\n", "size(B)", "count", "time(us)", "algbw", "busbw",
              "#wrong", "engine(us)", "ark(%)");
  std::ofstream csv(opt.csv);
  csv << "bytes,count,time_us,algbw_gbs,busbw_gbs,wrong,engine_us,ark_pct\n";
  for (const node_result& r : results) {
    const double algbw = static_cast<double>(r.bytes) / r.us / 1e3, busbw = algbw * 2.0 * (world - 1) / world;
    const double ark_pct = r.engine_us > 0 ? 100.0 * (r.us - r.engine_us) / r.engine_us : 0;
    std::printf("%12zu %11zu %10.2f %9.2f %9.2f %6zu %12.2f %8.1f\n", r.bytes, r.bytes / 4, r.us, algbw,
                busbw, r.wrong, r.engine_us, ark_pct);
    csv << r.bytes << ',' << r.bytes / 4 << ',' << r.us << ',' << algbw << ',' << busbw << ',' << r.wrong
        << ',' << r.engine_us << ',' << ark_pct << '\n';
  }
  for (const node_result& r : results)
    if (r.wrong) return 2;
  return 0;
}

/// Runs --nodes on `world` ranks as threads and prints its table; returns the exit code.
int run_nodes(const options& opt, int world, const std::string& command) {
  if (opt.nodes < 1 || world % opt.nodes)
    return std::fprintf(stderr, "ark_bench: --nodes %d does not divide the %d ranks\n", opt.nodes, world), 64;
  auto group = std::make_shared<ark::in_process_group>(world);
  std::barrier<> sync(world);
  std::vector<node_result> results;
  std::vector<std::string> errors(world);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      try {
        auto boot = ark::in_process_bootstrap(group, r);
        auto together = [&] { sync.arrive_and_wait(); };
        if (opt.engine == "nccl") {
#if defined(ARK_BENCH_NCCL)
          run_nodes_rank<ark::nccl_engine>(
              opt, world, r,
              [&](auto cfg, int d) {
                return std::make_unique<hcomm_of<ark::nccl_engine>>(
                    boot, [d](auto rail) { return ark::nccl_engine(std::move(rail), d); }, cfg);
              },
              together, &results);
#else
          throw std::runtime_error("--engine nccl: this ark_bench was built without NCCL");
#endif
        } else {
          run_nodes_rank<ark::bootstrap_engine>(
              opt, world, r,
              [&](auto cfg, int) { return std::make_unique<hcomm_of<ark::bootstrap_engine>>(boot, cfg); },
              together, &results);
        }
      } catch (const std::exception& e) {
        errors[r] = e.what();
        sync.arrive_and_drop(); // the others go on (and fail on their own bounds)
      }
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < world; ++r)
    if (!errors[r].empty()) return std::fprintf(stderr, "rank %d: %s\n", r, errors[r].c_str()), 1;
  return print_nodes(opt, world, results, command);
}

#if defined(ARK_BENCH_MPI)
/// --nodes with --engine mpi: this process is one rank of MPI_COMM_WORLD (mpirun starts one a
/// rank; the ranks of a node share its GPU, a node a GPU round-robin), or, with one process a node
/// and --ranks above the processes, a node of --ranks / nodes ranks as threads (the node's
/// bootstrap in-process, each thread's rail on an MPI communicator of its own): its rails over
/// MPI, staged through host memory; rank 0 prints the table.
int run_nodes_mpi(const options& opt, const std::string& command) {
  int provided = 0, proc = 0, procs = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &proc);
  MPI_Comm_size(MPI_COMM_WORLD, &procs);
  const int threads = procs == opt.nodes && opt.ranks > procs ? opt.ranks / procs : 1; // ranks a process
  int code = 0;
  if (opt.nodes < 1 || procs % opt.nodes || (threads > 1 && opt.ranks % procs)) {
    if (proc == 0)
      std::fprintf(stderr, "ark_bench: --nodes %d does not divide the %d ranks\n", opt.nodes,
                   threads > 1 ? opt.ranks : procs);
    code = 64;
  } else if (threads > 1 && provided < MPI_THREAD_MULTIPLE) {
    if (proc == 0) std::fprintf(stderr, "ark_bench: ranks as threads need MPI_THREAD_MULTIPLE\n");
    code = 64;
  } else {
    std::vector<node_result> results;
    const int world = procs * threads;
    using hcomm = hcomm_of<ark::mpi_engine>;
    std::vector<MPI_Comm> rails(threads > 1 ? threads : 0); // made here, in order, by every process
    for (auto& r : rails) MPI_Comm_dup(MPI_COMM_WORLD, &r);
    auto group = std::make_shared<ark::in_process_group>(threads);
    // every rank of the job together: this process's threads, then one MPI barrier among them
    std::barrier sync(threads, []() noexcept { MPI_Barrier(MPI_COMM_WORLD); });
    std::vector<std::string> errors(threads);
    auto rank_of = [&](int l) {
      try {
        if (threads == 1)
          run_nodes_rank<ark::mpi_engine>(
              opt, world, proc,
              [&](auto cfg, int) {
                return std::make_unique<hcomm>(
                    ark::mpi_bootstrap(MPI_COMM_WORLD),
                    [](ark::mpi_bootstrap rail) { return ark::mpi_engine(std::move(rail)); }, cfg);
              },
              [] { MPI_Barrier(MPI_COMM_WORLD); }, &results);
        else
          run_nodes_rank<ark::mpi_engine>(
              opt, world, proc * threads + l,
              [&](auto cfg, int) {
                std::optional<ark::mpi_engine> rail;
                if (procs > 1) rail.emplace(ark::mpi_bootstrap(rails[l]));
                return std::make_unique<hcomm>(ark::node_map::regular(procs, threads, proc, l),
                                               ark::in_process_bootstrap(group, l), std::move(rail), cfg);
              },
              [&] { sync.arrive_and_wait(); }, &results);
      } catch (const std::exception& e) {
        errors[l] = e.what();
        if (threads > 1) sync.arrive_and_drop(); // the others go on (and fail on their own bounds)
      }
    };
    std::vector<std::thread> ts;
    for (int l = 1; l < threads; ++l) ts.emplace_back(rank_of, l);
    rank_of(0);
    for (auto& t : ts) t.join();
    for (int l = 0; l < threads; ++l)
      if (!errors[l].empty())
        std::fprintf(stderr, "rank %d: %s\n", proc * threads + l, errors[l].c_str()), code = 1;
    for (auto& r : rails) MPI_Comm_free(&r);
    int any = code;
    MPI_Allreduce(&code, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (!any && proc == 0)
      code = print_nodes(opt, world, results, command);
    else if (any)
      code = 1;
  }
  MPI_Finalize();
  return code;
}
#endif

std::size_t parse_bytes(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
  if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
  return static_cast<std::size_t>(v);
}

void report(const shared_state& s, const std::string& command) {
  char date[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  const char* what = s.opt.op == op_kind::all_reduce   ? "all-reduce, float sum, out of place"
                     : s.opt.op == op_kind::all_to_all ? "all-to-all, float, equal blocks"
                                                       : "send/recv, float, a ring shift in one group";
  if (s.world <= gpu::device_count())
    std::printf("# ark_bench: %s, %d x %s\n", what, s.world, rt::device_name(0).c_str());
  else
    std::printf("# ark_bench: %s, %d ranks on %d x %s (round-robin: ranks on one GPU cross no link%s)\n",
                what, s.world, gpu::device_count(), rt::device_name(0).c_str(),
                s.opt.nccl ? "" : "; no NCCL: it refuses two ranks on one GPU");
  std::printf("# date %s; driver API %d", date, rt::driver_version());
#if defined(ARK_BENCH_NCCL)
  int nv = 0;
  ncclGetVersion(&nv);
  Dl_info lib{}; // which libnccl.so.2 serves the nccl column (NCCL's, or ark's preloaded in its place)
  const bool named = dladdr(reinterpret_cast<void*>(&ncclAllReduce), &lib) != 0 && lib.dli_fname;
  std::printf("; NCCL %d.%d.%d (%s)", nv / 10000, (nv / 100) % 100, nv % 100, named ? lib.dli_fname : "?");
#endif
  std::printf("\n# command: %s\n", command.c_str());
  if (s.opt.user_stream) std::printf("# every call on a stream of the bench's, not the communicator's own\n");
  if (s.opt.agg > 1)
    std::printf("# eager and graph: %d calls a group (ark group_start/group_end, ncclGroupStart/End); "
                "times per call\n",
                s.opt.agg);
  std::printf("# ark scratch per rank: %.1f MiB (slots for %u workers of %zu KiB each; team_config)%s\n",
              static_cast<double>(s.memory.scratch) / (1 << 20), s.memory.workers, s.memory.slot_bytes >> 10,
              s.opt.registered ? "; buffers registered (ark_auto reads them in place from "
                                 "tuning::zero_copy_min_bytes)"
                               : "");
  const double factor = s.opt.op == op_kind::all_reduce   ? 2.0 * (s.world - 1) / s.world
                        : s.opt.op == op_kind::all_to_all ? double(s.world - 1) / s.world
                                                          : 1.0;
  std::printf("# busbw = algbw * %s; ratio = ark time / NCCL time in the same mode (device: vs NCCL graph)\n",
              s.opt.op == op_kind::all_reduce   ? "2(n-1)/n"
              : s.opt.op == op_kind::all_to_all ? "(n-1)/n"
                                                : "1");
  std::printf("%12s %11s  %-6s %-9s %10s %9s %9s %6s %7s\n", "size(B)", "count", "mode", "variant",
              "time(us)", "algbw", "busbw", "#wrong", "ratio");
  std::ofstream csv(s.opt.csv);
  csv << "bytes,count,mode,variant,time_us,algbw_gbs,busbw_gbs,wrong,ratio_vs_nccl\n";
  for (const result& r : s.results) {
    double nccl_us = 0;
    for (const result& q : s.results)
      if (q.bytes == r.bytes && q.v == variant::nccl && q.m == (r.m == mode::device ? mode::graph : r.m))
        nccl_us = q.us;
    const double algbw = r.bytes / r.us / 1e3, busbw = algbw * factor;
    char ratio[16] = "-";
    if (r.v != variant::nccl && nccl_us > 0) std::snprintf(ratio, sizeof ratio, "%.2f", r.us / nccl_us);
    std::printf("%12zu %11zu  %-6s %-9s %10.2f %9.2f %9.2f %6zu %7s\n", r.bytes, r.bytes / 4, mode_name(r.m),
                variant_name(r.v), r.us, algbw, busbw, r.wrong, ratio);
    csv << r.bytes << ',' << r.bytes / 4 << ',' << mode_name(r.m) << ',' << variant_name(r.v) << ',' << r.us
        << ',' << algbw << ',' << busbw << ',' << r.wrong << ',' << ratio << '\n';
  }
  if (!s.paired.empty())
    std::printf("# --paired: eager loops of nccl and dynamic in alternation; medians (us a call) of each and "
                "of the pairs' differences\n#%11s %10s %10s %12s %6s\n",
                "size(B)", "nccl", "dynamic", "nccl-dyn", "pairs");
  for (const paired_result& p : s.paired)
    std::printf("#%11zu %10.3f %10.3f %+12.3f %6d\n", p.bytes, p.nccl_us, p.dynamic_us, p.difference_us,
                p.pairs);
}

} // namespace

int main(int argc, char** argv) {
  options opt;
  std::string command = argv[0], only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    command += " " + a;
    if (a == "--min" && i + 1 < argc)
      opt.min_bytes = parse_bytes(argv[++i]), command += std::string(" ") + argv[i];
    else if (a == "--max" && i + 1 < argc)
      opt.max_bytes = parse_bytes(argv[++i]), command += std::string(" ") + argv[i];
    else if (a == "--csv" && i + 1 < argc)
      opt.csv = argv[++i], command += std::string(" ") + argv[i];
    else if (a == "--quick")
      opt.quick = true;
    else if (a == "--no-early")
      opt.early_launch = false;
    else if (a == "--user-stream")
      opt.user_stream = true;
    else if (a == "--registered")
      opt.registered = true;
    else if (a == "--slot" && i + 1 < argc)
      opt.slot_bytes = parse_bytes(argv[++i]), command += std::string(" ") + argv[i];
    else if (a == "--budget" && i + 1 < argc)
      opt.budget = parse_bytes(argv[++i]), command += std::string(" ") + argv[i];
    else if (a == "--workers" && i + 1 < argc)
      opt.workers = static_cast<unsigned>(std::atoi(argv[++i])), command += std::string(" ") + argv[i];
    else if (a == "--p2p" && i + 1 < argc && std::atoi(argv[i + 1]) >= 0)
      opt.p2p = std::atoi(argv[++i]), command += std::string(" ") + argv[i];
    else if (a == "--ll-slot" && i + 1 < argc)
      opt.ll_slot = parse_bytes(argv[++i]), command += std::string(" ") + argv[i];
    else if (a == "--per-worker" && i + 1 < argc)
      opt.per_worker = parse_bytes(argv[++i]), command += std::string(" ") + argv[i];
    else if (a == "--ll-per-worker" && i + 1 < argc)
      opt.ll_per_worker = parse_bytes(argv[++i]), command += std::string(" ") + argv[i];
    else if (a == "--ce-min" && i + 1 < argc)
      opt.ce_min = parse_bytes(argv[++i]), command += std::string(" ") + argv[i];
    else if (a == "--ce-chunk" && i + 1 < argc)
      opt.ce_chunk = parse_bytes(argv[++i]), command += std::string(" ") + argv[i];
    else if (a == "--only" && i + 1 < argc)
      only = argv[++i], command += std::string(" ") + argv[i];
    else if (a == "--nodes" && i + 1 < argc && std::atoi(argv[i + 1]) >= 1)
      opt.nodes = std::atoi(argv[++i]), command += std::string(" ") + argv[i];
    else if (a == "--engine" && i + 1 < argc &&
             (std::string(argv[i + 1]) == "bootstrap" || std::string(argv[i + 1]) == "nccl" ||
              std::string(argv[i + 1]) == "mpi"))
      opt.engine = argv[++i], command += std::string(" ") + argv[i];
    else if (a == "--paired")
      opt.paired = true, command += " --paired";
    else if (a == "--agg" && i + 1 < argc && std::atoi(argv[i + 1]) >= 1)
      opt.agg = std::atoi(argv[++i]), command += std::string(" ") + argv[i];
    else if (a == "--ranks" && i + 1 < argc && std::atoi(argv[i + 1]) >= 1)
      opt.ranks = std::atoi(argv[++i]), command += std::string(" ") + argv[i];
    else if (a == "--op" && i + 1 < argc &&
             std::find(std::begin(op_names), std::end(op_names), std::string(argv[i + 1])) !=
                 std::end(op_names))
      opt.op = static_cast<op_kind>(
          std::find(std::begin(op_names), std::end(op_names), std::string(argv[++i])) - std::begin(op_names)),
      command += std::string(" ") + argv[i];
    else {
      std::fprintf(
          stderr,
          "usage: %s [--min BYTES] [--max BYTES] [--csv FILE] [--quick] [--no-early] [--registered] "
          "[--user-stream] "
          "[--slot BYTES] "
          "[--budget BYTES] [--workers N] [--p2p N] [--ll-slot BYTES] [--per-worker BYTES] [--ll-per-worker "
          "BYTES] [--ce-min "
          "BYTES] [--ce-chunk BYTES] "
          "[--only VARIANT,...] [--ranks N] [--op all_reduce|all_to_all|send_recv] [--agg N] [--paired] "
          "[--nodes N [--engine bootstrap|nccl|mpi]]\n",
          argv[0]);
      return 64;
    }
  }
  for (std::size_t b = 0; b < only.size();) { // every name given to --only is a variant
    const std::size_t e = std::min(only.find(',', b), only.size());
    const std::string name = only.substr(b, e - b);
    const auto* v = std::find(std::begin(variant_names), std::end(variant_names), name);
    if (v == std::end(variant_names)) {
      std::fprintf(stderr,
                   "%s: --only: no variant '%s' (ark_auto, one_shot, one_step, two_shot, ring, zero_copy, "
                   "zc_tma, zc_ce, ce, ll, nccl, dynamic)\n",
                   argv[0], name.c_str());
      return 64;
    }
    opt.only |= 1u << (v - std::begin(variant_names));
    b = e + 1;
  }
  const int gpus = gpu::device_count();
  if (gpus < 1) {
    std::fprintf(stderr, "ark_bench: no GPU\n");
    return 1;
  }
  const int world = opt.ranks > 0 ? opt.ranks : gpus;
  if (opt.nodes && opt.engine == "mpi") {
#if defined(ARK_BENCH_MPI)
    return run_nodes_mpi(opt, command);
#else
    return std::fprintf(stderr, "ark_bench: --engine mpi: this ark_bench was built without MPI\n"), 64;
#endif
  }
  ::setenv("NCCL_NVLS_ENABLE", "0", 1); // NVLink multicast stays off on shared machines
  if (opt.nodes) return run_nodes(opt, world, command);
#if defined(ARK_BENCH_NCCL)
  std::vector<ncclComm_t> nccl(world);
  {
    std::vector<int> devs(world);
    for (int d = 0; d < world; ++d) devs[d] = d % gpus; // as ark places its ranks
    if (ncclCommInitAll(nccl.data(), world, devs.data()) != ncclSuccess) {
      if (world <= gpus) {
        std::fprintf(stderr, "ark_bench: ncclCommInitAll failed\n");
        return 1;
      }
      nccl.clear(); // NCCL refuses ranks that share a GPU
    }
  }
  opt.nccl = !nccl.empty();
#else
  opt.nccl = false;
#endif
  shared_state s(world, opt);
#if defined(ARK_BENCH_NCCL)
  s.nccl = std::move(nccl);
#endif
  std::vector<std::thread> ranks;
  std::vector<std::string> errors(world);
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      try {
        rank_runner(s, r).run();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < world; ++r)
    if (!errors[r].empty()) {
      std::fprintf(stderr, "rank %d: %s\n", r, errors[r].c_str());
      return 1;
    }
#if defined(ARK_BENCH_NCCL)
  for (auto c : s.nccl) ncclCommDestroy(c);
#endif
  report(s, command);
  return 0;
}
