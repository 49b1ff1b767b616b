#include "hyper/core/mesh_topology.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/core/internal/text.h"

namespace hyper {

using internal::str_cat;

MeshTopology::MeshTopology(std::vector<int64_t> shape, std::vector<std::string> names,
                           std::vector<int> ranks)
    : shape_(std::move(shape)), names_(std::move(names)), ranks_(std::move(ranks)) {
  HYPER_CHECK_VALUE(!shape_.empty(), "mesh shape must have at least one dimension");
  for (std::size_t i = 0; i < shape_.size(); ++i)
    HYPER_CHECK_VALUE(shape_[i] > 0, "mesh dim ", i, " has size ", shape_[i], " in mesh shape ",
                      shape_to_string(shape_), "; sizes must be positive");
  // The device count is checked before the ranks are listed (a text form such as "[500000000]"
  // must not allocate gigabytes first).
  int64_t n = 1;
  bool overflow = false;
  for (const int64_t s : shape_) overflow = overflow || __builtin_mul_overflow(n, s, &n);
  HYPER_CHECK_VALUE(!overflow && n <= kMaxMeshSize, "mesh shape ", shape_to_string(shape_),
                    " is too large: ", overflow ? std::string("more than 2^63") : std::to_string(n),
                    " devices, more than ", kMaxMeshSize, " (kMaxMeshSize)");
  if (!names_.empty()) {
    HYPER_CHECK_VALUE(names_.size() == shape_.size(), "mesh has ", shape_.size(),
                      " dims but ", names_.size(), " dim names were given");
    std::set<std::string> seen;
    for (const auto& nm : names_) {
      HYPER_CHECK_VALUE(!nm.empty(), "mesh dim names must not be empty");
      bool ident = !std::isdigit(static_cast<unsigned char>(nm[0]));
      for (char ch : nm) ident = ident && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_');
      HYPER_CHECK_VALUE(ident, "mesh dim name '", nm, "' must be an identifier (letters, digits "
                        "and '_', not starting with a digit)");
      HYPER_CHECK_VALUE(seen.insert(nm).second, "mesh dim name '", nm, "' is repeated");
    }
  }
  if (ranks_.empty()) {
    ranks_.resize(static_cast<std::size_t>(n));
    for (int64_t i = 0; i < n; ++i) ranks_[i] = static_cast<int>(i);
  } else {
    HYPER_CHECK_VALUE(static_cast<int64_t>(ranks_.size()) == n, "mesh shape ",
                      shape_to_string(shape_), " holds ", n, " ranks but ",
                      ranks_.size(), " ranks were given");
    std::set<int> seen;
    for (int r : ranks_) {
      HYPER_CHECK_VALUE(r >= 0, "mesh rank ", r, " is negative");
      HYPER_CHECK_VALUE(seen.insert(r).second, "mesh rank ", r, " appears twice");
    }
  }
}

int64_t MeshTopology::size() const { return static_cast<int64_t>(ranks_.size()); }

int64_t MeshTopology::normalize_dim(int64_t dim) const {
  int64_t nd = ndim();
  HYPER_CHECK_VALUE(dim >= -nd && dim < nd, "mesh dim ", dim, " is out of range for a ", nd,
                    "-D mesh ", to_string());
  return dim < 0 ? dim + nd : dim;
}

int64_t MeshTopology::size(int64_t dim) const { return shape_[normalize_dim(dim)]; }

int64_t MeshTopology::dim_index(const std::string& name) const {
  for (std::size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) return static_cast<int64_t>(i);
  std::string known;
  for (const auto& nm : names_) known += (known.empty() ? "" : ", ") + nm;
  throw ValueError(str_cat("mesh ", to_string(), " has no dim named '", name, "' (dims: ",
                           known.empty() ? "unnamed" : known, ")"));
}

bool MeshTopology::contains(int rank) const {
  return std::find(ranks_.begin(), ranks_.end(), rank) != ranks_.end();
}

int64_t MeshTopology::index_of(int rank) const {
  auto it = std::find(ranks_.begin(), ranks_.end(), rank);
  HYPER_CHECK_VALUE(it != ranks_.end(), "rank ", rank, " is not part of mesh ", to_string());
  return it - ranks_.begin();
}

std::vector<int64_t> MeshTopology::coordinate_at(int64_t index) const {
  HYPER_CHECK_VALUE(index >= 0 && index < size(), "mesh index ", index,
                    " is out of range for mesh ", to_string());
  std::vector<int64_t> c(shape_.size());
  for (int64_t d = ndim() - 1; d >= 0; --d) {
    c[d] = index % shape_[d];
    index /= shape_[d];
  }
  return c;
}

std::vector<int64_t> MeshTopology::coordinate_of(int rank) const {
  return coordinate_at(index_of(rank));
}

int64_t MeshTopology::index_at(const std::vector<int64_t>& coord) const {
  HYPER_CHECK_VALUE(coord.size() == shape_.size(), "coordinate ", shape_to_string(coord),
                    " has ", coord.size(), " entries for a ", ndim(), "-D mesh");
  int64_t idx = 0;
  for (std::size_t d = 0; d < shape_.size(); ++d) {
    HYPER_CHECK_VALUE(coord[d] >= 0 && coord[d] < shape_[d], "coordinate ",
                      shape_to_string(coord), " is outside mesh ", to_string());
    idx = idx * shape_[d] + coord[d];
  }
  return idx;
}

int MeshTopology::rank_at(const std::vector<int64_t>& coord) const {
  return ranks_[index_at(coord)];
}

std::vector<std::vector<int>> MeshTopology::groups_along(int64_t dim) const {
  dim = normalize_dim(dim);
  std::vector<std::vector<int>> groups;
  for (int64_t i = 0; i < size(); ++i) {
    auto c = coordinate_at(i);
    if (c[dim] != 0) continue;
    std::vector<int> g;
    for (int64_t k = 0; k < shape_[dim]; ++k) {
      c[dim] = k;
      g.push_back(rank_at(c));
    }
    groups.push_back(std::move(g));
  }
  return groups;
}

std::vector<int> MeshTopology::group_of(int rank, int64_t dim) const {
  dim = normalize_dim(dim);
  auto c = coordinate_of(rank);
  std::vector<int> g;
  for (int64_t k = 0; k < shape_[dim]; ++k) {
    c[dim] = k;
    g.push_back(rank_at(c));
  }
  return g;
}

MeshTopology MeshTopology::sub_mesh(int rank, const std::vector<int64_t>& dims) const {
  HYPER_CHECK_VALUE(!dims.empty(), "sub_mesh needs at least one mesh dim");
  std::vector<int64_t> nd;
  std::set<int64_t> seen;
  for (auto d : dims) {
    int64_t n = normalize_dim(d);
    HYPER_CHECK_VALUE(seen.insert(n).second, "sub_mesh dim ", d, " is repeated");
    nd.push_back(n);
  }
  auto base = coordinate_of(rank);
  std::vector<int64_t> shape;
  std::vector<std::string> names;
  for (auto d : nd) {
    shape.push_back(shape_[d]);
    if (!names_.empty()) names.push_back(names_[d]);
  }
  MeshTopology probe(shape);
  std::vector<int> ranks;
  for (int64_t i = 0; i < probe.size(); ++i) {
    auto sc = probe.coordinate_at(i);
    auto c = base;
    for (std::size_t k = 0; k < nd.size(); ++k) c[nd[k]] = sc[k];
    ranks.push_back(rank_at(c));
  }
  return MeshTopology(shape, names, ranks);
}

std::string MeshTopology::to_string() const {
  std::string s = "[";
  for (std::size_t i = 0; i < shape_.size(); ++i) {
    if (i) s += ",";
    if (!names_.empty()) s += names_[i] + "=";
    s += std::to_string(shape_[i]);
  }
  s += "]";
  bool iota = true;
  for (std::size_t i = 0; i < ranks_.size(); ++i) iota = iota && ranks_[i] == static_cast<int>(i);
  if (!iota) {
    s += "@[";
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      if (i) s += ",";
      s += std::to_string(ranks_[i]);
    }
    s += "]";
  }
  return s;
}

