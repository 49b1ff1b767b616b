// Convolution, pooling, upsampling, padding, batch / group / instance norm of DTensor tensors
// (dispatch/spatial_kernels.h, dispatch/spatial_rules.h): values and every operand's
// gradient against the same op on the full tensors on one device, on 2 and 4 ranks (uneven,
// an empty shard) and a 2x2 mesh, for R, S(batch), S(channel), S(spatial), P(sum), P(max) and
// plain operands; the layouts the rules promise (no bytes where a strategy fits), the
// running statistics, the inference path and the errors.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/functional/batchnorm.h>
#include <torch/nn/functional/instancenorm.h>
#include <torch/nn/functional/upsampling.h>

#include <functional>
#include <string>
#include <vector>

#include "hyper/comm/testing/harness.h"
#include "hyper/core/errors.h"
#include "hyper/tensor/dispatch/linear_kernels.h"
#include "hyper/tensor/dispatch/testing_case.h"
#include "hyper/tensor/dispatch/testing_dispatch.h"
#include "hyper/tensor/dtensor.h"
#include "hyper/tensor/dtensor_tensor.h"

namespace hyper {
namespace {

using comm::testing::run_on_mesh;
using dispatch_testing::bytes_of;
using dispatch_testing::Case;
using dispatch_testing::check;
using dispatch_testing::error_of;
using dispatch_testing::expect_close;
using dispatch_testing::full;
using dispatch_testing::global_b;
using dispatch_testing::make;
using dispatch_testing::name_of;
using V = std::vector<at::Tensor>;

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

/// Distinct values (no ties for the max pools), of `shape`.
at::Tensor distinct(const std::vector<int64_t>& shape, int k = 0) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return (at::sin(at::arange(n, at::kDouble) * (0.37 + 0.11 * k) + k) * 2 +
          at::arange(n, at::kDouble) * 1e-3)
      .reshape(shape);
}

Placements pl(std::initializer_list<Placement> p) { return Placements(p); }

// ---- convolution ---------------------------------------------------------------------------------

struct Conv {
  std::string name;
  std::vector<int64_t> x, w, b;
  std::function<at::Tensor(const V&)> op;  // (x, w, b)
};

std::vector<Conv> convs(int64_t n) {
  return {
      {"conv2d pad 1", {n, 4, 6, 5}, {6, 4, 3, 3}, {6},
       [](const V& a) { return at::conv2d(a[0], a[1], a[2], {1, 1}, {1, 1}); }},
      {"conv1d stride 2 dilation 2", {n, 4, 11}, {6, 4, 3}, {6},
       [](const V& a) { return at::conv1d(a[0], a[1], a[2], at::IntArrayRef{2}, at::IntArrayRef{0}, at::IntArrayRef{2}); }},
      {"conv_transpose2d stride 2", {n, 4, 4, 5}, {4, 3, 3, 3}, {3},
       [](const V& a) { return at::conv_transpose2d(a[0], a[1], a[2], {2, 2}, {1, 1}, {1, 1}); }},
      {"conv2d groups 2 no bias", {n, 4, 6, 6}, {6, 2, 3, 3}, {},
       [](const V& a) {
         return at::conv2d(a[0], a[1], {}, at::IntArrayRef{1, 1}, at::IntArrayRef{0, 0}, at::IntArrayRef{1, 1}, 2); }},
      {"depthwise conv2d", {n, 4, 5, 6}, {8, 1, 3, 3}, {8},
       [](const V& a) {
         return at::conv2d(a[0], a[1], a[2], at::IntArrayRef{1, 1}, at::IntArrayRef{1, 1}, at::IntArrayRef{1, 1}, 4); }},
      {"conv_transpose1d groups 2", {n, 4, 5}, {4, 3, 3}, {6},
       [](const V& a) {
         return at::conv_transpose1d(a[0], a[1], a[2], at::IntArrayRef{2}, at::IntArrayRef{0},
                                     at::IntArrayRef{1}, 2); }},
      {"conv3d", {n, 4, 4, 4, 3}, {6, 4, 2, 2, 2}, {6},
       [](const V& a) { return at::conv3d(a[0], a[1], a[2]); }},
  };
}

void conv_cases(const DeviceMesh& mesh, int64_t n, const std::vector<Placements>& xs,
                const std::vector<Placements>& ws, const std::vector<Placements>& bs) {
  for (const Conv& c : convs(n))
    for (const Placements& px : xs)
      for (const Placements& pw : ws)
        for (const Placements& pb : bs) {
          const std::string what = c.name + " x " + name_of(px) + " w " + name_of(pw) + " b " +
                                   name_of(pb) + " on " + mesh.to_string();
          V g = {distinct(c.x, 0), distinct(c.w, 1)};
          std::vector<Placements> ps = {px, pw};
          if (!c.b.empty()) {
            g.push_back(distinct(c.b, 2));
            ps.push_back(pb);
          }
          check(mesh, {what, g, ps, [&c](const V& a) {
                         return V{c.op({a[0], a[1], a.size() > 2 ? a[2] : at::Tensor()})};
                       }});
        }
}

TEST(Spatial, ConvolutionOn2And4RanksAnd2x2) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    conv_cases(mesh, 4,
               {{Replicate()}, {Shard(0)}, {Shard(1)}, {Shard(2)}, {Partial()}, {}},
               {{Replicate()}, {Shard(0)}, {Shard(1)}, {}}, {{Replicate()}});
    conv_cases(mesh, 3, {{Shard(0)}, {Shard(1)}}, {{Shard(0)}}, {{Shard(0)}, {}, {Partial()}});
  });
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    // Batch 3 on 4 ranks: an empty shard; 6 output channels on 4 ranks: 2, 2, 2, 0 (the
    // output-channel strategy is not a candidate).
    conv_cases(mesh, 3, {{Shard(0)}, {Shard(1)}, {Shard(2)}, {Partial()}},
               {{Replicate()}, {Shard(0)}, {Shard(1)}}, {{Replicate()}});
  });
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    conv_cases(mesh, 4,
               {pl({Shard(0), Shard(1)}), pl({Shard(1), Shard(0)}), pl({Shard(2), Replicate()}),
                pl({Partial(), Shard(0)})},
               {pl({Replicate(), Shard(0)}), pl({Shard(1), Replicate()})},
               {pl({Replicate(), Replicate()})});
  });
}

