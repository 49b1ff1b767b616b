#include "hyper/core/redistribute_plan.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "hyper/core/errors.h"
#include "hyper/core/internal/text.h"

namespace hyper {

using internal::str_cat;

std::string Piece::to_string() const {
  return str_cat(src, "->", dst, " ", box.to_string(), " src_region=", src_region,
                 " dst_region=", dst_region, reduce ? " reduce" : "");
}

namespace {

// Row-major enumeration of all coordinates over the given mesh dims.
std::vector<std::vector<int64_t>> enumerate(const std::vector<int64_t>& mesh_shape,
                                            const std::vector<int64_t>& dims) {
  std::vector<std::vector<int64_t>> out;
  std::vector<int64_t> c(dims.size(), 0);
  while (true) {
    out.push_back(c);
    int64_t k = static_cast<int64_t>(dims.size()) - 1;
    while (k >= 0) {
      if (++c[k] < mesh_shape[dims[k]]) break;
      c[k] = 0;
      --k;
    }
    if (k < 0) break;
  }
  return out;
}

int64_t overlap(const std::vector<FlatBox>& a, const std::vector<FlatBox>& b) {
  int64_t n = 0;
  for (const auto& x : a)
    for (const auto& y : b)
      if (auto i = intersect(x.box, y.box)) n += i->numel();
  return n;
}

}  // namespace

RedistributePlan plan_redistribute(const Layout& src, const Layout& dst) {
  HYPER_CHECK_VALUE(src.mesh().shape() == dst.mesh().shape(), "redistribute needs one mesh: source ",
                    src.to_string(), " and target ", dst.to_string(), " differ in mesh shape");
  // Pieces name ranks by mesh position, so both meshes must put the same ranks there
  // (dim names may differ: they do not move anyone).
  HYPER_CHECK_VALUE(src.mesh().ranks() == dst.mesh().ranks(), "redistribute needs one mesh: source ",
                    src.to_string(), " and target ", dst.to_string(), " differ in mesh ranks");
  HYPER_CHECK_VALUE(src.shape() == dst.shape(), "redistribute keeps the global shape: source ",
                    src.to_string(), " and target ", dst.to_string(), " differ");
  const auto& mesh = src.mesh();
  const auto& mshape = mesh.shape();
  const int64_t nd = mesh.ndim();
  const auto& ps = src.placements();
  const auto& pt = dst.placements();

  std::vector<int64_t> shard_dims, reduce_dims;
  std::string reduce_op;
  for (int64_t m = 0; m < nd; ++m) {
    if (ps[m].is_shard() || ps[m].is_ragged_shard()) shard_dims.push_back(m);
    if (ps[m].is_partial() && pt[m].is_partial()) {
      HYPER_CHECK_IMPLEMENTED(ps[m].reduce_op() == pt[m].reduce_op(), "redistribute from ",
                              ps[m].to_string(), " to ", pt[m].to_string(), " on mesh dim ", m,
                              " (changing the reduce op of a Partial) is not implemented");
    } else if (ps[m].is_partial()) {
      if (reduce_op.empty()) reduce_op = ps[m].reduce_op();
      HYPER_CHECK_IMPLEMENTED(reduce_op == ps[m].reduce_op(), "reducing Partial mesh dims of "
                              "different ops at once is not implemented: ",
                              to_string(ps));
      reduce_dims.push_back(m);
    }
  }

  RedistributePlan plan{src, dst, {}, reduce_op, 1, {}, {}, {}};
  {
    bool pure = !reduce_dims.empty();
    for (int64_t m = 0; m < nd && pure; ++m) {
      const bool reduced = std::find(reduce_dims.begin(), reduce_dims.end(), m) != reduce_dims.end();
      pure = reduced ? pt[m].is_replicate() : ps[m] == pt[m];
    }
    if (pure) plan.all_reduce_dims = reduce_dims;
  }
  const auto combos = enumerate(mshape, reduce_dims);
  plan.reduce_count = static_cast<int64_t>(combos.size());
  const auto keys = enumerate(mshape, shard_dims);
  plan.traffic.resize(static_cast<std::size_t>(mesh.size()));

  for (int64_t d = 0; d < mesh.size(); ++d) {
    const auto cd = mesh.coordinate_at(d);
    if (dst.holds_partial_zeros(d, ps)) {
      plan.zero_fill.push_back(d);
      continue;
    }
    const auto target = dst.local_region(d);
    if (target.empty()) continue;
    for (std::size_t ci = 0; ci < combos.size(); ++ci) {
      for (const auto& key : keys) {
        auto coord = cd;  // replicated and kept-partial dims: the receiver's own coordinate
        for (std::size_t k = 0; k < shard_dims.size(); ++k) coord[shard_dims[k]] = key[k];
        for (std::size_t k = 0; k < reduce_dims.size(); ++k) coord[reduce_dims[k]] = combos[ci][k];
        const int64_t s = mesh.index_at(coord);
        const auto source = src.local_region(s);
        for (std::size_t i = 0; i < target.size(); ++i) {
          for (std::size_t j = 0; j < source.size(); ++j) {
            auto inter = intersect(target[i].box, source[j].box);
            if (!inter) continue;
            plan.pieces.push_back(Piece{s, d, std::move(*inter), static_cast<int64_t>(j),
                                        static_cast<int64_t>(i), ci != 0});
          }
        }
      }
    }
    int64_t need = 0;
    for (const auto& t : target) need += t.box.numel();
    plan.traffic[d].lower_bound =
        need * static_cast<int64_t>(combos.size()) - overlap(target, src.local_region(d));
  }
  for (const auto& p : plan.pieces) {
    if (p.is_local()) {
      plan.traffic[p.src].local += p.numel();
    } else {
      plan.traffic[p.src].sent += p.numel();
      plan.traffic[p.dst].received += p.numel();
    }
  }
  return plan;
}

bool RedistributePlan::is_local_only() const {
  if (!zero_fill.empty() || reduce_count != 1) return false;
  for (const auto& p : pieces)
    if (!p.is_local()) return false;
  return true;
}

std::vector<Piece> RedistributePlan::sends(int64_t index, int64_t peer) const {
  std::vector<Piece> out;
  for (const auto& p : pieces)
    if (p.src == index && p.dst == peer && peer != index) out.push_back(p);
  return out;
}

std::vector<Piece> RedistributePlan::receives(int64_t index, int64_t peer) const {
  return sends(peer, index);
}

std::vector<Piece> RedistributePlan::local(int64_t index) const {
  std::vector<Piece> out;
  for (const auto& p : pieces)
    if (p.src == index && p.dst == index) out.push_back(p);
  return out;
}

std::vector<int64_t> RedistributePlan::send_counts(int64_t index) const {
  std::vector<int64_t> out(static_cast<std::size_t>(src.mesh().size()), 0);
  for (const auto& p : pieces)
    if (p.src == index && !p.is_local()) out[p.dst] += p.numel();
  return out;
}

std::vector<int64_t> RedistributePlan::recv_counts(int64_t index) const {
  std::vector<int64_t> out(static_cast<std::size_t>(src.mesh().size()), 0);
  for (const auto& p : pieces)
    if (p.dst == index && !p.is_local()) out[p.src] += p.numel();
  return out;
}

int64_t RedistributePlan::total_sent() const {
  int64_t n = 0;
  for (const auto& t : traffic) n += t.sent;
  return n;
}

int64_t RedistributePlan::total_lower_bound() const {
  int64_t n = 0;
  for (const auto& t : traffic) n += t.lower_bound;
  return n;
}

bool RedistributePlan::is_zero_fill(int64_t index) const {
  return std::find(zero_fill.begin(), zero_fill.end(), index) != zero_fill.end();
}

std::string RedistributePlan::to_string(int64_t element_size) const {
  std::ostringstream os;
  os << "plan: " << src.to_string() << "\n   -> " << dst.to_string() << "\n";
  if (!reduce_op.empty())
    os << "reduces " << reduce_count << " partial contributions per element with '" << reduce_op
       << "'\n";
  for (int64_t r = 0; r < src.mesh().size(); ++r) {
    const auto& t = traffic[r];
    os << "rank " << r << ": sends " << t.sent * element_size << " B, receives "
       << t.received * element_size << " B (lower bound " << t.lower_bound * element_size
       << " B), keeps " << t.local * element_size << " B locally";
    if (is_zero_fill(r)) os << ", zero-filled";
    os << "\n";
    for (const auto& p : pieces) {
      if (p.dst != r) continue;
      os << "    " << (p.is_local() ? "keep     " : "recv from ") << p.src << " " << p.box.to_string()
         << " " << p.numel() * element_size << " B" << (p.reduce ? " (" + reduce_op + ")" : "")
         << "\n";
    }
  }
  os << "total: " << total_sent() * element_size << " B on the wire, lower bound "
     << total_lower_bound() * element_size << " B\n";
  return os.str();
}

}  // namespace hyper
