// ark/communicator/registry.hpp: the buffers a communicator registered (windows): where each
// lives in every peer's address space (peer access in one process, IPC mappings across
// processes), which registration it was (a serial, the same on every rank), and the lookups the
// copy-engine collectives and custom collectives make. Registering and deregistering are
// collective: they succeed on every rank or on none.
#pragma once

#include "ark/communicator/checks.hpp"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

namespace ark {

template <device P>
class registry {
public:
  /// A registered buffer, and which registration it was (the same on every rank: registrations
  /// are collective, and one fails on every rank or none).
  struct registration : window_view {
    std::uint64_t serial = 0;
    /// base[0..world) in memory kernels read (symmetric<T>::bases): device memory on a GPU
    typename P::memory table{};
  };
  /// A recv buffer as every rank's registered one, and where it lies (which registration, the
  /// offset in it: detail::ce_value hashes it).
  struct placed_window {
    window_view v;
    std::uint64_t place;
  };

  registry() = default;
  registry(const registry&) = delete;
  registry& operator=(const registry&) = delete;

  /// Collective: registers `bytes` at `p` on every rank (the same size everywhere).
  const window_view& add(rank_runtime<P>& rt, void* p, std::size_t bytes) {
    if (!p || bytes == 0) detail::throw_invalid("register_buffer", "buffer is null or empty");
    const int world = rt.world(), rank = rt.rank();
    struct card {
      typename P::ipc_handle handle;
      std::uint64_t bytes;
    };
    const card mine{P::export_handle(typename P::memory{static_cast<std::byte*>(p), bytes}), bytes};
    std::vector<card> all(world);
    rt.boot().all_gather(&mine, all.data(), sizeof(card));
    for (int r = 0; r < world; ++r)
      if (all[r].bytes != bytes)
        detail::throw_invalid("register_buffer", "rank " + std::to_string(r) + " registered " +
                                                     std::to_string(all[r].bytes) + " bytes, this rank " +
                                                     std::to_string(bytes));
    auto w = std::make_unique<registration>();
    w->bytes = bytes;
    w->base[rank] = static_cast<std::byte*>(p);
    w->serial = serial_;
    std::exception_ptr failed;
    try {
      for (int r = 0; r < world; ++r)
        if (r != rank) w->base[r] = static_cast<std::byte*>(P::import_handle(all[r].handle, rt.cfg().device));
      std::vector<std::uintptr_t> bases(world);
      for (int r = 0; r < world; ++r) bases[r] = reinterpret_cast<std::uintptr_t>(w->base[r]);
      w->table = P::allocate(world * sizeof(std::uintptr_t), rt.cfg().device);
      P::copy(w->table.ptr, bases.data(), world * sizeof(std::uintptr_t));
    } catch (...) {
      failed = std::current_exception();
    }
    // every rank registers the window, or none does: the ranks' windows stay the same
    try {
      const std::uint8_t ok = !failed;
      std::vector<std::uint8_t> oks(world);
      rt.boot().all_gather(&ok, oks.data(), 1);
      if (failed) std::rethrow_exception(failed);
      for (int r = 0; r < world; ++r)
        if (!oks[r])
          throw platform_error(
              "register_buffer: rank " + std::to_string(r) +
              " could not map its peers' buffers (its error says why); nothing was registered");
    } catch (...) {
      close(*w, rank, world);
      throw;
    }
    ++serial_;
    windows_.push_back(std::move(w));
    return *windows_.back();
  }

  /// Collective: undoes add(p) on every rank. `drain` waits for the communicator's streams (our
  /// own calls' copies into the peers' buffers end first); then every rank says which
  /// registration it undoes, and a difference is refused on every rank, nothing undone.
  template <class Drain>
  void remove(rank_runtime<P>& rt, void* p, Drain&& drain) {
    const int world = rt.world(), rank = rt.rank();
    auto it = std::find_if(windows_.begin(), windows_.end(),
                           [&](const auto& w) { return w->base[rank] == static_cast<std::byte*>(p); });
    const std::uint64_t none = ~std::uint64_t{0}, mine = it == windows_.end() ? none : (*it)->serial;
    drain();
    std::vector<std::uint64_t> all(world);
    rt.boot().all_gather(&mine, all.data(), sizeof mine);
    if (mine == none) detail::throw_invalid("deregister_buffer", "no buffer was registered at this address");
    for (int r = 0; r < world; ++r)
      if (all[r] != mine)
        detail::throw_invalid("deregister_buffer",
                              "rank " + std::to_string(r) +
                                  (all[r] == none ? " names no registered buffer"
                                                  : " deregisters registration " + std::to_string(all[r])) +
                                  ", this rank registration " + std::to_string(mine) +
                                  ": nothing was undone");
    close(**it, rank, world);
    windows_.erase(it);
  }

  /// The registration containing [p, p + bytes) on rank `rank`, or null.
  const registration* find(const void* p, std::size_t bytes, int rank) const {
    const auto* b = static_cast<const std::byte*>(p);
    for (const auto& w : windows_)
      if (b >= w->base[rank] && b + bytes <= w->base[rank] + w->bytes) return w.get();
    return nullptr;
  }

  /// `count` elements at p as a symmetric buffer (team/symmetric.hpp), or an empty view (null
  /// bases) where they do not lie in one registered window.
  template <class T>
  symmetric<T> symmetric_of(T* p, std::size_t count, int rank) const {
    const registration* w = find(p, count * sizeof(T), rank);
    if (!w) return {p, nullptr, 0};
    return {p, reinterpret_cast<const std::uintptr_t*>(w->table.ptr), place_of(*w, p, rank)};
  }

  /// `out` (out_count elements) as every rank's registered recv buffer, and where it lies;
  /// throws if it is not registered.
  template <class T>
  placed_window recv_window(const char* call, T* out, std::size_t out_count, int rank, int world) const {
    const registration* w = find(out, out_count * sizeof(T), rank);
    if (!w)
      detail::throw_invalid(call,
                            "the copy-engine path writes straight into the peers' recv buffers: register "
                            "the recv buffer first (register_buffer)");
    placed_window p{*w, place_of(*w, out, rank)};
    const std::size_t shift = reinterpret_cast<const std::byte*>(out) - w->base[rank];
    for (int r = 0; r < world; ++r) p.v.base[r] += shift;
    return p;
  }

  /// Windows registered now.
  std::size_t size() const { return windows_.size(); }

  /// Unmaps every window (the communicator's end).
  void clear(int rank, int world) noexcept {
    for (const auto& w : windows_) close(*w, rank, world);
    windows_.clear();
  }

private:
  /// Where p lies: which registration, and the offset in it (symmetric<T>::place; the
  /// copy-engine paths hash it too).
  static std::uint64_t place_of(const registration& w, const void* p, int rank) {
    const auto offset = static_cast<std::uint64_t>(static_cast<const std::byte*>(p) - w.base[rank]);
    return w.serial << symmetric<int>::place_shift | offset;
  }

  /// Unmaps the peers' parts of a window (those mapped so far) and frees its table.
  static void close(registration& w, int rank, int world) noexcept {
    for (int r = 0; r < world; ++r)
      if (r != rank && w.base[r]) P::close_import(w.base[r]);
    P::release(w.table);
  }

  std::vector<std::unique_ptr<registration>> windows_;
  std::uint64_t serial_ = 0;
};

} // namespace ark
