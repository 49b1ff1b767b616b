#include "hyper/core/placement.h"

#include <numeric>
#include <ostream>

#include "hyper/core/errors.h"
#include "hyper/core/internal/text.h"

namespace hyper {

using internal::str_cat;

namespace {
const char* kind_name(Placement::Kind k) {
  switch (k) {
    case Placement::Kind::kShard: return "Shard";
    case Placement::Kind::kReplicate: return "Replicate";
    case Placement::Kind::kPartial: return "Partial";
    case Placement::Kind::kRaggedShard: return "RaggedShard";
  }
  return "?";
}

void hash_combine(std::size_t& seed, std::size_t v) {
  seed ^= v + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2);
}
}  // namespace

Placement::Placement() = default;

int64_t Placement::dim() const {
  HYPER_CHECK_VALUE(is_shard(), "dim() called on ", to_string(), " (", kind_name(kind_),
                    "), which is not a Shard");
  return dim_;
}

const std::string& Placement::reduce_op() const {
  HYPER_CHECK_VALUE(is_partial(), "reduce_op() called on ", to_string(),
                    ", which is not a Partial");
  return op_;
}

const std::vector<int64_t>& Placement::dims() const {
  HYPER_CHECK_VALUE(is_ragged_shard(), "dims() called on ", to_string(),
                    ", which is not a RaggedShard");
  return dims_;
}

const std::vector<int64_t>& Placement::local_units() const {
  HYPER_CHECK_VALUE(is_ragged_shard(), "local_units() called on ", to_string(),
                    ", which is not a RaggedShard");
  return units_;
}

int64_t Placement::total_units() const {
  const auto& u = local_units();
  return std::accumulate(u.begin(), u.end(), int64_t{0});
}

Placement Placement::make_shard(int64_t dim) {
  Placement p;
  p.kind_ = Kind::kShard;
  p.dim_ = dim;
  return p;
}

Placement Placement::make_partial(std::string op) {
  HYPER_CHECK_VALUE(op == "sum" || op == "avg" || op == "max" || op == "min",
                    "Partial reduce op must be one of sum, avg, max, min; got '", op, "'");
  Placement p;
  p.kind_ = Kind::kPartial;
  p.op_ = std::move(op);
  return p;
}

Placement Placement::make_ragged(std::vector<int64_t> dims, std::vector<int64_t> units) {
  HYPER_CHECK_VALUE(!dims.empty(), "RaggedShard dims must not be empty");
  for (std::size_t i = 0; i < dims.size(); ++i) {
    HYPER_CHECK_VALUE(dims[i] == static_cast<int64_t>(i),
                      "RaggedShard dims must be the prefix (0, ..., ", dims.size() - 1,
                      "); got ", internal::ints_to_tuple(dims));
  }
  HYPER_CHECK_VALUE(!units.empty(), "RaggedShard local_units must not be empty");
  int64_t total = 0;
  for (std::size_t i = 0; i < units.size(); ++i) {
    HYPER_CHECK_VALUE(units[i] >= 0, "RaggedShard local_units must be non-negative; unit ", i,
                      " is ", units[i], " in ", internal::ints_to_tuple(units));
    HYPER_CHECK_VALUE(units[i] <= (int64_t{1} << 40), "RaggedShard unit ", i, " is absurdly large (",
                      units[i], ")");
    total += units[i];
  }
  HYPER_CHECK_VALUE(total > 0, "RaggedShard local_units must not all be zero; got ",
                    internal::ints_to_tuple(units));
  Placement p;
  p.kind_ = Kind::kRaggedShard;
  p.dims_ = std::move(dims);
  p.units_ = std::move(units);
  return p;
}

std::string Placement::to_string() const {
  switch (kind_) {
    case Kind::kShard: return str_cat("S(", dim_, ")");
    case Kind::kReplicate: return "R";
    case Kind::kPartial: return str_cat("P(", op_, ")");
    case Kind::kRaggedShard:
      return str_cat("RS(", internal::ints_to_tuple(dims_), ", ", internal::ints_to_tuple(units_),
                     ")");
  }
  return "?";
}

namespace {
Placement read_placement(internal::TextReader& r) {
  std::string word = r.read_word();
  if (word == "R") return Replicate();
  if (word == "S") {
    r.expect("(");
    int64_t d = r.read_int();
    r.expect(")");
    return Shard(d);
  }
  if (word == "P") {
    r.expect("(");
    std::string op = r.read_word();
    r.expect(")");
    return Partial(op);
  }
  if (word == "RS") {
    r.expect("(");
    auto dims = r.read_tuple();
    r.expect(",");
    auto units = r.read_tuple();
    r.try_consume(",");
    r.expect(")");
    return RaggedShard(std::move(dims), std::move(units));
  }
  r.fail("unknown placement '" + word + "' (expected S(d), R, P(op) or RS((dims), (units)))");
}
}  // namespace

Placement Placement::from_string(const std::string& text) {
  internal::TextReader r(text);
  Placement p = read_placement(r);
  r.expect_end();
  return p;
}

bool Placement::operator==(const Placement& o) const {
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::kShard: return dim_ == o.dim_;
    case Kind::kReplicate: return true;
    case Kind::kPartial: return op_ == o.op_;
    case Kind::kRaggedShard: return dims_ == o.dims_ && units_ == o.units_;
  }
  return false;
}

std::size_t Placement::hash() const {
  std::size_t h = std::hash<int>()(static_cast<int>(kind_));
  switch (kind_) {
    case Kind::kShard: hash_combine(h, std::hash<int64_t>()(dim_)); break;
    case Kind::kReplicate: break;
    case Kind::kPartial: hash_combine(h, std::hash<std::string>()(op_)); break;
    case Kind::kRaggedShard:
      for (auto d : dims_) hash_combine(h, std::hash<int64_t>()(d));
      hash_combine(h, 0xabcdef);
      for (auto u : units_) hash_combine(h, std::hash<int64_t>()(u));
      break;
  }
  return h;
}

std::ostream& operator<<(std::ostream& os, const Placement& p) { return os << p.to_string(); }

std::string to_string(const Placements& ps) {
  std::string s = "[";
  for (std::size_t i = 0; i < ps.size(); ++i) {
    if (i) s += ",";
    s += ps[i].to_string();
  }
  return s + "]";
}

Placements placements_from_string(const std::string& text) {
  internal::TextReader r(text);
  Placements out;
  r.expect("[");
  if (!r.try_consume("]")) {
    while (true) {
      out.push_back(read_placement(r));
      if (r.try_consume("]")) break;
      r.expect(",");
    }
  }
  r.expect_end();
  return out;
}

}  // namespace hyper
