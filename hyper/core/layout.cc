#include "hyper/core/layout.h"

#include <algorithm>
#include <cctype>
#include <ostream>

#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/core/internal/text.h"

namespace hyper {

using internal::str_cat;

Layout::Layout(MeshTopology mesh, Placements placements, Shape shape)
    : mesh_(std::move(mesh)), placements_(std::move(placements)), shape_(std::move(shape)) {
  check_shape(shape_, "global shape");
  HYPER_CHECK_VALUE(static_cast<int64_t>(placements_.size()) == mesh_.ndim(), "layout has ",
                    placements_.size(), " placements ", hyper::to_string(placements_),
                    " for a ", mesh_.ndim(), "-D mesh ", mesh_.to_string());
  const int64_t rank = static_cast<int64_t>(shape_.size());
  for (std::size_t m = 0; m < placements_.size(); ++m) {
    Placement& p = placements_[m];
    if (p.is_shard()) {
      const int64_t d = p.dim();
      HYPER_CHECK_VALUE(d >= -rank && d < rank, "Shard(", d, ") on mesh dim ", m,
                        " is out of range for a tensor of shape ", shape_to_string(shape_));
      if (d < 0) p = Shard(d + rank);
    } else if (p.is_ragged_shard()) {
      HYPER_CHECK_VALUE(!ragged_.has_value(), "a layout holds at most one RaggedShard; got ",
                        hyper::to_string(placements_));
      ragged_ = RaggedInfo{static_cast<int64_t>(m), p};
    }
  }
  if (ragged_) {
    for (std::size_t m = 0; m < placements_.size(); ++m) {
      if (static_cast<int64_t>(m) == ragged_->mesh_dim) continue;
      HYPER_CHECK_VALUE(placements_[m].is_replicate() || placements_[m].is_shard(),
                        "beside a RaggedShard every other mesh dim must be Replicate or Shard; "
                        "mesh dim ", m, " is ", placements_[m].to_string(), " in ",
                        hyper::to_string(placements_));
    }
    // The RaggedShard splits each Shard box; boxes differ only where a Shard is uneven, so
    // every coordinate of the other mesh dims is checked (the ragged dim's own is irrelevant).
    bool beside_shard = false;
    for (const auto& q : placements_) beside_shard = beside_shard || q.is_shard();
    std::vector<Shape> checked;
    for (int64_t i = 0; i < (beside_shard ? mesh_.size() : 1); ++i) {
      if (mesh_.coordinate_at(i)[ragged_->mesh_dim] != 0) continue;
      const Shape box = ragged_box(i).sizes;
      if (std::find(checked.begin(), checked.end(), box) != checked.end()) continue;
      try {
        check_ragged(box, ragged_->placement, mesh_.size(ragged_->mesh_dim));
      } catch (const ValueError& e) {
        if (box == shape_) throw;
        throw ValueError(str_cat(e.what(), " (the Shard box ", shape_to_string(box), " of mesh index ",
                                 i, " in ", hyper::to_string(placements_), " of shape ",
                                 shape_to_string(shape_), ")"));
      }
      checked.push_back(box);
    }
  }
}

int64_t Layout::numel() const { return hyper::numel(shape_); }

Placements Layout::normal_placements() const {
  Placements out = placements_;
  for (auto& p : out)
    if (p.is_ragged_shard()) p = Replicate();
  return out;
}

Layout Layout::normal_layout() const { return Layout(mesh_, normal_placements(), shape_); }

bool Layout::has_partial() const {
  for (const auto& p : placements_)
    if (p.is_partial()) return true;
  return false;
}

bool Layout::is_replicated() const {
  for (const auto& p : placements_)
    if (!p.is_replicate()) return false;
  return true;
}

bool Layout::holds_partial_zeros(int64_t index) const {
  return holds_partial_zeros(index, Placements(placements_.size(), Replicate()));
}

bool Layout::holds_partial_zeros(int64_t index, const Placements& source) const {
  HYPER_CHECK_VALUE(source.size() == placements_.size(), "holds_partial_zeros: ", source.size(),
                    " source placements ", hyper::to_string(source), " for the ",
                    placements_.size(), " mesh dims of ", to_string());
  const auto coord = mesh_.coordinate_at(index);
  for (std::size_t m = 0; m < placements_.size(); ++m) {
    const Placement& p = placements_[m];
    if (p.is_partial() && p.reduce_op() == "sum" && !source[m].is_partial() && coord[m] != 0)
      return true;
  }
  return false;
}

std::vector<std::vector<int64_t>> Layout::tensor_map() const {
  std::vector<std::vector<int64_t>> map(shape_.size());
  const auto normal = normal_placements();
  for (std::size_t m = 0; m < normal.size(); ++m) {
    if (!normal[m].is_shard()) continue;
    map[normal[m].dim()].push_back(mesh_.ndim() - 1 - static_cast<int64_t>(m));
  }
  for (auto& e : map)
    if (e.empty()) e.push_back(-1);
  return map;
}

Box Layout::shard_box(int64_t index) const {
  const auto coord = mesh_.coordinate_at(index);
  Box b = Box::full(shape_);
  for (std::size_t m = 0; m < placements_.size(); ++m) {
    if (!placements_[m].is_shard()) continue;
    const int64_t d = placements_[m].dim();
    Interval piece = chunk_range(b.sizes[d], mesh_.shape()[m], coord[m]);
    b.offsets[d] += piece.start;
    b.sizes[d] = piece.size();
  }
  return b;
}

Box Layout::local_box(int64_t index) const {
  HYPER_CHECK_VALUE(!ragged_, "local_box() is not defined for the ragged layout ", to_string(),
                    "; use local_region()");
  return shard_box(index);
}

Box Layout::ragged_box(int64_t index) const {
  HYPER_CHECK_VALUE(ragged_.has_value(), "layout ", to_string(), " has no RaggedShard");
  return shard_box(index);
}

Interval Layout::ragged_interval(int64_t index) const {
  const Box box = ragged_box(index);
  return hyper::ragged_interval(box.sizes, ragged_->placement,
                                mesh_.coordinate_at(index)[ragged_->mesh_dim]);
}

std::vector<FlatBox> Layout::local_region(int64_t index) const {
  if (ragged_) {
    const Box box = ragged_box(index);
    auto out = decompose_interval(box.sizes, ragged_interval(index));
    for (auto& fb : out)
      for (std::size_t d = 0; d < box.offsets.size(); ++d) fb.box.offsets[d] += box.offsets[d];
    return out;
  }
  Box b = local_box(index);
  std::vector<FlatBox> out;
  if (!b.empty()) out.push_back(FlatBox{std::move(b), 0});
  return out;
}

Shape Layout::local_shape(int64_t index) const {
  if (ragged_) return {ragged_interval(index).size()};
  return local_box(index).sizes;
}

int64_t Layout::local_numel(int64_t index) const {
  if (ragged_) return ragged_interval(index).size();
  return local_box(index).numel();
}

std::string Layout::to_string() const {
  return str_cat("mesh=", mesh_.to_string(), " placements=", hyper::to_string(placements_),
                 " shape=", shape_to_string(shape_));
}

Layout Layout::from_string(const std::string& text) {
  // Keys are recognised only outside brackets and at the start of a word, so mesh dim
  // names such as `[shape=2]` are not mistaken for keys; each value runs to the next key.
  const char* const keys[] = {"mesh", "placements", "shape"};
  std::size_t begin[3] = {std::string::npos, std::string::npos, std::string::npos};
  std::vector<std::size_t> key_starts;
  int depth = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '[' || c == '(') ++depth;
    if (c == ']' || c == ')') --depth;
    if (depth != 0 || (i > 0 && !std::isspace(static_cast<unsigned char>(text[i - 1])))) continue;
    for (int k = 0; k < 3; ++k) {
      const std::string key = std::string(keys[k]) + "=";
      if (text.compare(i, key.size(), key) != 0) continue;
      HYPER_CHECK_VALUE(begin[k] == std::string::npos, "cannot parse layout '", text, "': '",
                        key, "' appears twice");
      begin[k] = i + key.size();
      key_starts.push_back(i);
    }
  }
  auto value = [&](int k) {
    HYPER_CHECK_VALUE(begin[k] != std::string::npos, "cannot parse layout '", text,
                      "': missing '", keys[k], "='");
    std::size_t e = text.size();
    for (auto s : key_starts)
      if (s > begin[k]) e = std::min(e, s);
    return text.substr(begin[k], e - begin[k]);
  };
  std::optional<MeshTopology> mesh;
  Placements placements;
  Shape shape;
  try {
    mesh = MeshTopology::from_string(value(0));
    placements = placements_from_string(value(1));
    const std::string shape_text = value(2);
    internal::TextReader r(shape_text);
    shape = r.read_int_list();
    r.expect_end();
  } catch (const ValueError& e) {
    const std::string what = e.what();
    if (what.rfind("cannot parse layout '", 0) == 0) throw;
    throw ValueError(str_cat("cannot parse layout '", text, "': ", what));
  }
  return Layout(std::move(*mesh), std::move(placements), std::move(shape));
}

bool Layout::operator==(const Layout& o) const {
  return mesh_ == o.mesh_ && placements_ == o.placements_ && shape_ == o.shape_;
}

std::size_t Layout::hash() const {
  std::size_t h = mesh_.hash();
  auto mix = [&](std::size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
  for (const auto& p : placements_) mix(p.hash());
  for (auto s : shape_) mix(std::hash<int64_t>()(s));
  return h;
}

std::ostream& operator<<(std::ostream& os, const Layout& l) { return os << l.to_string(); }

}  // namespace hyper
