#include "hyper/core/read_plan.h"

#include <algorithm>

#include "hyper/core/errors.h"
#include "hyper/core/internal/text.h"

namespace hyper {

using internal::ints_to_string;
using internal::str_cat;

std::string ReadItem::to_string() const {
  return str_cat("chunk ", chunk, " ", box.to_string(), " (in chunk ", src.to_string(),
                 ") -> region ", dst_region, " ", dst.to_string());
}

void check_chunks_tile(const Shape& shape, const std::vector<Box>& chunks) {
  const Box whole = Box::full(shape);
  int64_t covered = 0;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    const Box& c = chunks[i];
    HYPER_CHECK_VALUE(c.rank() == whole.rank() && c.offsets.size() == c.sizes.size(), "chunk ", i,
                      " ", c.to_string(), " does not have the rank of shape ",
                      ints_to_string(shape));
    for (std::size_t d = 0; d < c.sizes.size(); ++d)
      HYPER_CHECK_VALUE(c.sizes[d] >= 0 && c.offsets[d] >= 0, "chunk ", i, " ", c.to_string(),
                        " has a negative offset or size");
    HYPER_CHECK_VALUE(whole.contains(c), "chunk ", i, " ", c.to_string(),
                      " lies outside shape ", ints_to_string(shape));
    for (std::size_t j = 0; j < i; ++j)
      HYPER_CHECK_VALUE(!intersect(c, chunks[j]).has_value(), "chunks ", j, " ",
                        chunks[j].to_string(), " and ", i, " ", c.to_string(), " overlap");
    covered += c.numel();
  }
  const int64_t total = numel(shape);
  HYPER_CHECK_VALUE(covered == total, "chunks cover ", covered, " of the ", total,
                    " elements of shape ", ints_to_string(shape), " (", total - covered,
                    " missing)");
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
