#include "hyper/core/read_plan.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <map>
#include <queue>
#include <set>
#include <utility>

#include "hyper/core/errors.h"
#include "hyper/core/format.h"

namespace hyper {

using internal::str_cat;

std::string ReadItem::to_string() const {
  return str_cat("chunk ", chunk, " ", box.to_string(), " (in chunk ", src.to_string(),
                 ") -> region ", dst_region, " ", dst.to_string());
}

namespace {

/// The checks of one chunk on its own (rank, signs, inside the shape); throws ValueError.
void check_chunk(const Box& whole, const Shape& shape, std::size_t i, const Box& c) {
  HYPER_CHECK_VALUE(c.rank() == whole.rank() && c.offsets.size() == c.sizes.size(), "chunk ", i,
                    " ", c.to_string(), " does not have the rank of shape ",
                    shape_to_string(shape));
  for (std::size_t d = 0; d < c.sizes.size(); ++d)
    HYPER_CHECK_VALUE(c.sizes[d] >= 0 && c.offsets[d] >= 0, "chunk ", i, " ", c.to_string(),
                      " has a negative offset or size");
  HYPER_CHECK_VALUE(whole.contains(c), "chunk ", i, " ", c.to_string(), " lies outside shape ",
                    shape_to_string(shape));
}

/// first_overlap's answer when its budget ran out.
constexpr int64_t kUndecided = -2;

bool chunk_ok(const Box& whole, const Box& c) {
  if (c.rank() != whole.rank() || c.offsets.size() != c.sizes.size()) return false;
  for (std::size_t d = 0; d < c.sizes.size(); ++d)
    if (c.sizes[d] < 0 || c.offsets[d] < 0) return false;
  return whole.contains(c);
}

/// The first overlapping pair in the order of the pairwise loop "for i, for j < i"
/// (smallest i, then smallest j) among the non-empty chunks `ids` (valid, of rank r >= 1),
/// as {j, i}; {-1, -1} when none overlap.
///
/// A sweep along dim s (the dim with the most distinct offsets): chunks enter in the order of
/// their offset on s and leave once the sweep passes their end on s, so a new chunk is compared
/// only with the chunks still open at its offset. Those are kept ordered by their offset on a
/// second dim t, and only the ones whose t-interval can reach the new chunk are compared:
/// offset_t > new.offset_t - (longest open t-extent). A grid of g_s x g_t chunks costs
/// O(n log n); a ragged layout's boxes (a few per rank) keep few chunks open. Every
/// overlapping pair is found (the later-entering chunk meets the earlier one while open),
/// so the minimal pair is exact.
///
/// Crafted boxes can still make many open chunks reach a new one (a wide chunk widens the
/// window; thin chunks all open on s and all crossing on t, apart only on a third dim), so the
/// pair comparisons are counted in coordinate units (r per comparison) against `*budget`: once
/// it runs out the sweep stops and returns {kUndecided, kUndecided}.
std::pair<int64_t, int64_t> first_overlap(const std::vector<Box>& chunks,
                                          const std::vector<int64_t>& ids, std::size_t r,
                                          int64_t* budget) {
  // Sweep dim s: most distinct offsets; t: the next (s itself for rank 1).
  std::vector<std::size_t> distinct(r, 0);
  {
    std::vector<int64_t> v(ids.size());
    for (std::size_t d = 0; d < r; ++d) {
      for (std::size_t k = 0; k < ids.size(); ++k) v[k] = chunks[ids[k]].offsets[d];
      std::sort(v.begin(), v.end());
      distinct[d] = static_cast<std::size_t>(std::unique(v.begin(), v.end()) - v.begin());
    }
  }
  std::vector<std::size_t> dims(r);
  for (std::size_t d = 0; d < r; ++d) dims[d] = d;
  std::stable_sort(dims.begin(), dims.end(),
                   [&](std::size_t a, std::size_t b) { return distinct[a] > distinct[b]; });
  const std::size_t s = dims[0], t = r > 1 ? dims[1] : dims[0];

  std::vector<int64_t> order = ids;
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const int64_t oa = chunks[a].offsets[s], ob = chunks[b].offsets[s];
    return oa != ob ? oa < ob : a < b;
  });
  auto end_on = [&](int64_t c, std::size_t d) { return chunks[c].offsets[d] + chunks[c].sizes[d]; };
  auto overlap = [&](int64_t a, int64_t b) {
    for (std::size_t d = 0; d < r; ++d)
      if (std::max(chunks[a].offsets[d], chunks[b].offsets[d]) >=
          std::min(end_on(a, d), end_on(b, d)))
        return false;
    return true;
  };

