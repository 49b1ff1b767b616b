#pragma once
/// \file testing_transformer.h
/// What the transformer-block tests (transformer_mp_test.cc, transformer_plain_test.cc) share:
/// ranks as threads with short timeouts, and a small block configuration.
#include <chrono>
#include <functional>

#include "examples/common/transformer_block.h"
#include "hyper/comm/testing/harness.h"

namespace hyper::examples::tp_testing {

/// Runs `fn` on a 1-D mesh of `n` thread-ranks (30 s collective timeout, 300 s overall).
inline void on_mesh(int n, const std::function<void(const DeviceMesh&)>& fn) {
  comm::testing::run_on_mesh(
      {n}, fn, comm::testing::with_timeouts(std::chrono::seconds(30), std::chrono::seconds(300)));
}

/// hidden 32, 4 heads of 8, ffn 64.
inline TransformerConfig small_config(bool causal = true, bool bias = true) {
  TransformerConfig cfg;
  cfg.hidden = 32;
  cfg.n_heads = 4;
  cfg.head_dim = 8;
  cfg.ffn = 64;
  cfg.causal = causal;
  cfg.bias = bias;
  return cfg;
}

}  // namespace hyper::examples::tp_testing
