// ark/communicator/errors.hpp: a rank's recorded failure as the host reports it: the message
// (naming the algorithms and limits involved) and the exception it raises.
#pragma once

#include "ark/core/error.hpp"
#include "ark/team/symmetric.hpp"

#include <cstdint>
#include <string>

namespace ark {

/// Why algo::one_step_world<fixed> refuses a team of `world` ranks: the host's refusal before
/// launch and the device's recorded error say it alike.
inline std::string one_step_world_refusal(std::uint64_t fixed, std::uint64_t world) {
  return "algo::one_step_world<" + std::to_string(fixed) + "> runs on a team of " + std::to_string(fixed) +
         " ranks; this team has " + std::to_string(world) + " (use algo::one_step)";
}

/// A symmetric<T>::place as words: which registration, and where in it.
inline std::string place_name(std::uint64_t place) {
  return "registration " + std::to_string(place >> symmetric<int>::place_shift) + " offset " +
         std::to_string(place & symmetric<int>::offset_mask);
}

/// Human-readable description of a record, naming the rank that saw it.
inline std::string describe(const error_record& r, int rank) {
  std::string s = "rank " + std::to_string(rank) + ": " + to_string(static_cast<errc>(r.code));
  switch (static_cast<errc>(r.code)) {
  case errc::timeout:
    s += " waiting for " + std::string(to_string(static_cast<wait_kind>(r.what)));
    if (r.peer >= 0) s += " from rank " + std::to_string(r.peer);
    s += " (worker " + std::to_string(r.worker) + ", expected value " + std::to_string(r.mine) +
         ", last seen " + std::to_string(r.theirs) + ")";
    break;
  case errc::mismatch:
    s += " with rank " + std::to_string(r.peer) + ": " + to_string(static_cast<desc_field>(r.what)) + " is ";
    if (static_cast<desc_field>(r.what) == desc_field::place) // symmetric<T>::place: window serial, offset
      s += place_name(r.mine) + " here but " + place_name(r.theirs) +
           " there (zero-copy reads each peer's buffer where this rank's lies: register the same "
           "window on every rank and pass buffers at the same offset in it)";
    else
      s += std::to_string(r.mine) + " here but " + std::to_string(r.theirs) + " there";
    break;
  case errc::aborted:
    s += " while waiting (worker " + std::to_string(r.worker) + ")";
    break;
  case errc::unsupported:
    if (static_cast<unsupported_kind>(r.what) == unsupported_kind::one_step)
      s += ": algo::one_step needs every worker's share to fit one LL step; worker " +
           std::to_string(r.worker) + "'s holds " + std::to_string(r.mine) + " elements, at most " +
           std::to_string(r.theirs) + " fit (use algo::one_shot, or more workers)";
    else if (static_cast<unsupported_kind>(r.what) == unsupported_kind::world)
      s += ": " + one_step_world_refusal(r.mine, r.theirs);
    else if (static_cast<unsupported_kind>(r.what) == unsupported_kind::root)
      s += ": root " + std::to_string(static_cast<std::int64_t>(r.mine)) + " is outside [0, " +
           std::to_string(r.theirs) + ")";
    else if (static_cast<unsupported_kind>(r.what) == unsupported_kind::p2p)
      s += ": a point-to-point group names peer " + std::to_string(static_cast<std::int64_t>(r.mine)) +
           ", outside [0, " + std::to_string(r.theirs) + "), or holds " +
           std::to_string(static_cast<std::int64_t>(r.mine)) + " operations, more than the " +
           std::to_string(r.theirs) + " a group holds";
    else if (static_cast<unsupported_kind>(r.what) == unsupported_kind::setup)
      s += " by this communicator's setup (worker " + std::to_string(r.worker) + " of " +
           std::to_string(r.mine) + ", team_config.workers " + std::to_string(r.theirs) +
           "; or a depth, staging or engine it lacks)";
    break;
  default:
    break;
  }
  return s;
}

/// Throws the exception matching a non-empty record.
[[noreturn]] inline void raise(const error_record& r, int rank, const char* call) {
  std::string msg = std::string(call) + ": " + describe(r, rank);
  switch (static_cast<errc>(r.code)) {
  case errc::timeout:
    throw timeout_error(msg, r);
  case errc::mismatch:
    throw mismatch_error(msg, r);
  case errc::aborted:
    throw aborted_error(msg);
  default:
    throw error(static_cast<errc>(r.code), msg);
  }
}

} // namespace ark