TEST(Spatial, ConvolutionLayoutsAndBytes) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor x = distinct({4, 4, 6, 5}), w = distinct({6, 4, 3, 3}, 1), b = distinct({6}, 2);
    auto conv = [&](const Placements& px, const Placements& pw, const Placements& pb) {
      const at::Tensor xd = make(x, mesh, px).as_tensor(), wd = make(w, mesh, pw).as_tensor(),
                       bd = make(b, mesh, pb).as_tensor();
      at::Tensor y;
      const int64_t sent = bytes_of(mesh, [&] { y = at::conv2d(xd, wd, bd, {1, 1}, {1, 1}); });
      expect_close(full(y), at::conv2d(x, w, b, {1, 1}, {1, 1}), "conv2d");
      return std::make_pair(as_dtensor(y).placements(), sent);
    };
    // Data parallel: the batch stays sharded, the weight replicated: no bytes.
    EXPECT_EQ(conv({Shard(0)}, {Replicate()}, {Replicate()}), std::make_pair(pl({Shard(0)}), int64_t{0}));
    // Output channels: weight and bias sharded by output channel.
    EXPECT_EQ(conv({Replicate()}, {Shard(0)}, {Shard(0)}), std::make_pair(pl({Shard(1)}), int64_t{0}));
    // Input channels: a Partial(sum) output, the bias on coordinate 0.
    EXPECT_EQ(conv({Shard(1)}, {Shard(1)}, {Replicate()}), std::make_pair(pl({Partial()}), int64_t{0}));
    // A Partial input passes (linear in the input).
    EXPECT_EQ(conv({Partial()}, {Replicate()}, {Replicate()}), std::make_pair(pl({Partial()}), int64_t{0}));
    // Depthwise (groups = channels): whole groups per rank, channels stay sharded.
    const at::Tensor wd = distinct({8, 1, 3, 3}, 1), bd = distinct({8}, 2);
    const at::Tensor xs = make(x, mesh, {Shard(1)}).as_tensor();
    at::Tensor yd;
    EXPECT_EQ(bytes_of(mesh, [&] {
                yd = at::conv2d(xs, make(wd, mesh, {Shard(0)}).as_tensor(),
                                make(bd, mesh, {Shard(0)}).as_tensor(), at::IntArrayRef{1, 1},
                                at::IntArrayRef{1, 1}, at::IntArrayRef{1, 1}, 4);
              }),
              0);
    EXPECT_EQ(as_dtensor(yd).placements(), pl({Shard(1)}));
    expect_close(full(yd), at::conv2d(x, wd, bd, at::IntArrayRef{1, 1}, at::IntArrayRef{1, 1},
                                      at::IntArrayRef{1, 1}, 4), "depthwise");
    // Groups that the channel chunks split (3 groups: input channels 2 + 1 on 2 ranks, 12
    // or 6 output channels 6 + 6 or 3 + 3): not kept sharded, the values exact.
    for (int64_t cout : {12, 6}) {
      const at::Tensor xg = distinct({2, 3, 5, 5}), wg = distinct({cout, 1, 3, 3}, 1);
      const at::Tensor yg = at::conv2d(make(xg, mesh, {Shard(1)}).as_tensor(), make(wg, mesh, {Replicate()}).as_tensor(),
                                       {}, at::IntArrayRef{1, 1}, at::IntArrayRef{0, 0}, at::IntArrayRef{1, 1}, 3);
      expect_close(full(yg), at::conv2d(xg, wg, {}, at::IntArrayRef{1, 1}, at::IntArrayRef{0, 0},
                                        at::IntArrayRef{1, 1}, 3), "groups 3, Cout " + std::to_string(cout));
    }
    // A spatial Shard moves (here the input to the batch Shard, an all-to-all).
    const auto [ps, sent] = conv({Shard(2)}, {Replicate()}, {Replicate()});
    EXPECT_EQ(ps, pl({Shard(0)}));
    EXPECT_GT(sent, 0);
    EXPECT_LT(sent, x.numel() * 8);  // less than the whole input per rank
  });
}

