#pragma once
/// \file dispatch/sharding_rule.h
/// Sharding rules of the DTensor dispatch key: for each ATen operator a
/// rule, as data, and the torch-free propagation that maps the input layouts to the layouts
/// the inputs must be redistributed to and the output layout. The boxed fallback
/// (dispatch/fallback.cc) executes what this file decides; nothing here includes ATen, so the
/// propagation can be tested (and later moved to the core) without LibTorch.
///
///   const OpRule* r = find_rule("aten::mul.Tensor");
///   Propagation p = propagate_elementwise("aten::mul.Tensor", *r, {a_layout, b_layout});
///   // p.inputs[i]: redistribute arg i to this layout first; p.output: the result's layout.
///
/// Partial algebra (sum/avg only; a Partial(max/min) input is reduced to Replicate first):
/// - kAdditive ops (add, sub, neg, clone): P+P -> P (same reduce op), P+R -> P (the
///   Replicate operand becomes Partial locally: zeros off coordinate 0 for sum, no bytes).
/// - kLinearIn ops (mul: args 0 and 1; div, *_backward: arg 0): one Partial operand among the
///   linear args stays Partial, every other operand is reduced to Replicate (P*R -> P,
///   P*P -> P*R after one all_reduce); of several, the one whose reduction would cost the
///   most bytes stays (`s * x`, s [n] and x [m, n] both P(sum): s is all-reduced), ties to
///   argument order.
/// - kReduce ops (relu, exp, tanh, gelu): every Partial is reduced to Replicate first.
/// - kAddLinear ops (addcmul: self + v*t1*t2, linear in t1 and in t2; addcdiv: self + v*t1/t2,
///   linear in t1): the result is Partial when self or one linear arg is Partial(sum/avg);
///   self and one linear arg (the keeper) carry that Partial (a Replicate one made Partial
///   locally: zeros off coordinate 0 for sum), every other operand is reduced to Replicate.
/// Shard wins over Partial and Replicate on a mesh dim: S+R -> S (the Replicate operand is
/// sliced locally), S+P -> S (reduce-scatter). Operands sharded on different dims, S(i)+S(j):
/// each combination of the offered Shards over the mesh dims is costed (the bytes the
/// redistributions move: redistribution_cost in matmul_rules.h times each operand's
/// element_size) and the cheapest wins, ties to
/// argument order (equal shapes: S(i), the second moved); `b + a` with b [n] S(0) and a [n, n]
/// S(0) gathers b (n elements) and keeps a's S(0), where the first operand's S(1) would move a.
/// RaggedShard (seed §4.7): elementwise ops (every other operand moved onto the ragged layout;
/// Replicate ones cut locally, ragged_operand.h) and full reductions; everything else throws
/// NotImplementedError.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <type_traits>
#include <optional>
#include <string>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/core/layout.h"

