#pragma once
/// \file dispatch/pointwise_rules.h
/// The pointwise ops' sharding rules, torch-free: one table (pointwise_rules.cc), one line per op
/// (and its in-place form), each an elementwise_rule (sharding_rule.h) saying which arguments are
/// tensors and how a Partial operand passes (its PartialRule). The fallback runs every op of the
/// table; adding a pointwise op is adding its line here (docs/architecture.md "Adding an op").

#include <map>
#include <string>

#include "hyper/tensor/dispatch/sharding_rule.h"

namespace hyper::dispatch {

/// Adds the pointwise rules to `r` (called once by the registry in sharding_rule.cc).
void add_pointwise_rules(std::map<std::string, OpRule>& r);

}  // namespace hyper::dispatch
