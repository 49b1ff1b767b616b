// libFuzzer target for the text forms hyper-plan (tools/hyper_plan.cc) and the tests parse:
// Placement (`S(0)`, `R`, `P(sum)`, `RS((0,1),(1,2))`), a placement list (`[S(0),R]`), a mesh
// (`[dp=2,tp=2]@[4,5,6,7]`) and a layout (`mesh=[4] placements=[S(0)] shape=[16,64]`).
// The first input byte picks the parser; the rest is the text. The last mode is hyper-plan
// itself: two layouts separated by a newline, planned (plan_redistribute, plan_steps of every
// rank) and, when small and without Partial, executed on arange(numel) by the reference executor.
//
// Invariants: only hyper::ValueError / hyper::NotImplementedError is thrown; whatever parses
// round-trips (parse(to_string(x)) == x, with the same text and hash); a layout's local regions
// lie inside the shape with contiguous local ranges [0, local_numel); an executed plan gives
// every destination rank exactly its slice of the global tensor.
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "hyper/core.h"

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

template <class T, class Parse>
void round_trip(const std::string& text, Parse parse) {
  const T x = parse(text);
  const std::string s = x.to_string();
  try {
    const T y = parse(s);
    check(y == x && y.to_string() == s && std::hash<T>{}(y) == std::hash<T>{}(x));
  } catch (const hyper::ValueError&) {
    __builtin_trap();  // our own text form rejected
  }
}

void check_layout(const hyper::Layout& l) {
  if (l.mesh().size() > 64) return;
  const hyper::Box whole = hyper::Box::full(l.shape());
  for (int64_t i = 0; i < l.mesh().size(); ++i) {
    int64_t at = 0;
    for (const hyper::FlatBox& fb : l.local_region(i)) {
      check(whole.contains(fb.box) && fb.local_start == at);
      at = fb.local_end();
    }
    check(at == l.local_numel(i));
  }
}

void plan(const std::string& text) {
  const auto nl = text.find('\n');
  if (nl == std::string::npos) return;
  const hyper::Layout src = hyper::Layout::from_string(text.substr(0, nl));
  const hyper::Layout dst = hyper::Layout::from_string(text.substr(nl + 1));
  if (src.mesh().size() > 16 || dst.mesh().size() > 16) return;
  const hyper::RedistributePlan p = hyper::plan_redistribute(src, dst);
  for (int64_t r = 0; r < src.mesh().size(); ++r)
    for (const bool floating : {true, false}) hyper::plan_steps(p, r, {4, floating});
  if (src.has_partial() || dst.has_partial() || src.numel() > 4096) return;
  std::vector<double> global(static_cast<size_t>(src.numel()));
  std::iota(global.begin(), global.end(), 0.0);
  std::vector<std::vector<double>> locals;
  for (int64_t r = 0; r < src.mesh().size(); ++r)
    locals.push_back(hyper::slice_local(src, r, global));
  const auto out = hyper::execute_plan(p, locals);
  for (int64_t r = 0; r < dst.mesh().size(); ++r)
    check(out[static_cast<size_t>(r)] == hyper::slice_local(dst, r, global));
}

}  // namespace

namespace std {
template <>
struct hash<hyper::Placements> {
  size_t operator()(const hyper::Placements& ps) const {
    size_t h = 0;
    for (const auto& p : ps) h = h * 31 + p.hash();
    return h;
  }
};
}  // namespace std

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    switch (data[0] % 5) {
      case 0:
        round_trip<hyper::Placement>(text, hyper::Placement::from_string);
        break;
      case 1: {
        const hyper::Placements ps = hyper::placements_from_string(text);
        const std::string s = hyper::to_string(ps);
        try {
          check(hyper::placements_from_string(s) == ps && hyper::to_string(ps) == s);
        } catch (const hyper::ValueError&) {
          __builtin_trap();
        }
        break;
      }
      case 2:
        round_trip<hyper::MeshTopology>(text, hyper::MeshTopology::from_string);
        break;
      case 3: {
        round_trip<hyper::Layout>(text, hyper::Layout::from_string);
        check_layout(hyper::Layout::from_string(text));
        break;
      }
      case 4:
        plan(text);
        break;
    }
  } catch (const hyper::ValueError&) {
  } catch (const hyper::NotImplementedError&) {
  }
  return 0;
}
