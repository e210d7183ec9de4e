// apps/nccl/ids.hpp: unique ids: a tag and the rendezvous path that rank 0 listens on, made fresh
// or derived for a split.
#pragma once

#include "nccl/errors.hpp"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <unistd.h>

namespace ark::nccl {

/// What a unique id holds: a tag, and the rendezvous path that rank 0 listens on.
struct id_body {
  char tag[8];
  char path[96];
};
static_assert(sizeof(id_body) <= id_bytes);
inline constexpr char id_tag[8] = {'a', 'r', 'k', '-', 'n', 'c', 'l', '1'};

/// The id naming rendezvous path `dir` + `name`.
inline unique_id id_at(const std::string& dir, const char* name) {
  unique_id id{};
  id_body b{};
  std::memcpy(b.tag, id_tag, sizeof id_tag);
  std::snprintf(b.path, sizeof b.path, "%s%s", dir.c_str(), name);
  std::memcpy(id.internal, &b, sizeof b);
  return id;
}

/// A fresh id: a path no other id names (random, under $TMPDIR if it is short enough, else /tmp).
inline unique_id make_id() {
  static std::mutex m;
  static std::mt19937_64 gen(std::random_device{}() ^ (std::uint64_t(::getpid()) << 32) ^
                             std::uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()));
  std::uint64_t r;
  {
    std::lock_guard<std::mutex> lock(m);
    r = gen();
  }
  std::string dir = "/tmp";
  if (const char* t = std::getenv("TMPDIR"); t && *t && std::strlen(t) < 48) dir = t;
  char name[40];
  std::snprintf(name, sizeof name, "/arknccl-%016llx", static_cast<unsigned long long>(r));
  return id_at(dir, name);
}

/// The rendezvous path of an id; refuses ids this library did not make.
inline std::string path_of(const unique_id& id, const char* call) {
  id_body b;
  std::memcpy(&b, id.internal, sizeof b);
  if (std::memcmp(b.tag, id_tag, sizeof id_tag) != 0 || !std::memchr(b.path, 0, sizeof b.path) ||
      b.path[0] != '/')
    fail(result::invalid_argument, call,
         "the unique id was not made by ncclGetUniqueId of this library (ark's NCCL API): every rank must "
         "load the same library");
  return b.path;
}

/// The id of a communicator split off one (every member derives the same one).
inline unique_id derived_id(const std::string& parent, std::uint64_t split, int color) {
  std::uint64_t h = 1469598103934665603ull; // FNV-1a over the parent's path, the split, the color
  auto mix = [&h](const void* p, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
  };
  mix(parent.data(), parent.size());
  mix(&split, sizeof split);
  mix(&color, sizeof color);
  char name[40];
  std::snprintf(name, sizeof name, "/arknccl-%016llx", static_cast<unsigned long long>(h));
  return id_at(parent.substr(0, parent.rfind('/')), name);
}

} // namespace ark::nccl
