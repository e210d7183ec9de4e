// ark/dma/common.hpp: pieces every DMA backend shares: which peers an operation addresses, how the
// threads of a scope divide per-peer work, and byte copies that respect a buffer's end.
#pragma once

#include "ark/concepts/dma_backend.hpp"
#include "ark/core/vec.hpp"
#include "ark/team/context.hpp"

#include <bit>
#include <cstddef>
#include <cstdint>

namespace ark::dma {

// load_prefix and store_prefix's byte paths assemble and split words with shifts
static_assert(std::endian::native == std::endian::little, "ark: byte paths assume little-endian words");

/// Runs f(peer) for the peers in `ps`, each peer on one thread of the scope (thread 0 for a single
/// peer). Returns false in this thread if f failed here; callers combine with g.sync_any.
/// Stops at the first failure: one timeout is reported, not one per peer.
template <class Ctx, class F>
ARK_HD bool for_each_peer(const Ctx& ctx, peers ps, F&& f) {
  const int tid = static_cast<int>(ctx.g.thread_rank()), nt = static_cast<int>(ctx.g.size());
  if (ps.one >= 0) return tid == 0 ? f(ps.one) : true;
  for (int p = tid; p < ctx.world(); p += nt)
    if (p != ctx.rank() && !f(p)) return false;
  return true;
}

/// The first `valid` (< V) bytes at s as a vector, the rest zero. Built with shifts, in registers:
/// a vector written byte by byte at run-time offsets lives in local memory, and the compiler then
/// moved the vector of the aligned path through it too (a local store and load per call on the LL
/// latency path).
template <std::size_t V, class Byte>
ARK_HD vec<V> load_bytes(const Byte* s, std::size_t valid) {
  const std::size_t n = valid < V ? valid : V;
  std::uint64_t lo = 0;
  [[maybe_unused]] std::uint64_t hi = 0; // read for 16-byte vectors only
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t b = s[i];
    if (i < 8)
      lo |= b << (8 * i);
    else
      hi |= b << (8 * (i - 8));
  }
  vec<V> v{};
  v.w[0] = lo;
  if constexpr (V == 16) v.w[1] = hi;
  return v;
}

/// Loads the first `valid` bytes of a V-byte vector at p, zero-filling the rest: never reads past
/// the end of a user buffer, and takes the byte path where p is not V-aligned.
template <class P, std::size_t V>
ARK_HD vec<V> load_prefix(const void* p, std::size_t valid) {
  if (valid >= V && reinterpret_cast<std::uintptr_t>(p) % V == 0) return P::template load<V>(p);
  return load_bytes<V>(static_cast<const unsigned char*>(p), valid);
}

/// load_prefix of a peer's buffer, read in place: its loads are P::load_peer's (never served from
/// a stale cache line, which a persistent kernel's earlier call may have left), bytes volatile.
template <class P, std::size_t V>
ARK_HD vec<V> load_peer_prefix(const void* p, std::size_t valid) {
  if (valid >= V && reinterpret_cast<std::uintptr_t>(p) % V == 0) return P::template load_peer<V>(p);
  return load_bytes<V>(static_cast<const volatile unsigned char*>(p), valid);
}

/// Stores the first `valid` bytes of v at p (bytewise where p is not V-aligned; see load_prefix).
template <class P, std::size_t V>
ARK_HD void store_prefix(void* p, const vec<V>& v, std::size_t valid) {
  if (valid >= V && reinterpret_cast<std::uintptr_t>(p) % V == 0) return P::template store<V>(p, v);
  auto* d = static_cast<unsigned char*>(p);
  const std::size_t n = valid < V ? valid : V;
  for (std::size_t i = 0; i < n; ++i)
    d[i] = static_cast<unsigned char>(i < 8 ? v.w[0] >> (8 * i) : v.w[V / 8 - 1] >> (8 * (i - 8)));
}

/// The threads of the scope copy `bytes` from src to dst (16-byte aligned, or byte by byte).
template <class Ctx>
ARK_HD void group_copy(const Ctx& ctx, void* dst, const void* src, std::size_t bytes) {
  using P = typename Ctx::platform;
  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
  const std::size_t tid = ctx.g.thread_rank(), nt = ctx.g.size();
  const bool aligned = (reinterpret_cast<std::uintptr_t>(d) | reinterpret_cast<std::uintptr_t>(s)) % 16 == 0;
  const std::size_t nv = aligned ? bytes / 16 : 0;
  for (std::size_t i = tid; i < nv; i += nt)
    P::template store<16>(d + 16 * i, P::template load<16>(s + 16 * i));
  for (std::size_t i = 16 * nv + tid; i < bytes; i += nt) d[i] = s[i];
}

/// Scope-collective bounded wait for *flag >= value: thread 0 spins, everyone learns the outcome.
template <class Ctx>
ARK_HD bool wait_flag(const Ctx& ctx, const std::uint64_t* flag, std::uint64_t value, wait_kind kind,
                      int peer) {
  const bool ok = ctx.g.thread_rank() != 0 || ctx.wait_geq(flag, value, kind, peer);
  return !ctx.g.sync_any(!ok);
}

