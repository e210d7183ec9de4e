// ark/dma/thread_copy.hpp: the threads of the scope move the bytes themselves, with 16-byte
// vector stores straight into peer memory; a flag store after a system fence announces them.
// On GPUs this is the SM path over NVLink; on the host, CPU threads storing into shared memory.
#pragma once

#include "ark/dma/simple_channel.hpp"

namespace ark::dma {

/// Raw transfers done by the threads of the scope; shared by thread_copy and ll_packet.
template <unsigned Depth>
struct thread_transfers {
  static_assert(Depth >= 1, "pipeline depth must be at least 1");
  using dma_concept = backend_tag;
  static constexpr unsigned depth = Depth;
  static constexpr bool direct = true;

  template <class Ctx>
  ARK_HD static bool put(const Ctx& ctx, void* dst, const void* src, std::size_t bytes) {
    group_copy(ctx, dst, src, bytes);
    return true;
  }

  template <class Ctx>
  ARK_HD static void signal(const Ctx& ctx, std::uint64_t* flag, std::uint64_t value) {
    fenced_signal(ctx, flag, value);
  }

  template <class Ctx>
  ARK_HD static bool wait(const Ctx& ctx, const std::uint64_t* flag, std::uint64_t value, wait_kind kind,
                          int peer) {
    return wait_flag(ctx, flag, value, kind, peer);
  }

  template <class Ctx>
  ARK_HD static bool flush(const Ctx&) {
    return true; // stores are complete when the threads pass the next barrier
  }
};

template <unsigned Depth>
struct thread_copy : thread_transfers<Depth>, simple_channel<thread_copy<Depth>> {
  static constexpr std::uint8_t id = 1;
  using simple_channel<thread_copy<Depth>>::ll;
  using simple_channel<thread_copy<Depth>>::vec_bytes;
};

/// Whether B is a thread_copy<Depth>.
template <class B>
inline constexpr bool is_thread_copy = false;
template <unsigned Depth>
inline constexpr bool is_thread_copy<thread_copy<Depth>> = true;

} // namespace ark::dma
