// Forward hooks of hyper::nn modules: order, replacement, removal, generic access by name,
// in-place parameter replacement, errors.
#include "hyper/nn/hookable.h"

#include <gtest/gtest.h>
#include <torch/nn/cloneable.h>

#include <string>
#include <tuple>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/nn/modules.h"

namespace {

using hyper::NotImplementedError;
using hyper::ValueError;
using hyper::nn::HookableModule;
using hyper::nn::Tensors;
using PreResult = std::optional<Tensors>;
using PostResult = std::optional<at::Tensor>;

// forward(a, scale, b) = a * scale + b: tensor and non-tensor arguments interleaved.
struct ScaleAddImpl : torch::nn::Cloneable<ScaleAddImpl> {
  void reset() override {}
  at::Tensor forward(const at::Tensor& a, double scale, const at::Tensor& b) {
    return a * scale + b;
  }
};
// forward returns a tuple: no post-hooks.
struct SplitImpl : torch::nn::Cloneable<SplitImpl> {
  void reset() override {}
  std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& x) { return {x, -x}; }
};
// A two-tensor forward usable through forward_tensors.
struct AddImpl : torch::nn::Cloneable<AddImpl> {
  void reset() override {}
  at::Tensor forward(const at::Tensor& a, const at::Tensor& b) { return a + b; }
};

TEST(NnHooks, PreHooksRunInOrderAndReplaceInputs) {
  hyper::nn::Linear lin(torch::nn::LinearOptions(3, 2).bias(false));
  std::vector<std::string> order;
  auto h1 = lin->register_forward_pre_hook([&](torch::nn::Module& m, const Tensors& in) -> PreResult {
    EXPECT_EQ(&m, lin.get());
    order.push_back("first");
    return Tensors{in[0] * 2};
  });
  auto h2 = lin->register_forward_pre_hook([&](torch::nn::Module&, const Tensors& in) -> PreResult {
    order.push_back("second");
    return Tensors{in[0] + 1};  // sees the first hook's replacement
  });
  auto h0 = lin->register_forward_pre_hook(
      [&](torch::nn::Module&, const Tensors&) -> PreResult {
        order.push_back("prepended");
        return std::nullopt;  // keep the inputs
      },
      /*prepend=*/true);
  auto x = at::randn({4, 3});
  auto y = lin->forward(x);
  EXPECT_EQ(order, (std::vector<std::string>{"prepended", "first", "second"}));
  EXPECT_TRUE(at::allclose(y, at::matmul(x * 2 + 1, lin->weight.t())));
  EXPECT_EQ(lin->num_forward_pre_hooks(), 3u);
}

TEST(NnHooks, PostHooksSeeInputsAndReplaceOutput) {
  hyper::nn::LayerNorm norm(torch::nn::LayerNormOptions({4}));
  auto x = at::randn({2, 4});
  const auto plain = norm->forward(x);
  std::vector<int> order;
  norm->register_forward_pre_hook(
      [](torch::nn::Module&, const Tensors& in) -> PreResult { return Tensors{in[0] * 3}; });
  norm->register_forward_hook([&](torch::nn::Module&, const Tensors& in, const at::Tensor& out) -> PostResult {
    order.push_back(1);
    EXPECT_TRUE(at::allclose(in[0], x * 3));  // the replaced inputs
    return out + 10;
  });
  norm->register_forward_hook([&](torch::nn::Module&, const Tensors&, const at::Tensor& out) -> PostResult {
    order.push_back(2);
    return out * 2;
  });
  norm->register_forward_hook(
      [&](torch::nn::Module&, const Tensors&, const at::Tensor&) -> PostResult {
        order.push_back(0);
        return std::nullopt;
      },
      /*prepend=*/true);
  auto y = norm->forward(x);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  // LayerNorm is scale invariant (up to eps): (ln(3x) + 10) * 2.
  EXPECT_TRUE(at::allclose(y, (plain + 10) * 2, 1e-4, 1e-4));
}

