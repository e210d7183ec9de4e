// ark/hierarchy/nodes.hpp: which ranks of a job share a node, learned once through its
// bootstrap: every rank names its node, and the names, gathered, give each rank its node (nodes
// numbered by their lowest rank) and its local rank (its place among its node's ranks, in rank
// order). Rail l is local rank l of every node; a rank's place on its rail is its node's number.
//
// The name is the host's unless overridden: node_options::name (ranks that are threads of one
// process name their nodes so), else the ARK_NODE environment variable; and a node's ranks may
// be cut into several nodes of ranks_per_node ranks each (else ARK_NODE_RANKS), so that one
// machine runs a job of several "nodes", as tests do.
#pragma once

#include "ark/concepts/bootstrap.hpp"
#include "ark/config.hpp"
#include "ark/core/error.hpp"

#include <unistd.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace ark {

struct node_options {
  std::string name;       ///< this rank's node; empty: ARK_NODE, else the host name
  int ranks_per_node = 0; ///< > 0: a node's ranks cut into nodes of this many; 0: ARK_NODE_RANKS, else all

  /// The options the environment gives (ARK_NODE, ARK_NODE_RANKS), what a default uses.
  static node_options from_env() {
    node_options o;
    if (const char* e = std::getenv("ARK_NODE")) o.name = e;
    if (const char* e = std::getenv("ARK_NODE_RANKS")) o.ranks_per_node = std::atoi(e);
    return o;
  }
};

/// The job's ranks by node: every node has the same number of ranks (learn_nodes refuses others).
struct node_map {
  int world = 1, rank = 0;
  int nodes = 1, local_size = 1;               ///< N nodes of L ranks
  int node = 0, local_rank = 0;                ///< this rank's
  std::vector<int> node_of, local_of, rank_at; ///< by rank; rank_at[node * L + local]

  /// Ranks numbered node by node: rank = node * local_size + local_rank (a layout known in
  /// advance, e.g. a process per node whose ranks are its threads).
  static node_map regular(int nodes, int local_size, int node, int local_rank) {
    if (nodes < 1 || local_size < 1 || node < 0 || node >= nodes || local_rank < 0 ||
        local_rank >= local_size)
      detail::throw_invalid("node_map::regular", "node " + std::to_string(node) + " of " +
                                                     std::to_string(nodes) + ", local rank " +
                                                     std::to_string(local_rank) + " of " +
                                                     std::to_string(local_size) + " is not a place");
    node_map m;
    m.world = nodes * local_size;
    m.nodes = nodes, m.local_size = local_size, m.node = node, m.local_rank = local_rank;
    m.rank = node * local_size + local_rank;
    for (int r = 0; r < m.world; ++r) {
      m.node_of.push_back(r / local_size);
      m.local_of.push_back(r % local_size);
      m.rank_at.push_back(r);
    }
    return m;
  }

  /// The job's rank of local rank `local` of node `n`.
  int global(int n, int local) const { return rank_at[static_cast<std::size_t>(n) * local_size + local]; }
  /// Whether ranks are numbered node by node (rank = node * L + local): gathered blocks then need
  /// no reordering.
  bool node_major() const {
    for (int r = 0; r < world; ++r)
      if (rank_at[r] != r) return false;
    return true;
  }
};

namespace detail {
inline constexpr std::size_t node_name_bytes = 256;
using node_name = std::array<char, node_name_bytes>;

inline node_name this_node(const node_options& o) {
  node_name n{};
  std::string s = o.name;
  if (s.empty()) {
    char host[node_name_bytes] = {};
    if (::gethostname(host, sizeof host - 1) != 0) throw platform_error("learn_nodes: gethostname failed");
    s = host;
  }
  if (s.size() >= node_name_bytes) throw_invalid("learn_nodes", "node name longer than 255 characters");
  std::memcpy(n.data(), s.data(), s.size());
  return n;
}
} // namespace detail

/// Collective over the bootstrap's ranks. Throws invalid_argument, on every rank alike (each
/// computes it from the same gathered names), where the nodes differ in size or options disagree.
template <bootstrap Boot>
node_map learn_nodes(Boot& boot, node_options o = node_options::from_env()) {
  if (o.ranks_per_node < 0) detail::throw_invalid("learn_nodes", "ranks_per_node must not be negative");
  const int world = boot.size(), rank = boot.rank();
  struct card {
    detail::node_name name;
    std::int32_t per_node;
  };
  const card mine{detail::this_node(o), o.ranks_per_node};
  std::vector<card> all(world);
  boot.all_gather(&mine, all.data(), sizeof mine);
  for (int r = 0; r < world; ++r)
    if (all[r].per_node != mine.per_node)
      detail::throw_invalid("learn_nodes", "rank " + std::to_string(r) + " cuts nodes into " +
                                               std::to_string(all[r].per_node) + " ranks, this rank into " +
                                               std::to_string(mine.per_node) + " (ARK_NODE_RANKS)");
  node_map m;
  m.world = world;
  m.rank = rank;
  m.node_of.assign(world, 0);
  m.local_of.assign(world, 0);
  // in rank order: a rank's place among the earlier ranks of its host name gives its cut and its
  // place in it; a (name, cut) seen first makes the next node, so nodes go by their lowest rank
  std::vector<int> named(world, 0);   // by a name's lowest rank: its ranks seen so far
  std::vector<int> key_name, key_cut; // node n's name (its lowest rank) and cut
  std::vector<int> sizes;
  for (int r = 0; r < world; ++r) {
    int owner = 0;
    while (all[owner].name != all[r].name) ++owner;
    const int k = named[owner]++;
    const int cut = mine.per_node > 0 ? k / mine.per_node : 0;
    int n = 0;
    while (n < static_cast<int>(sizes.size()) && (key_name[n] != owner || key_cut[n] != cut)) ++n;
    if (n == static_cast<int>(sizes.size()))
      key_name.push_back(owner), key_cut.push_back(cut), sizes.push_back(0);
    m.node_of[r] = n;
    m.local_of[r] = sizes[n]++;
  }
  m.nodes = static_cast<int>(sizes.size());
  m.local_size = sizes[0];
  for (int n = 0; n < m.nodes; ++n)
    if (sizes[n] != m.local_size) {
      std::string list;
      for (int s : sizes) list += (list.empty() ? "" : ", ") + std::to_string(s);
      detail::throw_invalid("learn_nodes", "the nodes hold different numbers of ranks (" + list +
                                               "): a hierarchical collective needs the same number on "
                                               "every node (one rail per local rank)");
    }
  m.node = m.node_of[rank];
  m.local_rank = m.local_of[rank];
  m.rank_at.assign(world, 0);
  for (int r = 0; r < world; ++r)
    m.rank_at[static_cast<std::size_t>(m.node_of[r]) * m.local_size + m.local_of[r]] = r;
  return m;
}

} // namespace ark