  std::set<std::pair<int64_t, int64_t>> open;             // (offset on t, chunk)
  std::multiset<int64_t> open_extents;                    // sizes on t of the open chunks
  std::set<std::pair<int64_t, int64_t>> closing;          // (end on s, chunk)
  std::pair<int64_t, int64_t> best{-1, -1};               // {j, i}
  for (const int64_t c : order) {
    const int64_t x = chunks[c].offsets[s];
    while (!closing.empty() && closing.begin()->first <= x) {
      const int64_t o = closing.begin()->second;
      closing.erase(closing.begin());
      open.erase({chunks[o].offsets[t], o});
      open_extents.erase(open_extents.find(chunks[o].sizes[t]));
    }
    if (!open.empty()) {
      const int64_t lo = chunks[c].offsets[t] - *open_extents.rbegin() + 1;
      const int64_t hi = end_on(c, t);
      for (auto it = open.lower_bound({lo, std::numeric_limits<int64_t>::min()});
           it != open.end() && it->first < hi; ++it) {
        const int64_t o = it->second;
        *budget -= static_cast<int64_t>(r);
        if (*budget < 0) return {kUndecided, kUndecided};
        if (!overlap(c, o)) continue;
        const std::pair<int64_t, int64_t> p{std::min(c, o), std::max(c, o)};
        if (best.second < 0 || p.second < best.second ||
            (p.second == best.second && p.first < best.first))
          best = p;
      }
    }
    open.insert({chunks[c].offsets[t], c});
    open_extents.insert(chunks[c].sizes[t]);
    closing.insert({end_on(c, s), c});
  }
  return best;
}

/// `ids` ordered by their offset on dim a (ties in any order).
std::vector<int64_t> by_offset(const std::vector<Box>& chunks, std::vector<int64_t> ids,
                               std::size_t a) {
  std::sort(ids.begin(), ids.end(), [&](int64_t x, int64_t y) {
    return chunks[x].offsets[a] < chunks[y].offsets[a];
  });
  return ids;
}

/// Whether any two of the non-empty chunks `order` (ordered by offset on dim a) with index
/// < `limit` overlap on dims a and b (all other dims ignored), in O(m log m) for any boxes.
/// Sweep along dim a; the chunks open at the sweep position all cross it, so while none
/// overlap their b-intervals are pairwise disjoint, and a new chunk need only be compared with
/// the open chunk starting last before its end on dim b.
bool any_overlap_on(const std::vector<Box>& chunks, const std::vector<int64_t>& order,
                    std::size_t a, std::size_t b, int64_t limit) {
  std::map<int64_t, int64_t> open;  // offset on dim b -> chunk
  using End = std::pair<int64_t, int64_t>;  // (end on dim a, chunk)
  std::priority_queue<End, std::vector<End>, std::greater<End>> closing;
  for (const int64_t c : order) {
    if (c >= limit) continue;
    const Box& box = chunks[c];
    while (!closing.empty() && closing.top().first <= box.offsets[a]) {
      open.erase(chunks[closing.top().second].offsets[b]);
      closing.pop();
    }
    const int64_t lo = box.offsets[b], hi = box.offsets[b] + box.sizes[b];
    auto it = open.lower_bound(hi);  // first open chunk starting at or after our end
    if (it != open.begin()) {
      const Box& p = chunks[std::prev(it)->second];
      if (p.offsets[b] + p.sizes[b] > lo) return true;
    }
    open.emplace(lo, c);
    closing.push({box.offsets[a] + box.sizes[a], c});
  }
  return false;
}

/// The same on one dim d (`order` by offset on d): each chunk against the furthest end
/// before it.
bool any_overlap_1d(const std::vector<Box>& chunks, const std::vector<int64_t>& order,
                    std::size_t d, int64_t limit) {
  int64_t reach = std::numeric_limits<int64_t>::min();
  for (const int64_t c : order) {
    if (c >= limit) continue;
    if (chunks[c].offsets[d] < reach) return true;
    reach = std::max(reach, chunks[c].offsets[d] + chunks[c].sizes[d]);
  }
  return false;
}

