// ark/bootstrap/in_process.hpp: a bootstrap for ranks that are threads of one process.
//
//   auto group = std::make_shared<ark::in_process_group>(4);   // shared by the 4 rank threads
//   ark::in_process_bootstrap boot(group, rank);                // in rank `rank`'s thread
//   auto half = boot.split(rank / 2, rank);                      // ranks {0, 1} and {2, 3}
#pragma once

#include "ark/concepts/bootstrap.hpp"
#include "ark/config.hpp"
#include "ark/core/error.hpp"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ark {

/// The meeting point of the ranks of one process. A rank that does not arrive within `timeout`
/// makes every waiting rank throw timeout_error; the group is then broken for good.
class in_process_group {
public:
  explicit in_process_group(int size, std::chrono::milliseconds timeout = std::chrono::seconds(30))
      : size_(size), timeout_(timeout) {
    if (size < 1 || size > max_world)
      detail::throw_invalid("in_process_group", "world size " + std::to_string(size) + " is outside [1, " +
                                                    std::to_string(max_world) + "]");
  }

  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  void all_gather(int rank, const void* in, void* out, std::size_t n) {
    if (rank < 0 || rank >= size_)
      detail::throw_invalid("in_process_bootstrap", "rank " + std::to_string(rank) + " is outside [0, " +
                                                        std::to_string(size_) + ")");
    std::unique_lock<std::mutex> lock(mutex_);
    if (broken_) throw timeout_error("in_process_bootstrap: the group is broken by an earlier timeout", {});
    const std::uint64_t gen = generation_;
    std::vector<std::byte>& buf = buffers_[gen & 1];
    if (arrived_ == 0) {
      bytes_ = n;
      buf.assign(n * size_, std::byte{0});
    } else if (n != bytes_) {
      detail::throw_invalid("in_process_bootstrap", "rank " + std::to_string(rank) + " gathers " +
                                                        std::to_string(n) + " bytes, others " +
                                                        std::to_string(bytes_));
    }
    if (n) std::memcpy(buf.data() + rank * n, in, n);
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else if (!cv_.wait_for(lock, timeout_, [&] { return generation_ != gen || broken_; }) || broken_) {
      const int arrived = arrived_;
      broken_ = true;
      cv_.notify_all();
      error_record rec{static_cast<std::uint32_t>(errc::timeout),
                       -1,
                       0,
                       static_cast<std::uint32_t>(wait_kind::barrier),
                       gen,
                       static_cast<std::uint64_t>(size_),
                       static_cast<std::uint64_t>(arrived)};
      throw timeout_error("in_process_bootstrap: rank " + std::to_string(rank) + " waited " +
                              std::to_string(timeout_.count()) + " ms but only " + std::to_string(arrived) +
                              " of " + std::to_string(size_) + " ranks arrived",
                          rec);
    }
    if (n) std::memcpy(out, buf.data(), n * size_);
  }

private:
  int size_;
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::uint64_t generation_ = 0;
  int arrived_ = 0;
  std::size_t bytes_ = 0;
  bool broken_ = false;
  std::vector<std::byte> buffers_[2];
};

class in_process_bootstrap {
public:
  in_process_bootstrap(std::shared_ptr<in_process_group> group, int rank)
      : group_(std::move(group)), rank_(rank) {
    if (!group_) detail::throw_invalid("in_process_bootstrap", "group is null");
    if (rank < 0 || rank >= group_->size())
      detail::throw_invalid("in_process_bootstrap", "rank " + std::to_string(rank) + " is outside [0, " +
                                                        std::to_string(group_->size()) + ")");
  }
  int rank() const { return rank_; }
  int size() const { return group_->size(); }
  void all_gather(const void* in, void* out, std::size_t n) { group_->all_gather(rank_, in, out, n); }
  void barrier() { group_->all_gather(rank_, nullptr, nullptr, 0); }

  /// Collective (splittable_bootstrap): each group's new rank 0 makes the new group and
  /// hands its address to the others through the gather; it is held until all have taken it.
  in_process_bootstrap split(int color, int key) {
    const detail::split_place at = detail::gather_split(*this, color, key, "in_process_bootstrap::split");
    std::unique_ptr<std::shared_ptr<in_process_group>> made;
    if (at.leader == rank_)
      made = std::make_unique<std::shared_ptr<in_process_group>>(
          std::make_shared<in_process_group>(at.size, group_->timeout()));
    std::vector<const std::shared_ptr<in_process_group>*> held(size());
    const std::shared_ptr<in_process_group>* offer = made.get();
    all_gather(&offer, held.data(), sizeof offer);
    in_process_bootstrap sub(*held[at.leader], at.rank);
    barrier(); // every rank holds its group: the makers may drop their hold
    return sub;
  }

private:
  std::shared_ptr<in_process_group> group_;
  int rank_;
};

static_assert(splittable_bootstrap<in_process_bootstrap>);

} // namespace ark