TEST(NnHooks, RemoveByHandle) {
  hyper::nn::Linear lin(3, 2);
  auto x = at::randn({2, 3});
  const auto plain = lin->forward(x);
  auto pre = lin->register_forward_pre_hook(
      [](torch::nn::Module&, const Tensors& in) -> PreResult { return Tensors{in[0] * 0}; });
  auto post = lin->register_forward_hook(
      [](torch::nn::Module&, const Tensors&, const at::Tensor& y) -> PostResult { return y - 1; });
  EXPECT_FALSE(at::equal(lin->forward(x), plain));
  EXPECT_TRUE(pre.remove());
  EXPECT_FALSE(pre.remove());  // idempotent
  EXPECT_TRUE(at::allclose(lin->forward(x), plain - 1));
  EXPECT_TRUE(post.remove());
  EXPECT_FALSE(lin->has_hooks());
  EXPECT_TRUE(at::equal(lin->forward(x), plain));  // bit-identical again
  // A handle outliving its module is harmless.
  hyper::nn::HookHandle dangling;
  {
    hyper::nn::Linear tmp(2, 2);
    dangling = tmp->register_forward_pre_hook(
        [](torch::nn::Module&, const Tensors&) -> PreResult { return std::nullopt; });
  }
  EXPECT_FALSE(dangling.remove());
  EXPECT_FALSE(hyper::nn::HookHandle().remove());
}

TEST(NnHooks, HookMayRemoveItself) {
  hyper::nn::Linear lin(3, 2);
  int calls = 0;
  auto handle = std::make_shared<hyper::nn::HookHandle>();
  *handle = lin->register_forward_pre_hook([&calls, handle](torch::nn::Module&, const Tensors&) -> PreResult {
    ++calls;
    handle->remove();
    return std::nullopt;
  });
  lin->forward(at::randn({1, 3}));
  lin->forward(at::randn({1, 3}));
  EXPECT_EQ(calls, 1);
}

TEST(NnHooks, NonTensorArgumentsPassThrough) {
  hyper::nn::Hooked<ScaleAddImpl> m;
  auto a = at::ones({2});
  auto b = at::full({2}, 5.0);
  EXPECT_EQ(m->num_tensor_args(), 2u);
  m->register_forward_pre_hook([](torch::nn::Module&, const Tensors& in) -> PreResult {
    EXPECT_EQ(in.size(), 2u);
    return Tensors{in[0] * 2, in[1] * 0};  // a -> 2a, b -> 0
  });
  EXPECT_TRUE(at::equal(m->forward(a, 3.0, b), at::full({2}, 6.0)));
  // forward_tensors needs an all-tensor signature.
  EXPECT_THROW(m->forward_tensors({a, b}), NotImplementedError);
}

TEST(NnHooks, GenericForwardByName) {
  struct Parent : torch::nn::Module {
    Parent() {
      lin = register_module("lin", hyper::nn::Linear(3, 3));
      add = register_module("add", hyper::nn::Hooked<AddImpl>());
      plain = register_module("plain", torch::nn::Linear(3, 3));
    }
    hyper::nn::Linear lin{nullptr};
    hyper::nn::Hooked<AddImpl> add{nullptr};
    torch::nn::Linear plain{nullptr};
  };
  auto parent = std::make_shared<Parent>();
  auto child = hyper::nn::find_module(parent, "lin");
  auto hookable = hyper::nn::as_hookable(child);
  ASSERT_NE(hookable, nullptr);
  EXPECT_EQ(&hookable->as_module(), child.get());
  hookable->register_forward_hook(
      [](torch::nn::Module&, const Tensors&, const at::Tensor& y) -> PostResult { return y * 0; });
  EXPECT_TRUE(at::equal(hyper::nn::forward_with_hooks(child, {at::randn({2, 3})}), at::zeros({2, 3})));
  EXPECT_TRUE(at::equal(parent->lin->forward(at::randn({2, 3})), at::zeros({2, 3})));

  auto add = hyper::nn::find_module(parent, "add");
  EXPECT_TRUE(at::equal(hyper::nn::forward_with_hooks(add, {at::ones({2}), at::ones({2})}),
                        at::full({2}, 2.0)));
  try {
    hyper::nn::forward_with_hooks(add, {at::ones({2})});
    ADD_FAILURE() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("takes 2 tensor argument(s), got 1"), std::string::npos) << e.what();
  }

  auto plain = hyper::nn::find_module(parent, "plain");
  EXPECT_EQ(hyper::nn::as_hookable(plain), nullptr);
  try {
    hyper::nn::forward_with_hooks(plain, {at::randn({1, 3})});
    ADD_FAILURE() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("not hookable"), std::string::npos) << e.what();
  }
  try {
    hyper::nn::find_module(parent, "mlp.w1");
    ADD_FAILURE() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("no module named 'mlp.w1'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("lin"), std::string::npos) << e.what();
  }
  EXPECT_EQ(hyper::nn::find_module(parent, ""), parent);
}

