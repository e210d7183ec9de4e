// ark/dma/host_graph_engine.hpp: the host model of the device-graph engine (engine_path::device_graphs
// on the host platform), which the host tests run: the launcher loop and the signal step are the
// GPU engine's own (dma/graph_launcher.hpp); threads stand in for the launcher and the graphs.
#pragma once

#include "ark/dma/graph_launcher.hpp"

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace ark::dma {

/// The host model of the engine (engine_path::device_graphs on the host platform): a launcher
/// thread runs serve_call; "launched copies" go to a pool whose threads take them in random
/// order, copy, then signal (in channel order, as the GPU's signal nodes do by waiting), and
/// end some time later; relaunching a graph that has not ended is refused, as CUDA does.
class host_graph_engine {
public:
  host_graph_engine() = default;
  host_graph_engine(const host_graph_engine&) = delete;
  host_graph_engine& operator=(const host_graph_engine&) = delete;
  ~host_graph_engine() { stop(); }

  /// A launcher thread serves every call, those made from the user's own code too.
  static constexpr bool serves_every_call = true;

  /// As graph_engine starts (device and priority mean nothing here).
  void start(const team_view& t, int, int) { start(t); }
  void start(const team_view& t) {
    stop();
    const layout& l = t.lay;
    const std::size_t tickets = std::size_t(l.all_workers()) * l.world * l.slots,
                      chans = std::size_t(l.all_workers()) * l.world;
    tickets_.assign(tickets, graph_ticket{});
    counters_.assign(2 * chans + 1, 0);
    state_ = {t,
              tickets_.data(),
              counters_.data(),
              counters_.data() + chans,
              counters_.data() + 2 * chans,
              engine_timeout_ns(t.timeout_ns),
              graph_classes(l)};
    stop_.store(false);
    launcher_ = std::thread([this] { run_launcher(); });
    for (auto& c : copiers_)
      c = std::thread([this, &c] { run_copier(static_cast<unsigned>(&c - copiers_)); });
  }

  /// Ends the launcher and the copy pool, as the GPU engine's quiesce waits for its launcher: the
  /// communicator's teardown then clears the error record that the launcher may write.
  void quiesce() { stop(); }

  void stop() {
    stop_.store(true);
    work_.notify_all();
    if (launcher_.joinable()) launcher_.join();
    for (auto& c : copiers_)
      if (c.joinable()) c.join();
    pending_.clear();
    tails_.clear();
  }

  /// Copies launched so far, launcher executions (calls served plus re-arms), and launches
  /// refused because the same graph was still running (the launcher retried them).
  std::uint64_t launches() const { return launches_.load(); }
  std::uint64_t executions() const { return executions_.load(); }
  std::uint64_t refusals() const { return refusals_.load(); }
  /// The model keeps no graphs; its tickets and counters are its tables.
  std::size_t graphs() const { return 0; }
  std::size_t table_bytes() const {
    return tickets_.size() * sizeof(graph_ticket) + counters_.size() * sizeof(std::uint64_t);
  }
  std::size_t streams() const { return 0; }

private:
  using P = platform::host;
  struct item { // a launched copy graph, not yet signalled
    std::uint32_t ticket, cls;
    bool copied, busy;
  };
  struct tail { // a signalled graph whose execution has not ended yet
    std::uint32_t ticket, cls;
    std::uint64_t ends;
  };
  /// How long a graph's execution outlives its signal, unless a relaunch is refused first.
  static constexpr std::uint64_t graph_tail_ns = 20000000;

  void run_launcher() {
    auto launch = [this](std::uint32_t ticket, unsigned cls) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        for (const item& p : pending_)
          if (p.ticket == ticket && p.cls == cls) return false; // cannot happen: the ticket waits
        const std::uint64_t now = P::now_ns();
        for (std::size_t i = 0; i < tails_.size(); ++i) {
          if (tails_[i].ticket != ticket || tails_[i].cls != cls) continue;
          const bool running = now < tails_[i].ends;
          tails_[i] = tails_.back(); // refused once, the execution is over by the retry
          tails_.pop_back();
          if (running) {
            refusals_.fetch_add(1);
            return false;
          }
          break;
        }
        pending_.push_back({ticket, cls, false, false});
      }
      launches_.fetch_add(1);
      work_.notify_one();
      return true;
    };
    auto keep = [this] { return !stop_.load(std::memory_order_relaxed); };
    while (!stop_.load()) {
      if (serve_call<P>(state_, launch, keep) != serve_end::stopped) executions_.fetch_add(1);
    }
  }

  void run_copier(unsigned seed) {
    std::uint64_t x = 0x9E3779B97F4A7C15ull * (seed + 1);
    std::vector<std::size_t> free;
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_.load()) {
      free.clear();
      for (std::size_t i = 0; i < pending_.size(); ++i)
        if (!pending_[i].busy) free.push_back(i);
      if (free.empty()) {
        work_.wait_for(lock, std::chrono::microseconds(200));
        continue;
      }
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      item& it = pending_[free[x % free.size()]];
      if (!it.copied) { // the copy node: out of order
        it.busy = true;
        const item mine = it;
        lock.unlock();
        const graph_copy c = graph_copy_of(state_.team, mine.ticket, mine.cls);
        std::memcpy(c.dst, c.src, c.bytes);
        lock.lock();
        for (auto& p : pending_)
          if (p.ticket == mine.ticket && p.busy && !p.copied) p.copied = true, p.busy = false;
      } else if (try_signal<P>(state_, it.ticket)) { // the signal node: in channel order
        if (tails_.size() > 4096) tails_.erase(tails_.begin(), tails_.begin() + 2048);
        tails_.push_back({it.ticket, it.cls, P::now_ns() + graph_tail_ns});
        it = pending_.back();
        pending_.pop_back();
      } else {
        lock.unlock();
        P::pause(0);
        lock.lock();
      }
    }
  }

  graph_state state_{};
  std::vector<graph_ticket> tickets_;
  std::vector<std::uint64_t> counters_;
  std::vector<item> pending_;
  std::vector<tail> tails_;
  std::mutex mutex_;
  std::condition_variable work_;
  std::thread launcher_, copiers_[2];
  std::atomic<bool> stop_{true};
  std::atomic<std::uint64_t> launches_{0}, executions_{0}, refusals_{0};
};

} // namespace ark::dma