TEST(Spatial, ConvolutionErrorsNameTheValues) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor x = make(distinct({4, 4, 6, 5}), mesh, {Shard(0)}).as_tensor();
    const at::Tensor w = make(distinct({6, 3, 3, 3}), mesh, {Replicate()}).as_tensor();
    std::string e = error_of<ValueError>([&] { at::conv2d(x, w); });
    EXPECT_HAS(e, "aten::convolution(");
    EXPECT_HAS(e, "the input has 4 channels, the weight [6,3,3,3] with groups=1 expects 3");
    const at::Tensor w7 = make(distinct({6, 4, 7, 3}), mesh, {Replicate()}).as_tensor();
    e = error_of<ValueError>([&] { at::conv2d(x, w7); });
    EXPECT_HAS(e, "the kernel spans 7 elements of spatial dim 0, more than the padded input's 6");
    const at::Tensor w3 = make(distinct({6, 4, 3, 3}), mesh, {Replicate()}).as_tensor();
    e = error_of<ValueError>([&] {
      at::conv2d(x, w3, {}, at::IntArrayRef{1, 1}, at::IntArrayRef{0, 0}, at::IntArrayRef{1, 1}, 4);
    });
    EXPECT_HAS(e, "groups=4");
    // A bias that is not [Cout]: refused on every rank before anything moves (ATen's own
    // check would run in each rank's local convolution, on some ranks only).
    const at::Tensor w6 = make(distinct({6, 4, 3, 3}), mesh, {Shard(0)}).as_tensor();
    e = error_of<ValueError>([&] { at::conv2d(x, w6, make(distinct({4}), mesh, {Shard(0)}).as_tensor()); });
    EXPECT_HAS(e, "expected bias to be 1-dimensional with 6 elements, but got bias of size [4]");
    const at::Tensor r = make(distinct({6, 4, 6, 5}), mesh, {RaggedShard({0}, {1, 2})}).as_tensor();
    e = error_of<NotImplementedError>([&] { at::conv2d(r, w3); });
    EXPECT_HAS(e, "RaggedShard operands of a convolution are not implemented");
  });
}

// ---- ops along the spatial dims --------------------------------------------------------------------

struct Along {
  std::string name;
  std::vector<int64_t> x;
  std::function<V(const at::Tensor&)> op;
};

