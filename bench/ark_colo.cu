// bench/ark_colo.cu: GPU-driven DMA engines and co-location with compute, ark against NCCL.
//
// One process drives every GPU (one host thread each); needs 2 GPUs. Three parts:
//   stream   rank 0's kernel streams back-to-back messages (8 KB ... 4 MB) to rank 1 through
//            each DMA backend's channel; 1 block and 32 blocks; GB/s;
//   interf   a cuBLAS bf16 GEMM (8192^3) loops on one stream of every GPU while a collective loops
//            on another: GEMM slowdown and the collective's busbw, alone and together, for each
//            ark variant (thread copies with and without an SM budget, TMA, the copy engine through
//            the proxy, dma::copy_engine with its reduction kernel bounded or not, the
//            copy-engine-only all-gather) and NCCL; with --parts ...,probe also the stream operations
//            the copy-engine path is made of (copies, flag writes, stream waits), one by one;
//   colo     a training-like loop (GEMM 4096^3 + all-reduce of 128 MB of gradients, in order on
//            one stream) and an inference-like loop (GEMMs 256 x 8192 x 8192) on a second, high
//            priority stream: makespan co-located over makespan back to back, per backend.
// Prints tables and writes a CSV (part, variant, size, columns...). Plots: scripts/plot_colo.py.
//
//   ark_colo [--csv FILE] [--quick] [--parts stream,interf,colo]
#include "ark/ark.hpp"

#if defined(ARK_COMPILER_CUDA) // the GEMM and the baseline: cuBLAS and NCCL (HIP: the stream part only)
#include <cublas_v2.h>
#include <nccl.h>
#define ARK_COLO_VENDOR_LIBS 1
#endif

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace rt = ark::detail::rt;
using gpu = ark::platform::gpu;
using comm_t = ark::communicator<gpu>;