/// The pair first_overlap returns, for rank 2 in O(n log^2 n) for any boxes: overlap in a
/// prefix is monotone, so a binary search finds the smallest i whose prefix [0, i] holds an
/// overlap (any_overlap_on, at most 2 + log2(n) times); then the smallest j < i overlapping it.
std::pair<int64_t, int64_t> first_overlap_2d(const std::vector<Box>& chunks,
                                             const std::vector<int64_t>& ids) {
  const std::vector<int64_t> order = by_offset(chunks, ids, 0);
  auto any = [&](int64_t limit) { return any_overlap_on(chunks, order, 0, 1, limit); };
  const int64_t n = static_cast<int64_t>(chunks.size());
  if (!any(n)) return {-1, -1};
  int64_t lo = 0, hi = n;  // any(hi) true; any(lo) false
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (any(mid)) hi = mid; else lo = mid;
  }
  const int64_t i = hi - 1;
  for (const int64_t j : ids) {
    if (j >= i) break;
    if (intersect(chunks[j], chunks[i]).has_value()) return {j, i};
  }
  return {-1, -1};  // not reached
}

/// The split method. Lowers `*first` to the smallest i such that chunk i of `ids` overlaps an
/// earlier chunk j of `ids` (only chunks with index < *first are looked at: the others cannot
/// lower it). The chunks of `ids` already overlap pairwise on every dim not in dims[0, k), so
/// only those k dims are compared (`dims` is reordered while it runs, then restored). Returns
/// false once `*budget` (coordinate units) runs out.
///
/// Two boxes overlap on dim u iff both hold x = the larger of their offsets on u, so every
/// overlapping pair lies in one of the groups open(x) = {chunks whose u-interval holds x},
/// x a distinct offset on u, and each group is one dim smaller. u is the dim with the fewest
/// (chunk, group) placements, sum_x |open(x)|, counted exactly by binary search before any
/// work and charged (|dims| - 1 units each, plus |dims| per chunk for the choice). With two
/// dims left (one for rank 1), a group's smallest i is found by a binary search over its
/// prefixes with any_overlap_on / any_overlap_1d, O(m log m) each (not charged). Grids,
/// ragged layouts and the inputs that defeat the sweep (thin boxes apart only on a dim with
/// few offsets; many equal boxes) split into few small groups; the budget bounds the rest.
/// Groups of at most `small_group` chunks compare every pair (k units a pair), which also keeps
/// the recursion (at most r - 2 deep) from descending one dim at a time for a few chunks.
bool split_first(const std::vector<Box>& chunks, std::vector<int64_t> ids,
                 std::vector<std::size_t>& dims, std::size_t k, int64_t small_group,
                 int64_t* budget, int64_t* first) {
  ids.erase(std::remove_if(ids.begin(), ids.end(), [&](int64_t c) { return c >= *first; }),
            ids.end());
  const int64_t m = static_cast<int64_t>(ids.size());
  if (m < 2) return true;
  auto end_on = [&](int64_t c, std::size_t d) { return chunks[c].offsets[d] + chunks[c].sizes[d]; };
  if (k <= 2) {
    // A group's work is not charged: O(m log^2 m), and its m placements were.
    const std::vector<int64_t> order = by_offset(chunks, ids, dims[0]);
    auto any = [&](int64_t limit) {
      return k == 1 ? any_overlap_1d(chunks, order, dims[0], limit)
                    : any_overlap_on(chunks, order, dims[0], dims[1], limit);
    };
    std::sort(ids.begin(), ids.end());
    if (!any(ids.back() + 1)) return true;
    int64_t lo = 1, hi = m;  // the first hi of ids overlap, the first lo do not
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (any(ids[static_cast<std::size_t>(mid)])) hi = mid; else lo = mid;
    }
    *first = ids[static_cast<std::size_t>(hi - 1)];
    return true;
  }
  const int64_t kk = static_cast<int64_t>(k);
  if (m <= small_group) {
    // A few chunks: every pair, in the order of the pairwise loop (charged k per pair).
    *budget -= m * (m - 1) / 2 * kk;
    if (*budget < 0) return false;
    std::sort(ids.begin(), ids.end());
    for (std::size_t i = 1; i < ids.size(); ++i)
      for (std::size_t j = 0; j < i; ++j) {
        bool meet = true;
        for (std::size_t q = 0; q < k && meet; ++q)
          meet = std::max(chunks[ids[i]].offsets[dims[q]], chunks[ids[j]].offsets[dims[q]]) <
                 std::min(end_on(ids[i], dims[q]), end_on(ids[j], dims[q]));
        if (meet) {
          *first = ids[i];
          return true;
        }
      }
    return true;
  }
  *budget -= kk * m;  // choosing the dim
  if (*budget < 0) return false;
  std::size_t best = 0;
  int64_t best_cost = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> xs;
  for (std::size_t di = 0; di < k; ++di) {
    const std::size_t u = dims[di];
    xs.clear();
    for (const int64_t c : ids) xs.push_back(chunks[c].offsets[u]);
    std::sort(xs.begin(), xs.end());
    xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
    int64_t placements = 0;
    for (const int64_t c : ids)
      placements += (std::lower_bound(xs.begin(), xs.end(), end_on(c, u)) -
                     std::lower_bound(xs.begin(), xs.end(), chunks[c].offsets[u]));
    const int64_t cost = placements * (kk - 1);
    if (cost < best_cost) best_cost = cost, best = di;
  }
  if (best_cost > *budget) return false;
  *budget -= best_cost;
  const std::size_t u = dims[best];
  std::swap(dims[best], dims[k - 1]);  // the groups look at dims[0, k - 1)
  std::sort(ids.begin(), ids.end(), [&](int64_t a, int64_t b) {
    return chunks[a].offsets[u] < chunks[b].offsets[u];
  });
  std::vector<int64_t> open;
  bool decided = true;
  for (std::size_t q = 0; q < ids.size() && decided;) {
    const int64_t x = chunks[ids[q]].offsets[u];
    open.erase(std::remove_if(open.begin(), open.end(),
                              [&](int64_t c) { return end_on(c, u) <= x || c >= *first; }),
               open.end());
    for (; q < ids.size() && chunks[ids[q]].offsets[u] == x; ++q)
      if (ids[q] < *first) open.push_back(ids[q]);
    decided = split_first(chunks, open, dims, k - 1, small_group, budget, first);
  }
  std::swap(dims[best], dims[k - 1]);
  return decided;
}