std::vector<Along> along_ops(int64_t n) {
  namespace F = torch::nn::functional;
  return {
      {"max_pool2d", {n, 4, 6, 6}, [](const at::Tensor& x) { return V{at::max_pool2d(x, {2, 2})}; }},
      {"max_pool2d_with_indices ceil", {n, 4, 7, 6}, [](const at::Tensor& x) {
         auto [o, i] = at::max_pool2d_with_indices(x, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true);
         return V{o, i}; }},
      {"avg_pool2d", {n, 4, 7, 6}, [](const at::Tensor& x) {
         return V{at::avg_pool2d(x, {3, 3}, {2, 2}, {1, 1}, false, false)}; }},
      {"adaptive_avg_pool2d 4x3", {n, 4, 7, 6}, [](const at::Tensor& x) {
         return V{at::adaptive_avg_pool2d(x, {4, 3})}; }},
      {"adaptive_avg_pool2d 1x1", {n, 4, 5, 6}, [](const at::Tensor& x) {
         return V{at::adaptive_avg_pool2d(x, {1, 1})}; }},
      {"adaptive_max_pool2d", {n, 4, 7, 6}, [](const at::Tensor& x) {
         auto [o, i] = at::adaptive_max_pool2d(x, {3, 2});
         return V{o, i}; }},
      {"max_pool1d", {n, 4, 9}, [](const at::Tensor& x) { return V{at::max_pool1d(x, {3}, {2})}; }},
      {"avg_pool1d", {n, 4, 9}, [](const at::Tensor& x) { return V{at::avg_pool1d(x, {3}, {2})}; }},
      {"adaptive_max_pool1d", {n, 4, 9}, [](const at::Tensor& x) {
         auto [o, i] = at::adaptive_max_pool1d(x, {4});
         return V{o, i}; }},
      {"max_pool3d", {n, 4, 4, 4, 5}, [](const at::Tensor& x) { return V{at::max_pool3d(x, {2, 2, 2})}; }},
      {"avg_pool3d", {n, 4, 4, 4, 5}, [](const at::Tensor& x) { return V{at::avg_pool3d(x, {2, 2, 2})}; }},
      {"interpolate nearest", {n, 4, 3, 4}, [](const at::Tensor& x) {
         return V{F::interpolate(x, F::InterpolateFuncOptions().size(std::vector<int64_t>{7, 9}))}; }},
      {"interpolate bilinear align_corners", {n, 4, 3, 4}, [](const at::Tensor& x) {
         return V{F::interpolate(x, F::InterpolateFuncOptions().size(std::vector<int64_t>{5, 7})
                                        .mode(torch::kBilinear).align_corners(true))}; }},
      {"interpolate bicubic scale 1.5", {n, 4, 4, 4}, [](const at::Tensor& x) {
         return V{F::interpolate(x, F::InterpolateFuncOptions().scale_factor(std::vector<double>{1.5, 1.5})
                                        .mode(torch::kBicubic).align_corners(false))}; }},
      {"upsample_linear1d", {n, 4, 5}, [](const at::Tensor& x) {
         return V{at::upsample_linear1d(x, at::IntArrayRef{9}, false, std::optional<double>())}; }},
      {"reflection_pad2d", {n, 4, 4, 5}, [](const at::Tensor& x) {
         return V{at::reflection_pad2d(x, {1, 2, 2, 1})}; }},
      {"replication_pad1d", {n, 4, 5}, [](const at::Tensor& x) {
         return V{at::replication_pad1d(x, {2, 1})}; }},
      {"max_pool2d unbatched", {4, 6, 6}, [](const at::Tensor& x) { return V{at::max_pool2d(x, {2, 2})}; }},
      {"pixel_shuffle", {n, 8, 3, 2}, [](const at::Tensor& x) { return V{at::pixel_shuffle(x, 2)}; }},
      {"pixel_unshuffle", {n, 2, 4, 6}, [](const at::Tensor& x) { return V{at::pixel_unshuffle(x, 2)}; }},
  };
}

void along_cases(const DeviceMesh& mesh, int64_t n, const std::vector<Placements>& xs) {
  for (const Along& a : along_ops(n))
    for (const Placements& px : xs) {
      if (px.size() == 1 && px[0].is_shard() && px[0].dim() >= static_cast<int64_t>(a.x.size()))
        continue;
      check(mesh, {a.name + " x " + name_of(px) + " on " + mesh.to_string(), {distinct(a.x)}, {px},
                   [&a](const V& v) { return a.op(v[0]); }});
    }
}

