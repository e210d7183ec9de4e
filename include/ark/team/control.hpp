// ark/team/control.hpp: a rank's control block, in memory its host reads while kernels run: the
// first failure a worker recorded, the failure of the host thread serving the rank's engine, and
// the abort flag every wait of the rank polls. How a record is published and read.
#pragma once

#include "ark/config.hpp"
#include "ark/core/error.hpp"

#include <atomic>
#include <cstdint>

namespace ark {

/// Host-visible control block of a rank: its error records and abort flag. Each record has one
/// writer at a time, which publishes it with a release store of its code, written last.
struct control_block {
  error_record err;      ///< the first failure a worker recorded (record_error, after a claim)
  std::uint64_t abort;   ///< raised: every wait of the rank ends
  error_record host_err; ///< a failure of the host thread serving the rank's engine (gpu_proxy)
  std::uint64_t pad[4];
};

/// Writes a failure into record `e` and publishes it: the fields first, then a release store of
/// the code, which readers acquire first (read_error). The caller is the record's one writer
/// (record_error after its claim; gpu_proxy's thread for host_err); P: the writer's platform.
template <class P>
ARK_HD void publish_record(error_record& e, errc code, std::int32_t peer, std::uint32_t worker,
                           std::uint32_t what, std::uint64_t step, std::uint64_t mine, std::uint64_t theirs) {
  e.peer = peer;
  e.worker = worker;
  e.what = what;
  e.step = step;
  e.mine = mine;
  e.theirs = theirs;
  P::fence();
  P::store_release(&e.code, static_cast<std::uint32_t>(code));
  P::fence();
}

namespace detail {
inline error_record read_record(const error_record& r) {
  const std::uint32_t v =
      std::atomic_ref<std::uint32_t>(const_cast<std::uint32_t&>(r.code)).load(std::memory_order_acquire);
  if (v == 0) return {};
  error_record e = r; // published: nobody writes it until clear_error
  e.code = v;
  return e;
}
inline void clear_record(error_record& r) {
  r.peer = 0, r.worker = 0, r.what = 0, r.step = 0, r.mine = 0, r.theirs = 0;
  std::atomic_ref<std::uint32_t>(r.code).store(0, std::memory_order_release);
}
} // namespace detail

/// The host's reading of a rank's failure while its writers may still run (kernels, engine
/// threads): a code acquired first, the rest of its record only once it was published. A failure
/// of the engine's host thread comes first: it raises the abort that ends the workers' waits.
inline error_record read_error(const control_block& c) {
  const error_record h = detail::read_record(c.host_err);
  return h.code ? h : detail::read_record(c.err);
}

/// Clears a rank's error records and abort flag, for a new start; nothing of the rank may run.
inline void clear_error(control_block& c) {
  detail::clear_record(c.err);
  detail::clear_record(c.host_err);
  std::atomic_ref<std::uint64_t>(c.abort).store(0, std::memory_order_release);
}

} // namespace ark
