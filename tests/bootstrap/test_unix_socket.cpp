// The Unix-socket bootstrap, across real processes: all_gather in rank order, repeatedly; a rank
// that never connects, or stops reading, and a listener that never accepts, are timeouts within the
// bound.
#include "ark/bootstrap/unix_socket.hpp"

#include "fork_ranks.hpp"

#include <doctest/doctest.h>

#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {
std::string socket_path(const char* tag) {
  return "/tmp/ark-test-" + std::string(tag) + "-" + std::to_string(::getpid()) + ".sock";
}

} // namespace

TEST_CASE("unix_socket bootstrap: all_gather across processes, many rounds") {
  const std::string path = socket_path("gather");
  const int world = 4;
  CHECK(in_processes(world, [&](int rank) {
          ark::unix_socket_bootstrap b(path, rank, world, std::chrono::seconds(20));
          return gathers_in_rank_order(b, rank, world);
        }) == world);
}

TEST_CASE("unix_socket bootstrap: a rank that never connects is a timeout") {
  const std::string path = socket_path("missing");
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(ark::unix_socket_bootstrap(path, 0, 2, std::chrono::milliseconds(200)), ark::timeout_error);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  CHECK_THROWS_AS(ark::unix_socket_bootstrap(path + ".none", 1, 2, std::chrono::milliseconds(200)),
                  ark::timeout_error);
  CHECK_THROWS_AS(ark::unix_socket_bootstrap(path, 2, 2), ark::invalid_argument);
}

TEST_CASE("unix_socket bootstrap: a peer that stops reading is a timeout, not a blocked send") {
  const std::string path = socket_path("stalled");
  CHECK(in_processes(2, [&](int rank) {
          if (rank == 0) { // joins, then takes nothing for longer than rank 1's bound
            ark::unix_socket_bootstrap b(path, 0, 2, std::chrono::seconds(20));
            std::this_thread::sleep_for(std::chrono::seconds(4));
            return true;
          }
          ark::unix_socket_bootstrap b(path, 1, 2, std::chrono::seconds(1));
          std::vector<std::byte> mine(16 << 20), all(2 * mine.size()); // far more than a socket buffers
          const auto t0 = std::chrono::steady_clock::now();
          try {
            b.all_gather(mine.data(), all.data(), mine.size());
          } catch (const ark::timeout_error&) {
            return std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3);
          }
          return false;
        }) == 2);
}

TEST_CASE("unix_socket bootstrap: a listener that never accepts (backlog full) is a timeout, not a blocked "
          "connect") {
  const std::string path = socket_path("stale");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int listener = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(listener >= 0);
  ::unlink(path.c_str());
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(listener, 0) == 0);
  // fill its backlog: nonblocking connects succeed until it is full, then refuse
  std::vector<int> queued;
  for (int i = 0; i < 64; ++i) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    REQUIRE(fd >= 0);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd);
      break;
    }
    queued.push_back(fd);
  }
  REQUIRE(queued.size() < 64); // the backlog is full now: a blocking connect would wait for ever
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(ark::unix_socket_bootstrap(path, 1, 2, std::chrono::milliseconds(300)), ark::timeout_error);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3));
  for (int fd : queued) ::close(fd);
  ::close(listener);
  ::unlink(path.c_str());
}

TEST_CASE("unix_socket bootstrap: split groups processes by color, each group on a socket of its own") {
  const std::string path = socket_path("split");
  const int world = 4;
  CHECK(in_processes(world, [&](int rank) {
          ark::unix_socket_bootstrap b(path, rank, world, std::chrono::seconds(20));
          return splits_by_parity(b, rank); // each split's groups meet at sockets of their own
        }) == world);
}