TEST(Spatial, PoolingUpsamplingPaddingOn2And4RanksAnd2x2) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    along_cases(mesh, 4, {{Replicate()}, {Shard(0)}, {Shard(1)}, {Shard(2)}, {Shard(3)},
                          {Partial()}, {Partial("max")}});
  });
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    along_cases(mesh, 3, {{Shard(0)}, {Shard(1)}, {Shard(2)}, {Partial()}});  // an empty shard
  });
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    along_cases(mesh, 4, {pl({Shard(0), Shard(1)}), pl({Shard(1), Shard(2)}), pl({Partial(), Shard(0)})});
  });
}

TEST(Spatial, PoolingKeepsBatchAndChannelShardsWithoutBytes) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor x = distinct({4, 4, 6, 6});
    for (const Placements& ps : {pl({Shard(0)}), pl({Shard(1)})}) {
      const at::Tensor xd = make(x, mesh, ps).as_tensor();
      at::Tensor y, u;
      EXPECT_EQ(bytes_of(mesh, [&] {
                  y = at::max_pool2d(xd, {2, 2});
                  u = at::upsample_bilinear2d(xd, {8, 9}, false);
                }),
                0);
      EXPECT_EQ(as_dtensor(y).placements(), ps);
      EXPECT_EQ(as_dtensor(u).placements(), ps);
    }
    // Linear ops keep a Partial; a max pool reduces it first.
    const at::Tensor p = make(x, mesh, {Partial()}).as_tensor();
    EXPECT_EQ(as_dtensor(at::avg_pool2d(p, {2, 2})).placements(), pl({Partial()}));
    EXPECT_EQ(as_dtensor(at::max_pool2d(p, {2, 2})).placements(), pl({Replicate()}));
    // A spatial Shard is gathered.
    EXPECT_EQ(as_dtensor(at::max_pool2d(make(x, mesh, {Shard(2)}).as_tensor(), {2, 2})).placements(),
              pl({Replicate()}));
  });
}

TEST(Spatial, InferenceAndEmptyShards) {
  // Without autograd: the kernels below it (max_pool1d's ATen composite would read the
  // DTensor's storage); 4 ranks holding 3 rows and 2 channels: empty shards.
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    at::NoGradGuard no_grad;
    const at::Tensor x = distinct({3, 2, 9});
    for (const Placements& ps : {pl({Shard(0)}), pl({Shard(1)}), pl({Replicate()})}) {
      const at::Tensor xd = make(x, mesh, ps).as_tensor();
      expect_close(full(at::max_pool1d(xd, {3}, {2})), at::max_pool1d(x, {3}, {2}), "max_pool1d " + to_string(ps));
      expect_close(full(at::avg_pool1d(xd, {2})), at::avg_pool1d(x, {2}), "avg_pool1d " + to_string(ps));
      const at::Tensor w = distinct({5, 2, 3}, 1);
      expect_close(full(at::conv1d(xd, make(w, mesh, {Replicate()}).as_tensor())), at::conv1d(x, w),
                   "conv1d " + to_string(ps));
    }
  });
}

TEST(Spatial, PoolingErrorsNameTheValues) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor x = make(distinct({4, 4, 3, 3}), mesh, {Shard(0)}).as_tensor();
    std::string e = error_of<ValueError>([&] { at::max_pool2d(x, {5, 5}); });
    EXPECT_HAS(e, "aten::max_pool2d");
    EXPECT_HAS(e, "placements=[S(0)]");
    const at::Tensor v = make(distinct({4, 6}), mesh, {Shard(0)}).as_tensor();
    e = error_of<ValueError>([&] { at::max_pool2d_with_indices(v, {2, 2}); });
    EXPECT_HAS(e, "expected an input of at least 3 dims (channels, then the spatial dims), got 2");
    const at::Tensor p = make(distinct({8, 2}), mesh, {Shard(0)}).as_tensor();
    e = error_of<ValueError>([&] { at::pixel_shuffle(p, 2); });
    EXPECT_HAS(e, "aten::pixel_shuffle");
    EXPECT_HAS(e, "expected an input of at least 3 dims, got 2");
  });
}

// ---- batch / group / instance norm ------------------------------------------------------------------

