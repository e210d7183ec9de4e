// ark/dma/graph_launcher.hpp: the copy engine triggered by GPU threads, with no CPU on the path:
// the plain code its GPU engine (dma/graph_engine.hpp) and host model (dma/host_graph_engine.hpp)
// share.
//
// Serves dma::proxy_engine's request queues when a communicator is configured with
// engine_path::device_graphs (CUDA, compiled with -rdc=true and linked with cudadevrt). The
// symmetric region is cut into fixed slots, so every copy an engine channel can ask for is known
// when the communicator starts: staging slot (w, peer, slot) of ours -> data slot (w, us, slot)
// of the peer, in up to four sizes (slot_bytes / 4^k). For each of them a CUDA graph is
// instantiated for device launch:
//
//   memcpy node (peer copy, a copy engine)  ->  1-thread kernel node "signal"
//
// and a launcher kernel (one warp, itself a device-launchable graph) runs beside each call: it
// takes the workers' requests in order and fires the matching graph, fire and forget
// (platform/cuda/graphs.hpp). Before each launch it writes the request's flag and value into the
// slot's ticket; the signal node raises that flag once the copy landed and counts the request
// completed. Launched graphs run in any order, so the signal node of a channel's k-th copy first
// waits (bounded) until the (k-1)-th landed: a receiver's head flag only grows and never runs
// ahead of its data.
//
// Limits of the mechanism: one graph execution may fire at most 120 device launches, so the
// launcher re-arms itself with a tail launch of its own graph; a device launch and a copy's
// trigger-to-flag round trip each cost microseconds (docs/perf.md), so this path is for large
// slots (MB) and for running beside compute, not for small messages. The launcher serves one
// call: each worker's last request of a call is a `request_end` (proxy_engine::finish), and the
// launcher returns once every worker of the call posted it. Not graph-capturable (the launcher
// is a device-launch graph of its own).
//
// The routing of a request to its graph (graph_route), the launcher loop (serve_call) and the
// signal step (try_signal), here, are plain code shared by the GPU engine (dma/graph_engine.hpp),
// a template of its platform that builds and launches its graphs through the platform's graph
// members, and the host model (dma/host_graph_engine.hpp), which the host tests run.
#pragma once

#include "ark/dma/common.hpp"
#include "ark/dma/engine_queue.hpp"
#include "ark/platform/host.hpp"
#include "ark/team/team.hpp"

#include <cstdint>