/// The pair first_overlap returns (rank 1 and 3+), with the work bounded by two budgets in
/// coordinate units: the sweep runs until `sweep_budget` is spent; if it does not finish,
/// split_first with `split_budget` gives the smallest i and a scan the smallest j < i
/// overlapping it. {kUndecided, kUndecided} when that too runs out.
std::pair<int64_t, int64_t> first_overlap_bounded(const std::vector<Box>& chunks,
                                                  const std::vector<int64_t>& ids, std::size_t r,
                                                  int64_t sweep_budget, int64_t split_budget,
                                                  int64_t small_group) {
  int64_t left = sweep_budget;
  const auto swept = first_overlap(chunks, ids, r, &left);
  if (swept.first != kUndecided) return swept;
  std::vector<std::size_t> dims(r);
  for (std::size_t d = 0; d < r; ++d) dims[d] = d;
  const int64_t n = static_cast<int64_t>(chunks.size());
  int64_t first = n;
  left = split_budget;
  if (!split_first(chunks, ids, dims, r, small_group, &left, &first))
    return {kUndecided, kUndecided};
  if (first == n) return {-1, -1};
  for (const int64_t j : ids) {
    if (j >= first) break;
    if (intersect(chunks[j], chunks[first]).has_value()) return {j, first};
  }
  return {-1, -1};  // not reached
}

}  // namespace

namespace internal {

int64_t tile_check_budget(int64_t boxes, int64_t rank) {
  return 32 * boxes * std::max<int64_t>(rank, 1) + (int64_t{1} << 16);
}

void check_chunks_tile(const Shape& shape, const std::vector<Box>& chunks, int64_t sweep_budget,
                       int64_t split_budget, int64_t small_group) {
  // Same result as checking each chunk i in order (its own checks, then overlap with every
  // j < i), without the quadratic loop: the first invalid chunk bounds the overlap search,
  // and an overlap among the chunks before it is reported first. The only other outcome is
  // the refusal, when neither overlap method decides within its budget.
  const Box whole = Box::full(shape);
  std::size_t first_bad = chunks.size();
  for (std::size_t i = 0; i < chunks.size() && first_bad == chunks.size(); ++i)
    if (!chunk_ok(whole, chunks[i])) first_bad = i;
  std::vector<int64_t> ids;  // the non-empty chunks before the first invalid one
  for (std::size_t i = 0; i < first_bad; ++i)
    if (!chunks[i].empty()) ids.push_back(static_cast<int64_t>(i));
  std::pair<int64_t, int64_t> pair{-1, -1};
  if (whole.rank() == 0) {
    if (ids.size() >= 2) pair = {ids[0], ids[1]};  // scalars: any two overlap
  } else if (ids.size() >= 2 && whole.rank() == 2) {
    pair = first_overlap_2d(chunks, ids);
  } else if (ids.size() >= 2) {
    pair = first_overlap_bounded(chunks, ids, shape.size(), sweep_budget, split_budget,
                                 small_group);
    HYPER_CHECK_VALUE(pair.first != kUndecided, "chunk layout of ", ids.size(),
                      " non-empty boxes in rank ", shape.size(),
                      " too irregular to check within ", sweep_budget,
                      " coordinate comparisons for the sweep and ", split_budget,
                      " for the split method; the tiling of shape ", shape_to_string(shape),
                      " is not checked, so the chunks are refused");
  }
  if (pair.second >= 0) {
    const Box& a = chunks[pair.first];
    const Box& b = chunks[pair.second];
    throw ValueError(str_cat("chunks ", pair.first, " ", a.to_string(), " and ", pair.second, " ",
                             b.to_string(), " overlap"));
  }
  if (first_bad < chunks.size()) check_chunk(whole, shape, first_bad, chunks[first_bad]);
  // The shape's element count first (a ValueError past 2^62): the chunks, valid and disjoint
  // by now, lie inside it, so their counts and their sum cannot overflow.
  const int64_t total = numel(shape);
  int64_t covered = 0;
  for (const auto& c : chunks) covered += c.numel();
  HYPER_CHECK_VALUE(covered == total, "chunks cover ", covered, " of the ", total,
                    " elements of shape ", shape_to_string(shape), " (", total - covered,
                    " missing)");
}

}  // namespace internal