#define CK(x) rt::check((x), #x)
#if defined(ARK_COLO_VENDOR_LIBS)
#define CB(x)                                                                                                \
  do {                                                                                                       \
    if ((x) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublas: " #x);                               \
  } while (0)
#define CN(x)                                                                                                \
  do {                                                                                                       \
    if ((x) != ncclSuccess) throw std::runtime_error("nccl: " #x);                                           \
  } while (0)
#endif

bool quick = false;
std::string parts = "stream,interf,colo";

/// Progress on stderr (unbuffered), so that a run cut short still says where it was.
void progress(int rank, const std::string& what) {
  if (rank == 0) std::fprintf(stderr, "[ark_colo] %s\n", what.c_str());
}

/// Config of the SM and TMA variants: the default team with staging.
comm_t::config sm_config(int rank) {
  comm_t::config c;
  c.device = rank;
  c.team.staging = true;
  c.team.max_depth = 4; // the depth its variants name
  return c;
}
/// Config of the copy-engine variants: few workers, large slots (the copy engine wants MB chunks).
comm_t::config ce_config(int rank) {
  comm_t::config c;
  c.device = rank;
  c.team.workers = 32;
  c.team.max_depth = 4;
  c.team.slot_bytes = 4 << 20;
  c.team.staging = true;
  return c;
}
/// The same, served by device graphs: GPU threads trigger the copy engine with no CPU proxy.
comm_t::config graph_config(int rank) {
  comm_t::config c = ce_config(rank);
  c.engine = ark::engine_path::device_graphs;
  return c;
}

// ---- part 1: the message stream ---------------------------------------------------------------
/// Rank 0 sends `count` messages of `bytes` to rank 1 through B's channel; workers take messages
/// round robin; a message longer than a slot takes several steps.
template <class B>
struct message_stream {
  const std::byte* src;
  std::size_t bytes;
  int count;
  template <class Ctx>
  ARK_HD bool operator()(const Ctx& ctx) const {
    const unsigned w = ctx.worker, nw = ctx.workers;
    const std::size_t slot = B::ll ? ctx.lay().ll_slot_bytes : ctx.lay().slot_bytes;
    std::uint64_t step = ctx.round;
    for (int m = static_cast<int>(w); m < count; m += static_cast<int>(nw))
      for (std::size_t off = 0; off < bytes; off += slot, ++step) {
        const std::size_t n = bytes - off < slot ? bytes - off : slot;
        if (ctx.rank() == 0) {
          if (!B::send(ctx, ark::dma::peers::only(1), step, src + off, n)) return false;
        } else if (ctx.rank() == 1) {
          if (!B::open_recv(ctx, ark::dma::peers::only(0), step)) return false;
          B::close_recv(ctx, ark::dma::peers::only(0), step);
        }
      }
    return ctx.finish(step - ctx.round);
  }
};

// ---- shared state ---------------------------------------------------------------------------------
struct row {
  std::string part, variant;
  std::size_t bytes;
  std::vector<double> v;
};

struct shared {
  int world;
  std::barrier<> sync;
  std::shared_ptr<ark::in_process_group> g_sm, g_ce, g_gr;
#if defined(ARK_COLO_VENDOR_LIBS)
  std::vector<ncclComm_t> nccl;
#endif
  std::vector<row> rows;
  int iters = 0; ///< a loop count every rank must agree on, decided by rank 0
  explicit shared(int w)
      : world(w), sync(w), g_sm(std::make_shared<ark::in_process_group>(w)),
        g_ce(std::make_shared<ark::in_process_group>(w)), g_gr(std::make_shared<ark::in_process_group>(w)) {
#if defined(ARK_COLO_VENDOR_LIBS)
    nccl.resize(w);
#endif
  }
};

struct timer {
  rt::event_t a{}, b{};
  timer() {
    CK(rt::event_create(&a));
    CK(rt::event_create(&b));
  }
  ~timer() {
    (void)rt::event_destroy(a); // a destructor: nothing to report to
    (void)rt::event_destroy(b);
  }
  void start(rt::stream_t s) { CK(rt::event_record(a, s)); }
  void stop(rt::stream_t s) { CK(rt::event_record(b, s)); }
  double ms() {
    CK(rt::event_synchronize(b));
    float m = 0;
    CK(rt::event_elapsed_ms(&m, a, b));
    return m;
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

class runner {
public:
  runner(shared& s, int rank) : s_(s), rank_(rank) {
    sm_ = std::make_unique<comm_t>(ark::in_process_bootstrap(s.g_sm, rank), sm_config(rank));
    ce_ = std::make_unique<comm_t>(ark::in_process_bootstrap(s.g_ce, rank), ce_config(rank));
#if defined(ARK_HAS_DEVICE_GRAPH_LAUNCH)
    const auto t0 = std::chrono::steady_clock::now();
    gr_ = std::make_unique<comm_t>(ark::in_process_bootstrap(s.g_gr, rank), graph_config(rank));
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const ark::layout& l = gr_->team().lay;
    if (rank == 0)
      std::printf("device graphs: %u copy graphs per rank (%u workers x %d peers x %u slots x %u sizes), "
                  "communicator set up in %.0f ms\n",
                  l.workers * (s.world - 1) * l.slots * ark::dma::graph_classes(l), l.workers, s.world - 1,
                  l.slots, ark::dma::graph_classes(l), ms);
#endif
    CK(rt::set_device(rank));
    int lo = 0, hi = 0;
    CK(rt::stream_priority_range(&lo, &hi));
    CK(rt::stream_create(&coll_));
    CK(rt::stream_create(&gemm_));
    CK(rt::stream_create_priority(&infer_, hi));
    buf_ = gpu::allocate(buf_bytes, rank);
    out_ = gpu::allocate(buf_bytes, rank);
    ce_->register_buffer(out_.ptr, buf_bytes);
#if defined(ARK_COLO_VENDOR_LIBS)
    CB(cublasCreate(&blas_));
    CB(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));
#endif
    const std::size_t n = 8192;
    a_ = gpu::allocate(n * n * 2, rank);
    b_ = gpu::allocate(n * n * 2, rank);
    c_ = gpu::allocate(n * n * 2, rank);
    c2_ = gpu::allocate(n * n * 2, rank);
    flag_ = gpu::allocate(256, rank);
    CK(rt::memset(a_.ptr, 0x3c, n * n * 2)); // bf16 ~ 0.0115: finite products
    CK(rt::memset(b_.ptr, 0x3c, n * n * 2));
    CK(rt::memset(buf_.ptr, 0, buf_bytes));
    CK(rt::device_synchronize());
  }
  ~runner() {
#if defined(ARK_COLO_VENDOR_LIBS)
    cublasDestroy(blas_);
#endif
    for (auto* m : {&buf_, &out_, &a_, &b_, &c_, &c2_, &flag_}) gpu::release(*m);
    for (auto s : {coll_, gemm_, infer_}) (void)rt::stream_destroy(s); // a destructor: nothing to report to
  }

#if defined(ARK_COLO_VENDOR_LIBS)
  void nccl_init(ncclUniqueId id) {
    CK(rt::set_device(rank_));
    CN(ncclCommInitRank(&s_.nccl[rank_], s_.world, id, rank_));
  }

#endif

  void run_all() {
    if (parts.find("stream") != std::string::npos) stream_part();
#if defined(ARK_COLO_VENDOR_LIBS)
    if (parts.find("interf") != std::string::npos) interference_part();
    if (parts.find("colo") != std::string::npos) colocation_part();
#else
    progress(rank_, "interf and colo need cuBLAS and NCCL: skipped");
#endif
  }

private:
  static constexpr std::size_t buf_bytes = 256 << 20;

  void record(const std::string& part, const std::string& v, std::size_t bytes, std::vector<double> vals) {
    if (rank_ == 0) s_.rows.push_back({part, v, bytes, std::move(vals)});
  }

  // -- part 1 --
  template <class B>
  double stream_rate(comm_t& c, std::size_t bytes, unsigned workers) {
    progress(rank_, "stream " + std::to_string(B::id) + " " + std::to_string(bytes) + " x" +
                        std::to_string(workers));
    const std::size_t total = (bytes <= (64 << 10) ? (32 << 20) : (256 << 20)) / (quick ? 4 : 1);
    const int count = static_cast<int>(std::max<std::size_t>(workers * 4, total / bytes));
    message_stream<B> f{buf_.ptr, bytes, count};
    timer t;
    std::vector<double> us;
    for (int rep = 0; rep < 4; ++rep) {
      s_.sync.arrive_and_wait();
      t.start(c.stream());
      c.template launch<B>(f, workers);
      t.stop(c.stream());
      c.synchronize();
      if (rep) us.push_back(t.ms() * 1e3);
    }
    return static_cast<double>(bytes) * count / (median(us) * 1e3); // GB/s
  }

  void stream_part() {
    if (rank_ == 0)
      std::printf("\n== stream: rank 0 -> rank 1, back-to-back messages (GB/s)\n%-22s %6s %10s\n", "backend",
                  "blocks", "msg_bytes");
    for (unsigned workers : {1u, 32u})
      for (std::size_t bytes : {8u << 10, 64u << 10, 1u << 20, 4u << 20, 16u << 20}) {
        auto line = [&](const char* name, double gbs) {
          if (rank_ == 0) std::printf("%-22s %6u %10zu %8.1f\n", name, workers, bytes, gbs);
          record("stream", std::string(name) + "/" + std::to_string(workers), bytes, {gbs});
        };
        line("thread_copy", stream_rate<ark::dma::thread_copy<4>>(*sm_, bytes, workers));
        line("ll_packet", stream_rate<ark::dma::ll_packet<4>>(*sm_, bytes, workers));
#if defined(ARK_COMPILER_CUDA)
        line("tma", stream_rate<ark::dma::tma<4>>(*sm_, bytes, workers));
#endif
        line("copy_engine(proxy)", stream_rate<ark::dma::proxy_engine<4>>(*ce_, bytes, workers));
#if defined(ARK_HAS_DEVICE_GRAPH_LAUNCH)
        line("copy_engine(graphs)", stream_rate<ark::dma::proxy_engine<4>>(*gr_, bytes, workers));
#endif
      }
  }

#if defined(ARK_COLO_VENDOR_LIBS)
  // -- GEMMs --
  void gemm(rt::stream_t s, int m, int n, int k, void* c) {
    const float alpha = 1.0f, beta = 0.0f;
    CB(cublasSetStream(blas_, s));
    CB(cublasGemmEx(blas_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, a_.ptr, CUDA_R_16BF, m, b_.ptr,
                    CUDA_R_16BF, k, &beta, c, CUDA_R_16BF, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }

  // -- part 2 --
  /// The collective variants: (name, per-rank bytes moved for busbw, busbw factor, enqueue).
  struct variant {
    std::string name;
    double bus_factor;
    std::function<void(rt::stream_t)> run;
  };

  std::vector<variant> variants(std::size_t bytes) {
    const std::size_t n = bytes / 4;
    auto* in = reinterpret_cast<float*>(buf_.ptr);
    auto* out = reinterpret_cast<float*>(out_.ptr);
    const double ar = 2.0 * (s_.world - 1) / s_.world, ag = double(s_.world - 1) / s_.world;
    auto opts = [](rt::stream_t s, int ctas) {
      ark::call_options<gpu> o;
      o.stream = s;
      o.max_ctas = ctas;
      return o;
    };
    std::vector<variant> v;
    v.push_back({"nccl all_reduce", ar, [=, this](rt::stream_t s) {
                   CN(ncclAllReduce(in, out, n, ncclFloat, ncclSum, s_.nccl[rank_], s));
                 }});
    v.push_back({"ark all_reduce sm", ar, [=, this](rt::stream_t s) {
                   sm_->all_reduce<ark::algo::two_shot, ark::dma::thread_copy<4>>(in, out, n, ark::op::sum{},
                                                                                  opts(s, -1));
                 }});
    v.push_back({"ark all_reduce sm16", ar, [=, this](rt::stream_t s) {
                   sm_->all_reduce<ark::algo::two_shot, ark::dma::thread_copy<4>>(in, out, n, ark::op::sum{},
                                                                                  opts(s, 16));
                 }});
    v.push_back({"ark all_reduce tma16", ar, [=, this](rt::stream_t s) {
                   sm_->all_reduce<ark::algo::two_shot, ark::dma::tma<4>>(in, out, n, ark::op::sum{},
                                                                          opts(s, 16));
                 }});
    v.push_back({"ark all_reduce proxy8", ar, [=, this](rt::stream_t s) {
                   ce_->all_reduce<ark::algo::two_shot, ark::dma::proxy_engine<4>>(in, out, n, ark::op::sum{},
                                                                                   opts(s, 8));
                 }});
#if defined(ARK_HAS_DEVICE_GRAPH_LAUNCH)
    v.push_back({"ark all_reduce graphs8", ar, [=, this](rt::stream_t s) {
                   gr_->all_reduce<ark::algo::two_shot, ark::dma::proxy_engine<4>>(in, out, n, ark::op::sum{},
                                                                                   opts(s, 8));
                 }});
#endif
    v.push_back({"ark all_reduce ce", ar, [=, this](rt::stream_t s) {
                   ce_->all_reduce<ark::algo::automatic, ark::dma::copy_engine>(in, out, n, ark::op::sum{},
                                                                                opts(s, -1));
                 }});
    v.push_back({"ark all_reduce ce16", ar, [=, this](rt::stream_t s) {
                   ce_->all_reduce<ark::algo::automatic, ark::dma::copy_engine>(in, out, n, ark::op::sum{},
                                                                                opts(s, 16));
                 }});
    const std::size_t agn = n / s_.world;
    v.push_back({"nccl all_gather", ag, [=, this](rt::stream_t s) {
                   CN(ncclAllGather(in, out, agn, ncclFloat, s_.nccl[rank_], s));
                 }});
    v.push_back({"ark all_gather sm16", ag, [=, this](rt::stream_t s) {
                   sm_->all_gather<ark::algo::direct, ark::dma::thread_copy<4>>(in, out, agn, opts(s, 16));
                 }});
    v.push_back(
        {"ark all_gather ce0", ag, [=, this](rt::stream_t s) { ce_->all_gather(in, out, agn, opts(s, 0)); }});
    if (parts.find("probe") != std::string::npos) {
      // what in the copy-engine path costs the GEMM: copies alone, with flag writes, with waits
      const int peer = (rank_ + 1) % s_.world;
      std::byte* dst = static_cast<std::byte*>(ce_->remote(out, peer));
      auto* flag = reinterpret_cast<std::uint64_t*>(flag_.ptr);
      const std::size_t half = bytes / 2;
      v.push_back({"probe copy", 0.5, [=](rt::stream_t s) { CK(rt::memcpy_async(dst, in, half, s)); }});
      v.push_back({"probe copy+write", 0.5, [=](rt::stream_t s) {
                     CK(rt::memcpy_async(dst, in, half, s));
                     CK(rt::stream_write_value(s, flag, 7));
                   }});
      v.push_back({"probe copy+write+wait", 0.5, [=](rt::stream_t s) {
                     CK(rt::memcpy_async(dst, in, half, s));
                     CK(rt::stream_write_value(s, flag, 7));
                     CK(rt::stream_wait_value(s, flag, 7));
                   }});
    }
    return v;
  }

  /// ms per call of `v` alone on the collective stream.
  double coll_alone(const variant& v, std::size_t bytes, int iters) {
    timer t;
    s_.sync.arrive_and_wait();
    v.run(coll_);
    CK(rt::stream_synchronize(coll_));
    s_.sync.arrive_and_wait();
    t.start(coll_);
    for (int i = 0; i < iters; ++i) v.run(coll_);
    t.stop(coll_);
    const double ms = t.ms() / iters;
    sync_all();
    (void)bytes;
    return ms;
  }

  void sync_all() {
    sm_->synchronize();
    ce_->synchronize();
    CK(rt::device_synchronize());
  }

  void interference_part() {
    const std::size_t bytes = 64 << 20;
    const int gemms = quick ? 10 : 30;
    timer tg;
    // GEMM alone
    gemm(gemm_, 8192, 8192, 8192, c_.ptr);
    CK(rt::stream_synchronize(gemm_));
    s_.sync.arrive_and_wait();
    tg.start(gemm_);
    for (int i = 0; i < gemms; ++i) gemm(gemm_, 8192, 8192, 8192, c_.ptr);
    tg.stop(gemm_);
    const double gemm_alone = tg.ms() / gemms;
    if (rank_ == 0)
      std::printf("\n== interference: bf16 GEMM 8192^3 beside a collective of %zu MB per rank\n"
                  "GEMM alone %.3f ms (%.0f TFLOP/s)\n%-22s %10s %10s %9s %12s %12s %8s\n",
                  bytes >> 20, gemm_alone, 2.0 * 8192 * 8192 * 8192 / (gemm_alone * 1e9), "collective",
                  "coll_ms", "coll_busbw", "gemm_ms", "gemm_slowdn%", "busbw_beside", "kept%");
    record("interf", "gemm_alone", 0, {gemm_alone});
    for (const variant& v : variants(bytes)) {
      progress(rank_, "interf " + v.name);
      const double alone = coll_alone(v, bytes, quick ? 10 : 30);
      // every rank must make the same number of calls: rank 0 decides
      if (rank_ == 0) s_.iters = std::max(2, static_cast<int>(gemm_alone * gemms / alone * 1.05));
      s_.sync.arrive_and_wait();
      const int iters = s_.iters;
      s_.sync.arrive_and_wait();
      timer tc;
      s_.sync.arrive_and_wait();
      tg.start(gemm_);
      tc.start(coll_);
      for (int i = 0; i < iters; ++i) v.run(coll_);
      for (int i = 0; i < gemms; ++i) gemm(gemm_, 8192, 8192, 8192, c_.ptr);
      tg.stop(gemm_);
      tc.stop(coll_);
      const double g = tg.ms() / gemms, c = tc.ms() / iters;
      sync_all();
      const double bus_alone = bytes * v.bus_factor / (alone * 1e6),
                   bus_beside = bytes * v.bus_factor / (c * 1e6);
      if (rank_ == 0)
        std::printf("%-22s %10.3f %10.1f %9.3f %12.1f %12.1f %8.0f\n", v.name.c_str(), alone, bus_alone, g,
                    100.0 * (g / gemm_alone - 1), bus_beside, 100.0 * bus_beside / bus_alone);
      record("interf", v.name, bytes, {alone, bus_alone, g, 100.0 * (g / gemm_alone - 1), bus_beside});
    }
  }

  // -- part 3 --
  void colocation_part() {
    const std::size_t grad = 128 << 20;
    const int train_iters = quick ? 5 : 20, infer_iters = quick ? 20 : 80;
    if (rank_ == 0)
      std::printf(
          "\n== co-location: train (GEMM 4096^3 + all-reduce %zu MB) x %d and infer (GEMM 256x8192x8192 "
          "x 4) x %d\n%-22s %10s %10s %12s %12s %8s\n",
          grad >> 20, train_iters, infer_iters, "all-reduce", "train_ms", "infer_ms", "back2back",
          "colocated", "ratio");
    for (const variant& v : variants(grad)) {
      if (v.name.find("all_reduce") == std::string::npos) continue;
      progress(rank_, "colo " + v.name);
      auto train = [&] {
        for (int i = 0; i < train_iters; ++i) {
          gemm(coll_, 4096, 4096, 4096, c_.ptr);
          v.run(coll_);
        }
      };
      auto infer = [&] {
        for (int i = 0; i < infer_iters; ++i)
          for (int k = 0; k < 4; ++k) gemm(infer_, 256, 8192, 8192, c2_.ptr);
      };
      train(); // warm up both loops
      infer();
      sync_all();
      auto wall = [&](auto&& f) {
        s_.sync.arrive_and_wait();
        const auto t0 = std::chrono::steady_clock::now();
        f();
        CK(rt::stream_synchronize(coll_));
        CK(rt::stream_synchronize(infer_));
        sync_all();
        s_.sync.arrive_and_wait();
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      };
      const double t_train = wall(train), t_infer = wall(infer);
      const double t_both = wall([&] {
        train();
        infer();
      });
      if (rank_ == 0)
        std::printf("%-22s %10.2f %10.2f %12.2f %12.2f %8.2f\n", v.name.c_str(), t_train, t_infer,
                    t_train + t_infer, t_both, t_both / (t_train + t_infer));
      record("colo", v.name, grad,
             {t_train, t_infer, t_train + t_infer, t_both, t_both / (t_train + t_infer)});
    }
  }

#endif

  shared& s_;
  int rank_;
  std::unique_ptr<comm_t> sm_, ce_, gr_; // gr_: device graphs (built with -rdc=true)
  rt::stream_t coll_{}, gemm_{}, infer_{};
  gpu::memory buf_, out_, a_, b_, c_, c2_, flag_;
#if defined(ARK_COLO_VENDOR_LIBS)
  cublasHandle_t blas_{};
#endif
};

} // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // Streams share the GPU's hardware queues (8 by default): a stream waiting on a flag would then
  // hold back kernels of another stream on the same queue, e.g. the GEMM beside the collective.
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  std::string csv = "ark_colo.csv";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick"))
      quick = true;
    else if (!std::strcmp(argv[i], "--parts") && i + 1 < argc)
      parts = argv[++i];
    else if (!std::strcmp(argv[i], "--csv") && i + 1 < argc)
      csv = argv[++i];
  }
  const int world = gpu::device_count();
  if (world < 2) {
    std::printf("ark_colo needs 2 GPUs, found %d\n", world);
    return 0;
  }
  shared s(world);
#if defined(ARK_COLO_VENDOR_LIBS)
  ncclUniqueId id;
  CN(ncclGetUniqueId(&id));
#endif
  std::vector<std::unique_ptr<runner>> runners(world);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(world);
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        runners[r] = std::make_unique<runner>(s, r);
        s.sync.arrive_and_wait();
#if defined(ARK_COLO_VENDOR_LIBS)
        runners[r]->nccl_init(id);
#endif
        s.sync.arrive_and_wait();
        runners[r]->run_all();
        s.sync.arrive_and_wait();
        runners[r].reset();
      } catch (const std::exception& e) {
        errors[r] = e.what();
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        std::fflush(stderr);
        std::_Exit(1);
      }
    });
  for (auto& t : threads) t.join();
#if defined(ARK_COLO_VENDOR_LIBS)
  for (auto c : s.nccl) ncclCommDestroy(c);
#endif
  std::ofstream f(csv);
  f << "part,variant,bytes,v0,v1,v2,v3,v4\n";
  for (const auto& r : s.rows) {
    f << r.part << ',' << r.variant << ',' << r.bytes;
    for (double x : r.v) f << ',' << x;
    f << '\n';
  }
  std::printf("\nwrote %s\n", csv.c_str());
  return 0;
}
