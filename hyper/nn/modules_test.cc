// hyper::nn::Linear / Embedding / LayerNorm / Hooked<Impl> are identical to their torch::nn
// twins when no hook is set: same seed -> same parameters, bit-identical outputs and grads.
#include "hyper/nn/modules.h"

#include <gtest/gtest.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>

#include <sstream>

namespace {

using hyper::nn::Tensors;

void expect_same(const at::Tensor& a, const at::Tensor& b, const std::string& what) {
  ASSERT_EQ(a.defined(), b.defined()) << what;
  if (!a.defined()) return;
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  EXPECT_TRUE(at::equal(a, b)) << what << " differs";
}

/// Runs forward+backward of two modules built from the same seed and compares
/// parameter names, values, outputs and gradients bit for bit.
template <class MakeA, class MakeB>
void expect_twins(MakeA make_a, MakeB make_b, const at::Tensor& input,
                  bool float_input = true) {
  at::manual_seed(1234);
  auto a = make_a();
  at::manual_seed(1234);
  auto b = make_b();
  auto pa = a->named_parameters();
  auto pb = b->named_parameters();
  ASSERT_EQ(pa.keys(), pb.keys());
  for (const auto& item : pa) expect_same(item.value(), pb[item.key()], "param " + item.key());
  auto xa = float_input ? input.clone().requires_grad_(true) : input;
  auto xb = float_input ? input.clone().requires_grad_(true) : input;
  auto ya = a->forward(xa);
  auto yb = b->forward(xb);
  expect_same(ya, yb, "output");
  auto g = at::randn_like(ya);
  ya.backward(g);
  yb.backward(g);
  for (const auto& item : pa) expect_same(item.value().grad(), pb[item.key()].grad(), "grad " + item.key());
  if (float_input) expect_same(xa.grad(), xb.grad(), "input grad");
}

TEST(NnModules, LinearIsTorchLinear) {
  for (bool bias : {true, false}) {
    expect_twins([&] { return hyper::nn::Linear(torch::nn::LinearOptions(5, 3).bias(bias)); },
                 [&] { return torch::nn::Linear(torch::nn::LinearOptions(5, 3).bias(bias)); },
                 at::randn({4, 2, 5}));
  }
  hyper::nn::Linear lin(4, 3);  // convenience constructor, as torch's
  EXPECT_EQ(lin->weight.sizes(), (at::IntArrayRef{3, 4}));
  EXPECT_EQ(lin->options.out_features(), 3);
  std::ostringstream os;
  os << *lin;
  EXPECT_EQ(os.str(), "hyper::nn::Linear(in_features=4, out_features=3, bias=true)");
}

TEST(NnModules, LinearDeferBias) {
  hyper::nn::Linear lin(torch::nn::LinearOptions(5, 3));
  auto x = at::randn({2, 5});
  const auto full = lin->forward(x);
  lin->set_defer_bias(true);
  EXPECT_TRUE(lin->defer_bias());
  const auto no_bias = lin->forward(x);
  EXPECT_TRUE(at::allclose(no_bias + lin->bias, full));
  EXPECT_TRUE(at::equal(no_bias, at::matmul(x, lin->weight.t())) ||
              at::allclose(no_bias, at::matmul(x, lin->weight.t())));
  // Hooks wrap the deferred computation too (a style adds the bias in its post-hook).
  lin->register_forward_hook([](torch::nn::Module& m, const Tensors&, const at::Tensor& y)
                                 -> std::optional<at::Tensor> {
    return y + m.as<hyper::nn::LinearImpl>()->bias;
  });
  EXPECT_TRUE(at::allclose(lin->forward(x), full));
  lin->set_defer_bias(false);
  lin->clear_hooks();
  EXPECT_TRUE(at::equal(lin->forward(x), full));
}

TEST(NnModules, EmbeddingIsTorchEmbedding) {
  auto ids = at::randint(0, 10, {3, 4}, at::kLong);
  expect_twins([] { return hyper::nn::Embedding(torch::nn::EmbeddingOptions(10, 6)); },
               [] { return torch::nn::Embedding(torch::nn::EmbeddingOptions(10, 6)); }, ids,
               /*float_input=*/false);
  expect_twins(
      [] { return hyper::nn::Embedding(torch::nn::EmbeddingOptions(10, 6).padding_idx(2)); },
      [] { return torch::nn::Embedding(torch::nn::EmbeddingOptions(10, 6).padding_idx(2)); },
      ids, /*float_input=*/false);
}

TEST(NnModules, LayerNormIsTorchLayerNorm) {
  expect_twins([] { return hyper::nn::LayerNorm(torch::nn::LayerNormOptions({6})); },
               [] { return torch::nn::LayerNorm(torch::nn::LayerNormOptions({6})); },
               at::randn({3, 4, 6}));
  expect_twins(
      [] { return hyper::nn::LayerNorm(torch::nn::LayerNormOptions({4, 6}).eps(1e-3)); },
      [] { return torch::nn::LayerNorm(torch::nn::LayerNormOptions({4, 6}).eps(1e-3)); },
      at::randn({3, 4, 6}));
}

TEST(NnModules, HookedConvIsTorchConv) {
  expect_twins(
      [] { return hyper::nn::Hooked<torch::nn::Conv1dImpl>(torch::nn::Conv1dOptions(3, 4, 2)); },
      [] { return torch::nn::Conv1d(torch::nn::Conv1dOptions(3, 4, 2)); }, at::randn({2, 3, 7}));
}

// A model written with hyper::nn modules has the same parameter names and numerics as the
// torch::nn one, through register_module and Sequential.
template <class Lin, class Norm, class Emb>
struct TinyModel : torch::nn::Module {
  TinyModel() {
    emb = register_module("emb", Emb(torch::nn::EmbeddingOptions(11, 8)));
    norm = register_module("norm", Norm(torch::nn::LayerNormOptions({8})));
    mlp = register_module("mlp", torch::nn::Sequential(Lin(8, 16), Lin(16, 8)));
    head = register_module("head", Lin(torch::nn::LinearOptions(8, 5).bias(false)));
  }
  at::Tensor forward(const at::Tensor& ids) {
    auto h = emb->forward(ids);
    h = h + mlp->forward(norm->forward(h)).relu();
    return head->forward(h);
  }
  Emb emb{nullptr};
  Norm norm{nullptr};
  torch::nn::Sequential mlp{nullptr};
  Lin head{nullptr};
};

TEST(NnModules, ModelOfHyperModulesIsModelOfTorchModules) {
  using H = TinyModel<hyper::nn::Linear, hyper::nn::LayerNorm, hyper::nn::Embedding>;
  using T = TinyModel<torch::nn::Linear, torch::nn::LayerNorm, torch::nn::Embedding>;
  auto ids = at::randint(0, 11, {2, 5}, at::kLong);
  expect_twins([] { return std::make_shared<H>(); }, [] { return std::make_shared<T>(); }, ids,
               /*float_input=*/false);
}

TEST(NnModules, CloneStaysHyperAndDeepCopies) {
  hyper::nn::Linear lin(torch::nn::LinearOptions(4, 3));
  lin->register_forward_hook([](torch::nn::Module&, const Tensors&, const at::Tensor& y)
                                 -> std::optional<at::Tensor> { return y * 2; });
  auto copy = std::dynamic_pointer_cast<hyper::nn::LinearImpl>(lin->clone());
  ASSERT_NE(copy, nullptr);
  EXPECT_TRUE(at::equal(copy->weight, lin->weight));
  EXPECT_NE(copy->weight.data_ptr(), lin->weight.data_ptr());
  // The member and the registered parameter are the same tensor in the clone.
  EXPECT_EQ(copy->weight.unsafeGetTensorImpl(),
            copy->named_parameters()["weight"].unsafeGetTensorImpl());
  EXPECT_EQ(copy->num_forward_hooks(), 1u);
  auto x = at::randn({2, 4});
  EXPECT_TRUE(at::allclose(copy->forward(x), lin->forward(x)));
  lin->clear_hooks();
  EXPECT_EQ(copy->num_forward_hooks(), 1u);

  // Cloning a parent clones hyper children into hyper children.
  torch::nn::Sequential seq(hyper::nn::Linear(4, 3));
  auto seq2 = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(seq->clone());
  ASSERT_NE(seq2, nullptr);
  auto child = std::dynamic_pointer_cast<hyper::nn::LinearImpl>(seq2->ptr(0));
  ASSERT_NE(child, nullptr);
  EXPECT_TRUE(at::equal(child->weight, seq[0]->as<hyper::nn::LinearImpl>()->weight));
  EXPECT_NE(child->weight.data_ptr(), seq[0]->as<hyper::nn::LinearImpl>()->weight.data_ptr());
}

}  // namespace