TEST(NnHooks, ForwardHooksNeedTensorOutput) {
  hyper::nn::Hooked<SplitImpl> split;
  EXPECT_THROW(split->register_forward_hook(
                   [](torch::nn::Module&, const Tensors&, const at::Tensor&) -> PostResult {
                     return std::nullopt;
                   }),
               NotImplementedError);
  // Pre-hooks still work.
  split->register_forward_pre_hook(
      [](torch::nn::Module&, const Tensors& in) -> PreResult { return Tensors{in[0] + 1}; });
  auto [a, b] = split->forward(at::zeros({2}));
  EXPECT_TRUE(at::equal(a, at::ones({2})));
  EXPECT_TRUE(at::equal(b, -at::ones({2})));
}

TEST(NnHooks, PreHookMustKeepTheArgumentCount) {
  hyper::nn::Linear lin(3, 2);
  lin->register_forward_pre_hook(
      [](torch::nn::Module&, const Tensors& in) -> PreResult { return Tensors{in[0], in[0]}; });
  try {
    lin->forward(at::randn({1, 3}));
    ADD_FAILURE() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("returned 2 tensor(s) for 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(lin->register_forward_pre_hook(nullptr), ValueError);
  EXPECT_THROW(lin->register_forward_hook(nullptr), ValueError);
}

TEST(NnHooks, SetParameterDataIsInPlace) {
  hyper::nn::Linear lin(4, 6);
  at::Tensor held = lin->named_parameters()["weight"];  // what an optimizer would hold
  auto* impl_before = held.unsafeGetTensorImpl();
  auto shard = at::randn({3, 4});
  lin->set_parameter_data("weight", shard);
  EXPECT_EQ(lin->weight.unsafeGetTensorImpl(), impl_before);
  EXPECT_EQ(held.sizes(), (at::IntArrayRef{3, 4}));
  EXPECT_TRUE(at::equal(lin->weight, shard));
  EXPECT_TRUE(lin->weight.requires_grad());
  EXPECT_TRUE(lin->weight.is_leaf());
  // Forward uses the new data (a local column shard: 3 outputs); grads reach the parameter.
  lin->set_parameter_data("bias", at::zeros({3}));
  auto y = lin->forward(at::ones({2, 4}));
  EXPECT_EQ(y.sizes(), (at::IntArrayRef{2, 3}));
  y.sum().backward();
  EXPECT_EQ(held.grad().sizes(), (at::IntArrayRef{3, 4}));
  try {
    lin->set_parameter_data("wieght", shard);
    ADD_FAILURE() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("no parameter 'wieght' (parameters: [weight, bias])"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(lin->set_parameter_data("weight", at::Tensor()), ValueError);
}

TEST(NnHooks, Attributes) {
  hyper::nn::Embedding emb(10, 4);
  EXPECT_EQ(emb->attribute("tp"), nullptr);
  emb->set_attribute("tp", std::string("colwise"));
  ASSERT_NE(emb->attribute("tp"), nullptr);
  EXPECT_EQ(std::any_cast<std::string>(*emb->attribute("tp")), "colwise");
  auto copy = std::dynamic_pointer_cast<hyper::nn::EmbeddingImpl>(emb->clone());
  ASSERT_NE(copy, nullptr);
  EXPECT_NE(copy->attribute("tp"), nullptr);
  emb->erase_attribute("tp");
  EXPECT_EQ(emb->attribute("tp"), nullptr);
}

}  // namespace
