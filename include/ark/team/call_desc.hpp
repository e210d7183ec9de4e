// ark/team/call_desc.hpp: what a rank believes the current call is. Senders write it into the header
// of every pipeline step; receivers compare it with their own before touching the payload, so a
// count, dtype, op, root or algorithm that differs between ranks becomes an error, never garbage.
// One exception, said where it is made: the LL latency path compares a 32-bit tag of it instead
// (tag(); dma/ll_packet.hpp), exact for a count that differs in its low 32 bits, and for any
// other difference right but for odds of 2^-32 per pair of calls.
#pragma once

#include "ark/config.hpp"
#include "ark/core/error.hpp"

#include <cstdint>

namespace ark {

enum class collective : std::uint8_t {
  all_reduce = 1,
  reduce_scatter,
  all_gather,
  broadcast,
  reduce,
  custom,
  all_to_all,
  gather,
  scatter,
  p2p ///< a send and its receive (algorithms/p2p.hpp)
};

inline const char* to_string(collective c) {
  switch (c) {
  case collective::all_reduce:
    return "all_reduce";
  case collective::reduce_scatter:
    return "reduce_scatter";
  case collective::all_gather:
    return "all_gather";
  case collective::broadcast:
    return "broadcast";
  case collective::reduce:
    return "reduce";
  case collective::custom:
    return "custom";
  case collective::all_to_all:
    return "all_to_all";
  case collective::gather:
    return "gather";
  case collective::scatter:
    return "scatter";
  case collective::p2p:
    return "send/recv";
  }
  return "unknown";
}

/// Whether collective k names a root rank (the others' calls send to it or receive from it).
ARK_HD constexpr bool has_root(collective k) {
  return k == collective::broadcast || k == collective::reduce || k == collective::gather ||
         k == collective::scatter;
}

/// Whether collective k only copies (no element is folded): what the copy engine alone serves.
ARK_HD constexpr bool only_copies(collective k) {
  return k == collective::all_gather || k == collective::broadcast || k == collective::all_to_all ||
         k == collective::gather || k == collective::scatter;
}

/// 16 bytes: the element count and the packed fields below.
///   meta bits  0..7  collective     8..15 algorithm   16..23 dtype   24..31 op id
///             32..39 protocol      40..55 workers     56..63 root
struct call_desc {
  std::uint64_t count = 0;
  std::uint64_t meta = 0;

  ARK_HD static call_desc make(collective kind, std::uint8_t algorithm, std::uint8_t dtype, std::uint8_t op,
                               std::uint8_t protocol, unsigned workers, int root, std::uint64_t count) {
    call_desc d;
    d.count = count;
    d.meta = std::uint64_t(static_cast<std::uint8_t>(kind)) | std::uint64_t(algorithm) << 8 |
             std::uint64_t(dtype) << 16 | std::uint64_t(op) << 24 | std::uint64_t(protocol) << 32 |
             std::uint64_t(workers & 0xffffu) << 40 | std::uint64_t(root & 0xff) << 56;
    return d;
  }

  ARK_HD bool operator==(const call_desc& o) const { return count == o.count && meta == o.meta; }

  /// 32 bits of this description that LL data packets carry in their second flag word
  /// (dma/ll_packet.hpp), so that a receiver checks the call with the data it polls anyway.
  /// Equal descriptions have equal tags. Two that differ only in the low 32 bits of the count
  /// never do: the count's low word is mixed by a bijection, xor-ed with a word of the rest, and
  /// mixed by a bijection again. Any other two do with odds of 2^-32 per pair: the count is
  /// mixed before it meets the rest, so that no fixed count difference makes two descriptions
  /// meet, and the last mix spreads the tags of nearby counts, so that no structure makes a
  /// packet's flag (step xor tag) of one call meet another's a few steps later.
  ARK_HD std::uint32_t tag() const {
    std::uint64_t x = meta * 0x9e3779b97f4a7c15ull ^ (count >> 32) * 0xc2b2ae3d27d4eb4full;
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    return mix32(mix32(static_cast<std::uint32_t>(count)) ^ static_cast<std::uint32_t>(x >> 32));
  }
  /// A bijection of 32 bits (murmur3's finaliser).
  ARK_HD static std::uint32_t mix32(std::uint32_t h) {
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    return h ^ (h >> 16);
  }

  /// The first field that differs from `o`, with both values; desc_field::none when equal.
  ARK_HD desc_field first_difference(const call_desc& o, std::uint64_t& mine, std::uint64_t& theirs) const {
    if (count != o.count) {
      mine = count, theirs = o.count;
      return desc_field::count;
    }
    constexpr desc_field fields[] = {desc_field::kind, desc_field::algorithm, desc_field::dtype,
                                     desc_field::op,   desc_field::protocol,  desc_field::workers,
                                     desc_field::root};
    constexpr unsigned shift[] = {0, 8, 16, 24, 32, 40, 56};
    constexpr std::uint64_t mask[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xffff, 0xff};
    for (int i = 0; i < 7; ++i) {
      const std::uint64_t a = (meta >> shift[i]) & mask[i], b = (o.meta >> shift[i]) & mask[i];
      if (a != b) {
        mine = a, theirs = b;
        return fields[i];
      }
    }
    return desc_field::none;
  }
};

} // namespace ark