void check_chunks_tile(const Shape& shape, const std::vector<Box>& chunks) {
  int64_t non_empty = 0;
  for (const auto& c : chunks) non_empty += !c.empty();
  const int64_t budget = internal::tile_check_budget(non_empty, static_cast<int64_t>(shape.size()));
  internal::check_chunks_tile(shape, chunks, 8 * budget, budget);
}

std::vector<ReadItem> plan_read(const std::vector<Box>& chunks,
                                const std::vector<FlatBox>& target_region) {
  std::vector<ReadItem> out;
  for (std::size_t t = 0; t < target_region.size(); ++t) {
    const Box& tb = target_region[t].box;
    int64_t found = 0;
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      HYPER_CHECK_VALUE(chunks[c].rank() == tb.rank(), "chunk ", c, " ", chunks[c].to_string(),
                        " and target box ", tb.to_string(), " differ in rank");
      auto inter = intersect(chunks[c], tb);
      if (!inter) continue;
      found += inter->numel();
      ReadItem item;
      item.chunk = static_cast<int64_t>(c);
      item.src = relative_to(*inter, chunks[c]);
      item.dst_region = static_cast<int64_t>(t);
      item.dst = relative_to(*inter, tb);
      item.box = std::move(*inter);
      out.push_back(std::move(item));
    }
    HYPER_CHECK_VALUE(found >= tb.numel(), "target box ", tb.to_string(), " is not covered by the "
                      "saved chunks: ", tb.numel() - found, " of ", tb.numel(),
                      " elements are missing");
  }
  return out;
}

std::vector<ReadRun> read_runs(const std::vector<Box>& chunks,
                               const std::vector<FlatBox>& target_region) {
  std::vector<ReadRun> runs;
  for (const auto& item : plan_read(chunks, target_region)) {
    const auto& chunk = chunks[item.chunk];
    const auto& tgt = target_region[item.dst_region];
    // Walk both sides in the same row-major order of the item's box.
    std::vector<std::pair<int64_t, int64_t>> src_runs, dst_runs;
    for_each_run(chunk.sizes, item.src, [&](int64_t o, int64_t l) { src_runs.push_back({o, l}); });
    for_each_run(tgt.box.sizes, item.dst,
                 [&](int64_t o, int64_t l) { dst_runs.push_back({o + tgt.local_start, l}); });
    std::size_t i = 0, j = 0;
    int64_t si = 0, sj = 0;  // consumed inside the current runs
    while (i < src_runs.size() && j < dst_runs.size()) {
      const int64_t len = std::min(src_runs[i].second - si, dst_runs[j].second - sj);
      ReadRun r{item.chunk, src_runs[i].first + si, dst_runs[j].first + sj, len};
      if (!runs.empty() && runs.back().chunk == r.chunk &&
          runs.back().src_offset + runs.back().length == r.src_offset &&
          runs.back().dst_offset + runs.back().length == r.dst_offset) {
        runs.back().length += len;
      } else {
        runs.push_back(r);
      }
      si += len;
      sj += len;
      if (si == src_runs[i].second) ++i, si = 0;
      if (sj == dst_runs[j].second) ++j, sj = 0;
    }
  }
  return runs;
}

}  // namespace hyper
