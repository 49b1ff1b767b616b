// Uses the installed package through the umbrella: <hyper/hyper.h> and hyper::hyper, which
// brings LibTorch (include dirs, libraries, USE_C10D_GLOO) along.
#include <hyper/hyper.h>

#include <ATen/ATen.h>
#include <torch/version.h>

#include <iostream>

int main() {
  at::Tensor t = at::ones({2, 3});
  hyper::Placement r = hyper::Replicate();
  std::cout << r.to_string() << " " << t.sum().item<double>() << " (LibTorch " << TORCH_VERSION
            << ")\n";
  static_assert(TORCH_VERSION_MAJOR >= 2, "hyper's package must bring LibTorch 2.x");
  return (r.to_string() == "R" && t.sum().item<double>() == 6.0) ? 0 : 1;
}