namespace hyper::dispatch {

enum class RuleKind {
  kElementwise,  ///< pointwise with broadcasting; 0-dim plain tensors act as Replicate
  kReduction,    ///< sum over dims (none given: all) with keepdim
  kLike,         ///< *_like factories: the input's layout with Partial -> Replicate
  kExpand,       ///< expand(self, size): Replicate/Partial any; Shard on unexpanded dims
  kAlias,        ///< a view of the whole tensor: the same layout
  kMatmul,       ///< mm / bmm / addmm / baddbmm: dispatch/matmul_rules.h
  kViewOp,       ///< view ops with the Shard dims tracked (view_rules.h)
};

enum class PartialRule { kReduce, kAdditive, kLinearIn, kAddLinear };

struct ArgLayout;
struct Propagation;
struct ViewRewrite;  // view_rules.h
/// The non-tensor arguments 1..n-1 of a view op as its rule reads them: an int is {v}, an int
/// list is the list, None is nullopt.
using ViewOpArgs = std::vector<std::optional<std::vector<int64_t>>>;
/// A view op's rule (view_rules.h): the layouts of `in` viewed with `args`, and how the local
/// call's arguments are rewritten.
using ViewRule = Propagation (*)(const std::string& op_name, const ArgLayout& in,
                                 const ViewOpArgs& args, ViewRewrite* rewrite);

/// One operator's rule.
struct OpRule {
  RuleKind kind = RuleKind::kElementwise;
  /// Schema positions of the tensor arguments the rule reads (others pass through).
  std::vector<int> tensor_args;
  PartialRule partial = PartialRule::kReduce;
  /// kLinearIn: positions (indices into tensor_args) in which the op is linear.
  std::vector<int> linear_args;
  /// Argument 0 is written and returned (its layout cannot change).
  bool inplace = false;
  /// What the rule reads of the call besides its tensors' layouts (schema positions; -1: none),
  /// so the executor has no op-name cases and the decision cache keys on them:
  /// kReduction: the reduced dims (absent or None: all), keepdim, and the reduction of the
  /// result's Partial ("sum", "max", "min"); kExpand: the size; kLike: a size that must be the
  /// input's global shape and a stride (both made the rank's box: new_empty_strided).
  int dims_arg = -1;
  int keepdim_arg = -1;
  std::string reduce_op = "sum";
  int size_arg = -1;
  int stride_arg = -1;
  /// kMatmul: the operands' leading batch dims (bmm, baddbmm: 1) and whether argument 0 is an
  /// added bias (addmm, baddbmm).
  int batch_dims = 0;
  bool has_bias = false;
  /// kViewOp: the view's rule.
  ViewRule view = nullptr;
};

/// A kElementwise rule over the tensor arguments at schema positions `args`.
OpRule elementwise_rule(std::vector<int> args, PartialRule partial, std::vector<int> linear = {},
                        bool inplace = false);

/// A kReduction rule reading dims and keepdim at those positions (-1: absent).
OpRule reduction_rule(int dims_arg, int keepdim_arg, const char* reduce_op);
/// A kMatmul rule over the tensor arguments at `args`.
OpRule matmul_rule(std::vector<int> args, int batch_dims, bool has_bias);

/// `l` with `ps` instead of its placements (same mesh and shape).
inline Layout with_placements(const Layout& l, Placements ps) {
  return Layout(l.mesh(), std::move(ps), l.shape());
}

/// The rule of `op_name` ("aten::add.Tensor", "aten::neg": schema name, then "." and the
/// overload name when there is one), or null.
const OpRule* find_rule(const std::string& op_name);
/// Every operator name with a rule, sorted.
std::vector<std::string> rule_names();

/// A tensor argument as a rule sees it: a DTensor's layout, or a plain tensor's shape.
struct ArgLayout {
  std::optional<Layout> layout;  ///< absent: a plain (non-DTensor) tensor
  Shape shape;                   ///< global shape (the plain tensor's shape)
  /// Bytes per element: the pointwise rule weighs the elements it moves by it (masked_fill's
  /// bool mask beside a float self); 1 where every operand has one dtype.
  int64_t element_size = 1;
  static ArgLayout of(const Layout& l, int64_t element_size = 1) {
    return ArgLayout{l, l.shape(), element_size};
  }
  static ArgLayout plain(Shape s) { return ArgLayout{std::nullopt, std::move(s)}; }
};

/// What a rule decided.
struct Propagation {
  /// Per tensor argument, the layout it must have when the local op runs (for a plain
  /// tensor, taken as Replicate: the layout of its shape to slice it to, Partial(sum) dims
  /// meaning "zero it off coordinate 0"; absent: use the argument unchanged). A ragged layout
  /// of a shape other than the argument's: the argument made Replicate, broadcast to that
  /// shape and cut to the rank's flat interval (ragged_operand.h).
  std::vector<std::optional<Layout>> inputs;
  Layout output;
};

/// `aten::mm(arg 0: mesh=[2] placements=[S(0)] shape=[4,3]; arg 1: plain shape=[3])`.
std::string describe_args(const std::string& op_name, const std::vector<ArgLayout>& args);

/// `dim` of a tensor of `rank` dims as an index in [0, max(rank + extra, 1)) (negative counts
/// from the end; a 0-dim tensor takes 0 and -1, as ATen; `extra` = 1 for unsqueeze, whose dim may
/// be one past the last). Throws ValueError
/// `<where>: dim <dim> out of range [<lo>, <hi>] for a tensor of <rank> dims`. `where`: a string or
/// a callable returning one (called only for the error).
template <class Where>
int64_t normalized_dim(int64_t dim, int64_t rank, const Where& where, int64_t extra = 0) {
  const int64_t span = std::max<int64_t>(rank + extra, 1);
  if (dim >= -span && dim < span) return dim < 0 ? dim + span : dim;
  std::string w;
  if constexpr (std::is_invocable_v<const Where&>) w = where();
  else w = where;
  throw ValueError(::hyper::internal::str_cat(w, ": dim ", dim, " out of range [", -span, ", ", span - 1,
                                     "] for a tensor of ", rank, " dims"));
}

/// `a`'s layout, or for a plain tensor Replicate on `like`'s mesh (a plain operand beside a
/// DTensor is Replicate: every rank holds its global value). Throws NotImplementedError
/// `<where()>: <what> is a RaggedShard DTensor (fail-closed...)` for a ragged `a`, ValueError for
/// a DTensor `a` on another mesh than `like`'s.
Layout layout_or_replicate(const ArgLayout& a, const Layout& like, const std::string& what,
                           const std::function<std::string()>& where);

/// Pointwise ops. A plain tensor beside a DTensor is Replicate (every rank holds the global
/// value; a Shard or Partial target is made from it locally, no bytes). Throws ValueError for
/// shapes that do not broadcast or DTensor operands on different meshes; NotImplementedError
/// for an in-place op on a plain tensor, and an in-place op whose argument 0 would change
/// layout. A RaggedShard operand of the output's shape gives the output its layout (argument
/// 0's first) and every operand with dims is moved to it (a 0-dim DTensor made Replicate).
Propagation propagate_elementwise(const std::string& op_name, const OpRule& rule,
                                  const std::vector<ArgLayout>& args);

/// `reduce_op` "max"/"min" (amax/amin): sharded reduced dims become Partial(max/min), a
/// Partial(reduce_op) input stays, any other Partial is reduced to Replicate first. A reduced
/// dim sharded so that some rank holds none of it: with `fill_empty` (a floating, integral or
/// bool dtype) that rank's local result is the identity (-inf / the dtype's lowest / false for
/// max, +inf / highest / true for min: the executor fills it,
/// ATen's amax of an empty region would fail); without it the op is refused on every rank.
/// Sum over `dims` (empty: every dim; negative dims count from the end) with `keepdim`.
/// Sharded reduced dims become Partial(sum). Throws ValueError for a dim out of range;
/// NotImplementedError for a ragged input reduced over fewer than all dims.
Propagation propagate_reduction(const std::string& op_name, const ArgLayout& in,
                                std::vector<int64_t> dims, bool keepdim,
                                const std::string& reduce_op = "sum", bool fill_empty = false);

/// *_like factories: the output has the input's layout with every Partial made Replicate.
Propagation propagate_like(const std::string& op_name, const ArgLayout& in);

/// expand(self, size) with -1 keeping a size. Throws NotImplementedError for a ragged input
/// or a Shard on an expanded dim; ValueError for a size that cannot be expanded to.
Propagation propagate_expand(const std::string& op_name, const ArgLayout& in,
                             const std::vector<int64_t>& size);

/// A Partial whose reduction is linear (sum, avg): it passes through linear ops.
bool linear_partial(const Placement& p);

/// `l` with every Partial made Replicate: how an op that is not linear reads a Partial input,
/// and how the gradient of a Partial output is read.
Layout partials_replicated(const Layout& l);

}  // namespace hyper::dispatch