/// batch_norm in training with running statistics (plain buffers) on one device and on the
/// DTensor of x in `px`: output, gradients of x, weight and bias, the running statistics.
void batch_norm_case(const DeviceMesh& mesh, const std::vector<int64_t>& shape, const Placements& px,
                     const Placements& pwb) {
  const std::string what = "batch_norm " + to_string(px) + " on " + mesh.to_string();
  const int64_t c = shape[1];
  const at::Tensor x = distinct(shape), w = distinct({c}, 1) + 2, b = distinct({c}, 2);
  at::Tensor rm_want = distinct({c}, 3), rv_want = distinct({c}, 4).abs() + 0.5;
  at::Tensor rm = rm_want.clone(), rv = rv_want.clone();
  const at::Tensor xw = x.clone().requires_grad_(), ww = w.clone().requires_grad_(),
                   bw = b.clone().requires_grad_();
  const at::Tensor want = at::batch_norm(xw, ww, bw, rm_want, rv_want, true, 0.3, 1e-5, false);
  const at::Tensor W = global_b(want.sizes().vec());
  (want * W).sum().backward();
  const at::Tensor xd = make(x, mesh, px).as_tensor().requires_grad_();
  const at::Tensor wd = make(w, mesh, pwb).as_tensor().requires_grad_();
  const at::Tensor bd = make(b, mesh, pwb).as_tensor().requires_grad_();
  const at::Tensor got = at::batch_norm(xd, wd, bd, rm, rv, true, 0.3, 1e-5, false);
  expect_close(full(got), want, what);
  expect_close(rm, rm_want, what + " running_mean");
  expect_close(rv, rv_want, what + " running_var");
  (got * W).sum().backward();
  expect_close(full(xd.grad()), xw.grad(), what + " grad x");
  expect_close(full(wd.grad()), ww.grad(), what + " grad weight");
  expect_close(full(bd.grad()), bw.grad(), what + " grad bias");
}

TEST(Spatial, BatchNormTrainingSynchronisesTheStatistics) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    for (const Placements& px : {pl({Shard(0)}), pl({Shard(1)}), pl({Shard(2)}), pl({Replicate()}),
                                 pl({Partial()})})
      batch_norm_case(mesh, {5, 3, 4, 3}, px, {Replicate()});
    batch_norm_case(mesh, {6, 3, 5}, {Shard(0)}, {Shard(0)});  // BatchNorm1d, sharded affine
    batch_norm_case(mesh, {6, 3}, {Shard(0)}, {Replicate()});  // [N, C]
  });
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    batch_norm_case(mesh, {3, 2, 4, 3}, {Shard(0)}, {Replicate()});  // an empty shard
    batch_norm_case(mesh, {3, 2, 4, 3}, {Shard(1)}, {Replicate()});
  });
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    batch_norm_case(mesh, {5, 3, 4, 3}, pl({Shard(0), Shard(2)}), pl({Replicate(), Replicate()}));
  });
}

// The batch statistics are reduced once: the forward of batch_norm in training (running
// statistics updated) moves the bytes of its mean and var made Replicate, nothing more (the
// running statistics' update and the normalisation share that reduction).
TEST(Spatial, BatchNormReducesTheStatisticsOnce) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    for (const Placements& px : {pl({Shard(0)}), pl({Shard(2)}), pl({Partial()})}) {
      // Two DTensors of one value: a relayout is remembered on the tensor it reads.
      const at::Tensor x = make(distinct({6, 4, 4, 3}), mesh, px).as_tensor(),
                       y = make(distinct({6, 4, 4, 3}), mesh, px).as_tensor();
      const std::vector<int64_t> dims = {0, 2, 3};
      const Layout r(mesh.topology(), {Replicate()}, {4});
      const int64_t stats = bytes_of(mesh, [&] {
        (void)dispatch::relayout(x.mean(dims), r);
        (void)dispatch::relayout(x.var(dims, /*unbiased=*/false, /*keepdim=*/false), r);
      });
      EXPECT_GT(stats, 0) << to_string(px);
      at::Tensor rm = at::zeros({4}), rv = at::ones({4});
      const int64_t sent = bytes_of(mesh, [&] {
        (void)at::batch_norm(y, {}, {}, rm, rv, true, 0.1, 1e-5, false);
      });
      EXPECT_EQ(sent, stats) << to_string(px);
    }
  });
}

