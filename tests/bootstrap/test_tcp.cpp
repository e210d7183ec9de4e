// The TCP bootstrap, across real processes on the loopback: all_gather in rank order, repeatedly;
// split (twice, each group meeting on a port of its own); a rank that never connects is a timeout
// within the bound; a port or rank out of range is refused.
#include "ark/bootstrap/tcp.hpp"

#include "fork_ranks.hpp"

#include <doctest/doctest.h>

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <string>
#include <vector>

namespace {
/// A port free now on the loopback (the system's pick, given back).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}
} // namespace

TEST_CASE("tcp bootstrap: all_gather across processes in rank order, and split groups") {
  const int port = free_port(), world = 4;
  CHECK(in_processes(world, [&](int rank) {
          ark::tcp_bootstrap b("127.0.0.1", port, rank, world, std::chrono::seconds(20));
          return gathers_in_rank_order(b, rank, world) && splits_by_parity(b, rank);
        }) == world);
}

TEST_CASE("tcp bootstrap: a rank 0 that never listens is a timeout; bad arguments are refused") {
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(ark::tcp_bootstrap("127.0.0.1", free_port(), 1, 2, std::chrono::milliseconds(300)),
                  ark::timeout_error);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3));
  CHECK_THROWS_AS(ark::tcp_bootstrap("127.0.0.1", free_port(), 0, 2, std::chrono::milliseconds(300)),
                  ark::timeout_error); // rank 0 alone: nobody connects
  CHECK_THROWS_AS(ark::tcp_bootstrap("127.0.0.1", 0, 0, 2), ark::invalid_argument);
  CHECK_THROWS_AS(ark::tcp_bootstrap("127.0.0.1", 1234, 2, 2), ark::invalid_argument);
}
