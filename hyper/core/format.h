#pragma once
/// \file format.h
/// Integer lists as text, the one way every layer, tool and message prints a shape,
/// offsets, sizes or a mesh coordinate. Torch-free.
///
///   shape_to_string({2, 3})        == "[2,3]"   (the core's text forms and errors)
///   shape_to_string({2, 3}, ", ")  == "[2, 3]"  (hyper-dcp list, checkpoint load errors)
///   join_ints({1, 1, 13})          == "1,1,13"
///
/// A torch caller passes `t.sizes().vec()`.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hyper {

/// The entries of `v` in decimal with `sep` between them: `join_ints({1, 2})` is `"1,2"`;
/// empty for an empty list.
std::string join_ints(const std::vector<int64_t>& v, std::string_view sep = ",");

/// `[` + join_ints(v, sep) + `]`: `[2,3]`, `[]` for a 0-d shape.
std::string shape_to_string(const std::vector<int64_t>& v, std::string_view sep = ",");

}  // namespace hyper
