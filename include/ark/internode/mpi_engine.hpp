// ark/internode/mpi_engine.hpp: the inter-node engine over MPI. Include it only where <mpi.h>
// is available (ark.hpp does not). It runs on its own duplicate of the rail's MPI communicator,
// which the hierarchical communicator splits off an mpi_bootstrap:
//
//   MPI_Init(&argc, &argv);
//   ark::hierarchical_communicator<ark::platform::host, ark::mpi_engine> comm(
//       ark::mpi_bootstrap(MPI_COMM_WORLD));
//
// Host memory (on a GPU the hierarchical communicator stages through it). MPI's collectives have
// no timeout, so each is a nonblocking request polled against the engine's bound: a node that
// never comes is ark::timeout_error, never a hang. MPI cannot cancel a collective request, so
// the one that timed out stays posted on the engine's communicator, which then refuses every call
// (its next collective would pair with the abandoned one), and keeps the buffers it was given:
// they are the engine's own staging, never the caller's. The 16-bit floats reduce through MPI ops
// of the engine's own (in float, rounded back at each step), the others through MPI's.
#pragma once

#include "ark/bootstrap/mpi.hpp"
#include "ark/internode/engine.hpp"

#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace ark {

class mpi_engine {
public:
  /// Over the rail's MPI communicator (duplicated: the engine's requests never meet the
  /// bootstrap's), with the bootstrap's bound unless one is given.
  explicit mpi_engine(mpi_bootstrap rail, std::chrono::milliseconds timeout = std::chrono::seconds(30))
      : timeout_(timeout) {
    MPI_Comm dup = MPI_COMM_NULL;
    check(MPI_Comm_dup(rail.comm(), &dup), "MPI_Comm_dup");
    comm_ = std::shared_ptr<MPI_Comm>(new MPI_Comm(dup), [](MPI_Comm* c) {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized && *c != MPI_COMM_NULL) MPI_Comm_free(c);
      delete c;
    });
    MPI_Comm_rank(dup, &rank_);
    MPI_Comm_size(dup, &size_);
  }

  int rank() { return rank_; }
  int size() { return size_; }

  void all_reduce(const void* in, void* out, std::size_t count, dtype t, engine_reduction r) {
    const char* call = "mpi_engine::all_reduce";
    detail::check_engine_reduction(r, call);
    start(call, count);
    auto& b = next(count * size_of(t), count * size_of(t));
    std::memcpy(b.in.data(), in, b.in.size());
    check(MPI_Iallreduce(b.in.data(), b.out.data(), as_int(count), type_of(t), op_of(t, r.k), comm(), &b.req),
          "MPI_Iallreduce");
    finish(call, b);
    divide(b.out.data(), count, t, r.divide_by);
    std::memcpy(out, b.out.data(), b.out.size());
  }

  void reduce_scatter(const void* in, void* out, std::size_t count, dtype t, engine_reduction r) {
    const char* call = "mpi_engine::reduce_scatter";
    detail::check_engine_reduction(r, call);
    start(call, count * static_cast<std::size_t>(size_));
    const std::size_t bytes = count * size_of(t);
    auto& b = next(bytes * static_cast<std::size_t>(size_), bytes);
    std::memcpy(b.in.data(), in, b.in.size());
    check(MPI_Ireduce_scatter_block(b.in.data(), b.out.data(), as_int(count), type_of(t), op_of(t, r.k),
                                    comm(), &b.req),
          "MPI_Ireduce_scatter_block");
    finish(call, b);
    divide(b.out.data(), count, t, r.divide_by);
    std::memcpy(out, b.out.data(), bytes);
  }

  void all_gather(const void* in, void* out, std::size_t bytes) {
    const char* call = "mpi_engine::all_gather";
    start(call, bytes * static_cast<std::size_t>(size_));
    auto& b = next(bytes, bytes * static_cast<std::size_t>(size_));
    std::memcpy(b.in.data(), in, bytes);
    check(MPI_Iallgather(b.in.data(), as_int(bytes), MPI_BYTE, b.out.data(), as_int(bytes), MPI_BYTE, comm(),
                         &b.req),
          "MPI_Iallgather");
    finish(call, b);
    std::memcpy(out, b.out.data(), b.out.size());
  }

  void broadcast(const void* in, void* out, std::size_t bytes, int root) {
    const char* call = "mpi_engine::broadcast";
    detail::check_root(call, root, size_);
    start(call, bytes);
    auto& b = next(0, bytes);
    if (rank_ == root) std::memcpy(b.out.data(), in, bytes);
    check(MPI_Ibcast(b.out.data(), as_int(bytes), MPI_BYTE, root, comm(), &b.req), "MPI_Ibcast");
    finish(call, b);
    std::memcpy(out, b.out.data(), bytes);
  }

  void reduce(const void* in, void* out, std::size_t count, dtype t, engine_reduction r, int root) {
    const char* call = "mpi_engine::reduce";
    detail::check_engine_reduction(r, call);
    detail::check_root(call, root, size_);
    start(call, count);
    const std::size_t bytes = count * size_of(t);
    auto& b = next(bytes, rank_ == root ? bytes : 0);
    std::memcpy(b.in.data(), in, bytes);
    check(MPI_Ireduce(b.in.data(), rank_ == root ? b.out.data() : nullptr, as_int(count), type_of(t),
                      op_of(t, r.k), root, comm(), &b.req),
          "MPI_Ireduce");
    finish(call, b);
    if (rank_ != root) return;
    divide(b.out.data(), count, t, r.divide_by);
    std::memcpy(out, b.out.data(), bytes);
  }

  void all_to_all(const void* in, void* out, std::size_t bytes) {
    const char* call = "mpi_engine::all_to_all";
    const std::size_t all = bytes * static_cast<std::size_t>(size_);
    start(call, all);
    auto& b = next(all, all);
    std::memcpy(b.in.data(), in, all);
    check(MPI_Ialltoall(b.in.data(), as_int(bytes), MPI_BYTE, b.out.data(), as_int(bytes), MPI_BYTE, comm(),
                        &b.req),
          "MPI_Ialltoall");
    finish(call, b);
    std::memcpy(out, b.out.data(), all);
  }