MeshTopology MeshTopology::from_string(const std::string& text) {
  internal::TextReader r(text);
  std::vector<int64_t> shape;
  std::vector<std::string> names;
  r.expect("[");
  while (true) {
    r.skip_space();
    bool named = false;
    if (r.pos() < text.size() && !std::isdigit(static_cast<unsigned char>(text[r.pos()])) &&
        text[r.pos()] != '-') {
      names.push_back(r.read_word());
      r.expect("=");
      named = true;
    }
    shape.push_back(r.read_int());
    if (!named && !names.empty()) r.fail("either all mesh dims are named or none");
    if (r.try_consume("]")) break;
    r.expect(",");
  }
  if (!names.empty() && names.size() != shape.size()) r.fail("either all mesh dims are named or none");
  std::vector<int> ranks;
  if (r.try_consume("@")) {
    for (auto v : r.read_int_list()) ranks.push_back(static_cast<int>(v));
  }
  r.expect_end();
  return MeshTopology(shape, names, ranks);
}

bool MeshTopology::operator==(const MeshTopology& o) const {
  return shape_ == o.shape_ && names_ == o.names_ && ranks_ == o.ranks_;
}

std::size_t MeshTopology::hash() const {
  std::size_t h = 1469598103934665603ULL;
  auto mix = [&](std::size_t v) { h = (h ^ v) * 1099511628211ULL; };
  for (auto s : shape_) mix(std::hash<int64_t>()(s));
  for (const auto& n : names_) mix(std::hash<std::string>()(n));
  for (auto r : ranks_) mix(std::hash<int>()(r));
  return h;
}

}  // namespace hyper