namespace ark::dma {

/// Sizes of the pre-instantiated copies: slot_bytes / 4^k for k < graph_classes, each at least
/// 16 KB (a request takes the smallest that holds it).
ARK_HD inline unsigned graph_classes(const layout& l) {
  unsigned c = 1;
  while (c < 4 && (l.slot_bytes >> (2 * c)) >= (16u << 10) && (l.slot_bytes >> (2 * c)) % 256 == 0) ++c;
  return c;
}
ARK_HD inline std::uint64_t graph_class_bytes(const layout& l, unsigned k) { return l.slot_bytes >> (2 * k); }
/// The engine's bound: twice the calls' (a request waits behind a whole call), saturating.
inline std::uint64_t engine_timeout_ns(std::uint64_t ns) { return ns > UINT64_MAX / 2 ? UINT64_MAX : 2 * ns; }

/// The copy graph that serves a request: ticket (w, peer, slot) and size class.
struct graph_route {
  bool ok = false;
  std::uint32_t ticket = 0; ///< (w * world + peer) * slots + slot
  std::uint32_t cls = 0;
  int peer = -1;
};

/// The ticket of copy (w, peer, slot): its graphs' index before the size class.
ARK_HD inline std::uint32_t graph_ticket_of(const layout& l, unsigned w, int peer, unsigned slot) {
  return static_cast<std::uint32_t>((std::uint64_t(w) * l.world + unsigned(peer)) * l.slots + slot);
}

/// Which pre-instantiated copy serves request r of worker w: r must copy the first r.bytes of our
/// staging slot (w, peer, slot) into peer's data slot (w, us, slot). Anything else has no graph.
ARK_HD inline graph_route route_request(const team_view& t, unsigned w, const engine_request& r) {
  graph_route g;
  const layout& l = t.lay;
  if (w >= l.all_workers() || l.world < 2) return g;
  // our staging slots of worker w: its channels' one after the other, by peer (layout::link_at)
  const auto first = reinterpret_cast<std::uint64_t>(l.stage(t.local(), l.link_at(w, 0), 0));
  if (r.src < first || r.bytes == 0 || r.bytes > l.slot_bytes) return g;
  const std::uint64_t off = r.src - first;
  if (off % l.slot_bytes || off / l.slot_bytes >= std::uint64_t(l.peers()) * l.slots) return g;
  const int peer = layout::peer_of(t.rank, static_cast<unsigned>(off / l.slot_bytes / l.slots));
  const unsigned slot = static_cast<unsigned>(off / l.slot_bytes % l.slots);
  if (r.dst != reinterpret_cast<std::uint64_t>(l.data(t.base[peer], l.link_of(w, peer, t.rank), slot)))
    return g;
  unsigned cls = graph_classes(l) - 1;
  while (graph_class_bytes(l, cls) < r.bytes) --cls;
  g.ok = true;
  g.ticket = graph_ticket_of(l, w, peer, slot);
  g.cls = cls;
  g.peer = peer;
  return g;
}

/// Where copy graph (ticket, class) copies from and to.
struct graph_copy {
  std::byte* dst;
  const std::byte* src;
  std::uint64_t bytes;
};
ARK_HD inline graph_copy graph_copy_of(const team_view& t, std::uint32_t ticket, unsigned cls) {
  const layout& l = t.lay;
  const unsigned slot = ticket % l.slots;
  const std::uint64_t chan = ticket / l.slots;
  const auto w = static_cast<unsigned>(chan / l.world);
  const int peer = static_cast<int>(chan % l.world);
  return {l.data(t.base[peer], l.link_of(w, peer, t.rank), slot),
          l.stage(t.local(), l.link_of(w, t.rank, peer), slot), graph_class_bytes(l, cls)};
}

/// What the launcher tells the signal step of a (w, peer, slot) copy before launching it.
struct graph_ticket {
  std::uint64_t* flag; ///< raise to `value` once the copy landed (null: none)
  std::uint64_t value;
  std::uint64_t seq;  ///< the copy's number on its channel (w, peer)
  std::uint64_t used; ///< launched before: seq is the last launch's
};

/// The engine's state: device memory on GPUs (passed by value to its kernels), host memory in the
/// host model.
struct graph_state {
  team_view team;
  graph_ticket* tickets;      ///< [(w * world + peer) * slots + slot]
  std::uint64_t* chan_seq;    ///< [w * world + peer]: copies launched (the launcher's)
  std::uint64_t* chan_landed; ///< [w * world + peer]: copies landed (the signal steps')
  std::uint64_t* ended;       ///< workers of the current call that posted request_end
  std::uint64_t timeout_ns;   ///< a request left unserved this long is an engine failure
  unsigned classes;
};

/// Why serve_call returned.
enum class serve_end { call_done, rearm, failed, stopped };

/// Most launches one serve_call makes before it returns `rearm` (one CUDA graph execution may
/// fire at most 120).
inline constexpr unsigned graph_launches_per_execution = 112;

/// The launcher: takes every worker's requests in order and fires the copy that serves each
/// (launch(ticket, cls) -> bool), until every worker of the call posted request_end. Bare
/// signals wait for the worker's earlier requests; a ticket is rewritten only once its previous
/// copy landed. A refused launch (the slot's graph may still be finishing its last execution:
/// a graph runs one execution at a time) is undone and retried; refused past the timeout, it is
/// a platform error. Waiting with no request pending is not a failure (the workers' own waits
/// are bounded, and each worker posts request_end however its call ended); a request that stays
/// pending and unserved past the timeout is. An abort, or keep() -> false (the host model's
/// shutdown), stops it.
/// Once the rank failed (its error record claimed) when a launcher starts, it drains: it takes
/// and completes every request but copies and signals nothing (a call behind a failed one stores
/// nothing into the peers), and returns once nothing came for the timeout. A launcher that
/// returned `failed` left its call's later requests and ends to the next one, whose count of
/// ends may then never match: without that bound it, and the stream behind it, would wait for ever.
ARK_EXEC_CHECK_DISABLE
template <class P, class Launch, class Keep>
ARK_HD serve_end serve_call(const graph_state& v, Launch&& launch, Keep&& keep) {
  const team_view& t = v.team;
  const layout& l = t.lay;
  const bool drain = P::load_relaxed(l.claim(t.local())) != 0;
  unsigned launches = 0;
  // last: when the launcher last served, or had nothing to serve; active: when it last served
  std::uint64_t last = P::now_ns(), active = last, refused_since = 0;
  auto fail = [&](errc code, unsigned w, std::uint64_t step, std::uint64_t a, std::uint64_t b) {
    record_error<P>(t, code, static_cast<std::uint32_t>(wait_kind::engine), -1, w, step, a, b);
    *v.ended = 0;
    return serve_end::failed;
  };
  for (unsigned idle = 0;; ++idle) {
    bool worked = false, pending = false;
    for (unsigned w = 0; w < l.all_workers(); ++w) {
      engine_queue* q = queue(l, t.engine, w);
      std::uint64_t taken = q->taken;
      const std::uint64_t posted = P::load_acquire(&q->posted);
      for (; taken < posted; ++taken) {
        const engine_request r = requests(l, t.engine, w)[taken % queue_capacity(l)];
        if (r.kind == request_end) {
          P::fetch_add(&q->completed, 1);
          if (++*v.ended == r.value) { // every worker of the call is done posting
            *v.ended = 0;
            q->taken = taken + 1;
            return serve_end::call_done;
          }
        } else if (drain) {
          P::fetch_add(&q->completed, 1);
        } else if (r.dst && r.bytes) {
          const graph_route g = route_request(t, w, r);
          if (!g.ok) { // not a channel slot: no copy was instantiated for it
            q->taken = taken;
            return fail(errc::unsupported, w, taken, r.dst, r.src);
          }
          graph_ticket* tk = v.tickets + g.ticket;
          const std::uint64_t chan = g.ticket / l.slots;
          if (tk->used && P::load_acquire(&v.chan_landed[chan]) <= tk->seq) break; // not landed yet
          if (launches == graph_launches_per_execution) {
            q->taken = taken;
            return serve_end::rearm;
          }
          const graph_ticket before = *tk;
          tk->flag = reinterpret_cast<std::uint64_t*>(r.flag);
          tk->value = r.value;
          tk->seq = v.chan_seq[chan]++;
          tk->used = 1;
          P::fence();
          if (!launch(g.ticket, g.cls)) { // undo, and try again on a later sweep
            *tk = before;
            --v.chan_seq[chan];
            if (!refused_since) refused_since = P::now_ns();
            if (P::now_ns() - refused_since > v.timeout_ns) {
              q->taken = taken;
              return fail(errc::platform, w, taken, 1, 0);
            }
            break;
          }
          refused_since = 0;
          ++launches;
        } else if (r.flag) {
          if (P::load_acquire(&q->completed) < taken) break; // the worker's earlier requests first
          P::fence();
          P::store_release(reinterpret_cast<std::uint64_t*>(r.flag), r.value);
          P::fetch_add(&q->completed, 1);
        } else {
          P::fetch_add(&q->completed, 1);
        }
        worked = true;
      }
      q->taken = taken;
      pending |= taken < posted;
    }
    const std::uint64_t now = P::now_ns();
    if (worked) {
      last = active = now;
      idle = 0;
      continue;
    }
    if (!pending) last = now;
    if (now - last > v.timeout_ns) return fail(errc::timeout, 0, 0, *v.ended, 0); // requests left unserved
    if (drain && now - active > v.timeout_ns)
      return fail(errc::timeout, 0, 0, *v.ended, 1); // recorded before
    if ((idle & 1023u) == 1023u && (!keep() || (now - active > 100000 && P::load_acquire(&t.ctl->abort)))) {
      *v.ended = 0;
      return serve_end::stopped;
    }
    P::pause(idle);
  }
}

/// The signal step of copy `ticket`, once its bytes landed: raises the request's flag and counts
/// it completed, unless the channel's previous copy has not been signalled yet (false: try again).
template <class P>
ARK_HD bool try_signal(const graph_state& v, std::uint32_t ticket) {
  const layout& l = v.team.lay;
  const graph_ticket t = v.tickets[ticket];
  const std::uint64_t chan = ticket / l.slots;
  if (P::load_acquire(v.chan_landed + chan) != t.seq) return false;
  if (t.flag) {
    P::fence();
    P::store_release(t.flag, t.value);
  }
  P::store_release(v.chan_landed + chan, t.seq + 1);
  P::fetch_add(&queue(l, v.team.engine, static_cast<unsigned>(chan / l.world))->completed, 1);
  return true;
}

} // namespace ark::dma