/// Scope-collective: once every thread of the scope is past its earlier stores, thread 0 raises
/// *flag to `value` after a system fence (the signal of backends whose puts are complete when
/// they return).
template <class Ctx>
ARK_HD void fenced_signal(const Ctx& ctx, std::uint64_t* flag, std::uint64_t value) {
  using P = typename Ctx::platform;
  ctx.g.sync();
  if (ctx.g.thread_rank() == 0) {
    P::fence();
    P::store_release(flag, value);
  }
}

/// One thread: waits until peer p finished step - depth - 1 (its ack reached step - depth), so that
/// at most `depth` steps of ours are ahead of it and our slot for `step` in p is free.
/// The flag is read whatever the step, so that its load is in flight with the step's (no branch
/// on the step comes first).
template <class Ctx>
ARK_HD bool wait_credit(const Ctx& ctx, int p, std::uint64_t step, unsigned depth) {
  // and refuses once an earlier call of this worker failed (context::failed_before): that call
  // did not pass its step, and this one would write it again where a late peer may still read it
  // (open_recv refuses too: it would read the late peer's data of the failed call as its own)
  return ctx.wait_geq(ctx.lay().ack(ctx.local(), ctx.in_link(p)), step > depth ? step - depth : 0,
                      wait_kind::credit, p, true) &&
         !ctx.failed_before;
}

/// Raises the addressed peers' ack flags for `step` so they may reuse the slot; the caller has
/// passed a barrier after every thread's last load of their payload (store_after_reads: ordered
/// after the scope's loads, not its stores, which on a GPU would cost a wait for every earlier
/// store into peer memory).
template <class Ctx>
ARK_HD void raise_acks(const Ctx& ctx, peers ps, std::uint64_t step) {
  using P = typename Ctx::platform;
  for_each_peer(ctx, ps, [&](int p) {
    P::store_after_reads(ctx.lay().ack(ctx.remote(p), ctx.out_link(p)), step + 1);
    return true;
  });
}

/// Scope-collective: once every thread is done with the addressed peers' payload for `step`,
/// raises their ack flags (raise_acks after a barrier).
template <class Ctx>
ARK_HD void acknowledge(const Ctx& ctx, peers ps, std::uint64_t step) {
  ctx.g.sync();
  raise_acks(ctx, ps, step);
}

/// Scope-collective: a step of this worker's channels with every peer that carries no payload, only
/// its header: the call's description and two words, `place` (where the buffers the peers read
/// lie). Every peer learns that we reached it (our stores before it, the whole scope's, are
/// visible to it), and we that every peer did, with the same call and the same words (else a
/// mismatch of desc_field::place, recorded). Acknowledged at once: the slot holds nothing to
/// read. Zero-copy algorithms (algorithms/zero_copy.hpp) pace their phases with it.
template <class Ctx>
ARK_HD bool handshake(const Ctx& ctx, std::uint64_t step, const std::uint64_t (&place)[2]) {
  using P = typename Ctx::platform;
  const auto& l = ctx.lay();
  ctx.g.sync(); // every thread's stores before the fence of the thread that announces them
  const bool sent = for_each_peer(ctx, peers::all(), [&](int p) {
    if (!wait_credit(ctx, p, step, Ctx::backend::depth)) return false;
    slot_header* h = l.hdr(ctx.remote(p), ctx.out_link(p), step);
    P::store_relaxed(&h->count, ctx.desc.count);
    P::store_relaxed(&h->meta, ctx.desc.meta);
    P::store_relaxed(&h->step, step);
    P::store_relaxed(&h->place[0], place[0]);
    P::store_relaxed(&h->place[1], place[1]);
    P::fence();
    P::store_release(l.head(ctx.remote(p), ctx.out_link(p)), step + 1);
    return true;
  });
  if (ctx.g.sync_any(!sent)) return false;
  const bool ok = for_each_peer(ctx, peers::all(), [&](int p) {
    if (!ctx.wait_geq(l.head(ctx.local(), ctx.in_link(p)), step + 1, wait_kind::data, p) || ctx.failed_before)
      return false;
    const slot_header* h = l.hdr(ctx.local(), ctx.in_link(p), step);
    call_desc d;
    d.count = P::load_relaxed(&h->count);
    d.meta = P::load_relaxed(&h->meta);
    if (!ctx.check_peer_call(d, P::load_relaxed(&h->step), p, step)) return false;
    for (int k = 0; k < 2; ++k) {
      const std::uint64_t theirs = P::load_relaxed(&h->place[k]);
      if (theirs != place[k]) {
        ctx.fail(errc::mismatch, static_cast<std::uint32_t>(desc_field::place), p, step, place[k], theirs);
        return false;
      }
    }
    return true;
  });
  if (ctx.g.sync_any(!ok)) return false;
  raise_acks(ctx, peers::all(), step);
  return true;
}

} // namespace ark::dma