private:
  /// A request and the memory MPI reads and writes until it completes.
  struct request {
    MPI_Request req = MPI_REQUEST_NULL;
    std::vector<std::byte> in, out;
  };

  MPI_Comm comm() const { return *comm_; }

  /// Refuses a call after a timeout, and counts MPI cannot take (it counts in int).
  void start(const char* call, std::size_t elements) const {
    if (abandoned_)
      detail::throw_invalid(call,
                            "an earlier call timed out: its request is still posted on the engine's MPI "
                            "communicator, which is unusable");
    if (elements > static_cast<std::size_t>(INT_MAX))
      detail::throw_invalid(call, std::to_string(elements) + " elements is more than MPI counts (INT_MAX)");
  }
  static int as_int(std::size_t n) { return static_cast<int>(n); }

  /// The staging of the next request, sized.
  request& next(std::size_t in_bytes, std::size_t out_bytes) {
    if (!staging_) staging_ = std::make_unique<request>();
    staging_->in.resize(in_bytes);
    staging_->out.resize(out_bytes);
    return *staging_;
  }
  /// Polls the request to its end or the bound (detail::mpi_test_until); on timeout, MPI keeps
  /// the staging for good.
  void finish(const char* call, request& b) {
    if (detail::mpi_test_until(b.req, timeout_, "mpi_engine")) return;
    abandoned_ = true;
    (void)staging_.release(); // MPI may still write into it: it is left to MPI
    throw timeout_error(std::string(call) + ": node " + std::to_string(rank_) + " of " +
                            std::to_string(size_) + " waited " + std::to_string(timeout_.count()) +
                            " ms for the other nodes of its rail",
                        {});
  }

  static void check(int rc, const char* call) {
    if (rc != MPI_SUCCESS) throw platform_error(std::string("mpi_engine: ") + call + " failed");
  }

  static void divide(std::byte* p, std::size_t count, dtype t, std::uint32_t by) {
    if (by <= 1) return;
    with_dtype(t, [&](auto e) {
      using T = decltype(e);
      T* v = reinterpret_cast<T*>(p);
      const T* src[] = {v};
      detail::reduce_on_host<T>(src, 1, v, count, engine_reduction{op::dynamic::kind::sum, by});
    });
  }

  static MPI_Datatype type_of(dtype t) {
    switch (t) {
    case dtype::f32:
      return MPI_FLOAT;
    case dtype::f64:
      return MPI_DOUBLE;
    case dtype::i32:
      return MPI_INT32_T;
    case dtype::i64:
      return MPI_INT64_T;
    case dtype::u8:
      return MPI_UINT8_T;
    case dtype::i8:
      return MPI_INT8_T;
    default: // f16, bf16: 16 bits that the engine's own ops read
      return MPI_UINT16_T;
    }
  }
  /// MPI's op, or for the 16-bit floats one of the engine's (made once per process).
  static MPI_Op op_of(dtype t, op::dynamic::kind k) {
    using K = op::dynamic::kind;
    if (t == dtype::f16 || t == dtype::bf16) {
      static const auto ops = [] {
        struct table {
          MPI_Op f16[4], bf16[4];
        } m;
        make_half_ops<fp16>(m.f16);
        make_half_ops<bf16>(m.bf16);
        return m;
      }();
      const int i = k == K::prod ? 1 : k == K::min ? 2 : k == K::max ? 3 : 0;
      return t == dtype::f16 ? ops.f16[i] : ops.bf16[i];
    }
    return k == K::prod ? MPI_PROD : k == K::min ? MPI_MIN : k == K::max ? MPI_MAX : MPI_SUM;
  }
  template <class H>
  static void make_half_ops(MPI_Op* out) {
    MPI_Op_create(&half_op<H, op::dynamic::kind::sum>, 1, &out[0]);
    MPI_Op_create(&half_op<H, op::dynamic::kind::prod>, 1, &out[1]);
    MPI_Op_create(&half_op<H, op::dynamic::kind::min>, 1, &out[2]);
    MPI_Op_create(&half_op<H, op::dynamic::kind::max>, 1, &out[3]);
  }
  /// inout[i] = in[i] (op) inout[i], in float.
  template <class H, op::dynamic::kind K>
  static void half_op(void* in, void* inout, int* len, MPI_Datatype*) {
    const op::dynamic f{K};
    const H* a = static_cast<const H*>(in);
    H* b = static_cast<H*>(inout);
    for (int i = 0; i < *len; ++i) b[i] = from_acc<H>(f(to_acc(a[i]), to_acc(b[i])));
  }

  std::shared_ptr<MPI_Comm> comm_;
  std::chrono::milliseconds timeout_;
  int rank_ = 0, size_ = 1;
  std::unique_ptr<request> staging_;
  bool abandoned_ = false;
};

static_assert(internode_engine<mpi_engine>);

} // namespace ark