TEST(Spatial, BatchNormEvalGroupNormInstanceNorm) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor rm = distinct({4}, 3), rv = distinct({4}, 4).abs() + 0.5;
    for (const Placements& px : {pl({Shard(0)}), pl({Shard(1)}), pl({Shard(3)}), pl({Partial()})}) {
      // Evaluation: the running statistics, plain or DTensor, elementwise: every layout kept.
      for (bool dt_stats : {false, true}) {
        const Placements stats = dt_stats ? pl({Replicate()}) : Placements{};
        const Placements affine = px[0] == Placement(Shard(1)) ? pl({Shard(0)}) : pl({Replicate()});
        const auto got = check(mesh, {"batch_norm eval x " + to_string(px) + " stats " + name_of(stats),
                                      {distinct({5, 4, 3, 4}), distinct({4}, 1), distinct({4}, 2), rm, rv},
                                      {px, affine, affine, stats, stats}, [](const V& a) {
                                        return V{at::batch_norm(a[0], a[1], a[2], a[3].detach(), a[4].detach(),
                                                                false, 0.1, 1e-5, false)};
                                      }});
        if (!got.empty() && !px[0].is_partial()) {
          EXPECT_EQ(as_dtensor(got[0]).placements(), px);
        }
      }
      check(mesh, {"group_norm 2 groups x " + to_string(px), {distinct({5, 4, 3, 4}), distinct({4}, 1), distinct({4}, 2)},
                   {px, {Replicate()}, {Replicate()}}, [](const V& a) {
                     return V{at::group_norm(a[0], 2, a[1], a[2], 1e-5)};
                   }});
      check(mesh, {"instance_norm x " + to_string(px), {distinct({4, 4, 3, 4}), distinct({4}, 1), distinct({4}, 2)},
                   {px, {Replicate()}, {Replicate()}}, [](const V& a) {
                     return V{at::instance_norm(a[0], a[1], a[2], {}, {}, true, 0.1, 1e-5, false)};
                   }});
    }
  });
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    check(mesh, {"group_norm on 4 ranks", {distinct({3, 6, 5}), distinct({6}, 1), distinct({6}, 2)},
                 {{Shard(0)}, {Replicate()}, {Replicate()}}, [](const V& a) {
                   return V{at::group_norm(a[0], 3, a[1], a[2], 1e-5)};
                 }});
  });
}

TEST(Spatial, NormKeepsTheInputDtype) {
  // bf16 activations beside fp32 affine and running statistics (mixed precision): ATen
  // returns bf16, so does the decomposition.
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor x = distinct({4, 3, 2, 2}).to(at::kBFloat16);
    const at::Tensor w = (distinct({3}, 1) + 2).to(at::kFloat), b = distinct({3}, 2).to(at::kFloat);
    at::Tensor rm = at::zeros({3}), rv = at::ones({3}), rm_want = rm.clone(), rv_want = rv.clone();
    const at::Tensor want = at::batch_norm(x, w, b, rm_want, rv_want, true, 0.1, 1e-5, false);
    const at::Tensor got = at::batch_norm(make(x, mesh, {Shard(0)}).as_tensor(), w, b, rm, rv, true,
                                          0.1, 1e-5, false);
    EXPECT_EQ(got.scalar_type(), at::kBFloat16);
    EXPECT_TRUE(at::allclose(full(got).to(at::kFloat), want.to(at::kFloat), 2e-2, 2e-2));
    const at::Tensor g = at::group_norm(make(x, mesh, {Shard(0)}).as_tensor(), 3, w, b);
    EXPECT_EQ(g.scalar_type(), at::kBFloat16);
  });
}

TEST(Spatial, NormErrorsNameTheValues) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor one = make(distinct({1, 3}), mesh, {Shard(1)}).as_tensor();
    at::Tensor rm = at::zeros({3}, at::kDouble), rv = at::ones({3}, at::kDouble);
    std::string e = error_of<ValueError>([&] { at::batch_norm(one, {}, {}, rm, rv, true, 0.1, 1e-5, false); });
    EXPECT_HAS(e, "aten::batch_norm(");
    EXPECT_HAS(e, "expected more than 1 value per channel when training, got input size [1, 3]");
    EXPECT_TRUE(at::equal(rm, at::zeros({3}, at::kDouble)));  // nothing updated
    const at::Tensor x = make(distinct({4, 3, 2}), mesh, {Shard(0)}).as_tensor();
    e = error_of<ValueError>([&] { at::batch_norm(x, {}, {}, {}, {}, false, 0.1, 1e-5, false); });
    EXPECT_HAS(e, "running_mean and running_var must be defined in evaluation mode");
    e = error_of<ValueError>([&] { at::group_norm(x, 2); });
    EXPECT_HAS(e, "expected the number of channels 3 to be divisible by num_groups=2");
  });
}

}  // namespace
}  // namespace hyper
