#include "hyper/dcp/metadata.h"

#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "hyper/core/errors.h"
#include "hyper/core/read_plan.h"
#include "hyper/dcp/checksum.h"
#include "hyper/dcp/internal/json.h"

namespace hyper::dcp {

using hyper::internal::str_cat;
using nlohmann::json;
using nlohmann::ordered_json;

namespace {

constexpr int64_t kMaxCount = int64_t{1} << 62;

// The sealed form of .metadata ends in kSealHead + 16 hex digits + kSealTail; the checksum
// covers every byte before kSealHead.
constexpr const char* kSealHead = ",\n \"metadata_checksum\": \"";
constexpr const char* kSealTail = "\"\n}\n";

std::vector<int64_t> int_list(const json& j, const std::string& what) {
  HYPER_CHECK_VALUE(j.is_array(), what, " is not a list");
  HYPER_CHECK_VALUE(j.size() <= 64, what, " has ", j.size(), " entries (at most 64)");
  std::vector<int64_t> out;
  for (size_t i = 0; i < j.size(); ++i)
    out.push_back(internal::get_count(j[i], kMaxCount, str_cat(what, "[", i, "]")));
  return out;
}

const json& field(const json& obj, const char* name, const std::string& what) {
  auto it = obj.find(name);
  HYPER_CHECK_VALUE(it != obj.end(), what, " lacks \"", name, "\"");
  return *it;
}

ordered_json value_to_json(const Value& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return {{"int", *i}};
  if (const auto* b = std::get_if<bool>(&v)) return {{"bool", *b}};
  if (const auto* s = std::get_if<std::string>(&v)) return {{"str", *s}};
  const double d = std::get<double>(v);
  if (std::isnan(d)) return {{"float", "nan"}};
  if (std::isinf(d)) return {{"float", d > 0 ? "inf" : "-inf"}};
  return {{"float", d}};
}

Value value_from_json(const json& j, const std::string& what) {
  HYPER_CHECK_VALUE(j.is_object() && j.size() == 1, what,
                    " must be an object with one of \"int\", \"float\", \"bool\", \"str\"");
  const std::string type = j.begin().key();  // (not via items(): its proxy is a temporary)
  const json& v = j.begin().value();
  if (type == "int") {
    HYPER_CHECK_VALUE(v.is_number_integer() &&
                          (!v.is_number_unsigned() ||
                           v.get<uint64_t>() <= static_cast<uint64_t>(
                                                    std::numeric_limits<int64_t>::max())),
                      what, " is not a 64-bit integer: ", v.dump());
    return v.get<int64_t>();
  }
  if (type == "float") {
    if (v.is_string()) {
      const std::string& s = v.get_ref<const std::string&>();
      if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
      if (s == "inf") return std::numeric_limits<double>::infinity();
      if (s == "-inf") return -std::numeric_limits<double>::infinity();
    }
    HYPER_CHECK_VALUE(v.is_number(), what, " is not a number: ", v.dump());
    return v.get<double>();
  }
  if (type == "bool") {
    HYPER_CHECK_VALUE(v.is_boolean(), what, " is not a bool: ", v.dump());
    return v.get<bool>();
  }
  if (type == "str") {
    HYPER_CHECK_VALUE(v.is_string(), what, " is not a string: ", v.dump());
    return v.get<std::string>();
  }
  throw ValueError(str_cat(what, " has unknown type \"", type, "\""));
}

}  // namespace

bool ChunkMeta::operator==(const ChunkMeta& o) const {
  return box == o.box && file == o.file && key == o.key && byte_range == o.byte_range &&
         checksum == o.checksum && block_size == o.block_size &&
         block_checksums == o.block_checksums && leaves == o.leaves &&
         header_checksum == o.header_checksum;
}

std::string seal_metadata_text(const std::string& text) {
  size_t end = text.size();
  while (end > 0 && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  HYPER_CHECK_VALUE(end > 0 && text[end - 1] == '}', "seal_metadata_text: not a JSON object");
  size_t body = end - 1;
  while (body > 0 && std::isspace(static_cast<unsigned char>(text[body - 1]))) --body;
  HYPER_CHECK_VALUE(body > 0 && text[body - 1] != '{', "seal_metadata_text: empty JSON object");
  std::string out = text.substr(0, body);
  const uint64_t sum = xxh3_64(out.data(), static_cast<int64_t>(out.size()));
  return out + kSealHead + checksum_hex(sum) + kSealTail;
}

std::string Metadata::to_json() const {
  ordered_json root = ordered_json::object();
  root["format"] = "hyper-dcp";
  root["version"] = version;
  root["checksum_algorithm"] = "xxh3-64";
  ordered_json tj = ordered_json::object();
  for (const auto& [name, t] : tensors) {
    ordered_json chunks = ordered_json::array();
    for (const auto& c : t.chunks) {
      ordered_json cj = ordered_json::object();
      cj["offsets"] = c.box.offsets;
      cj["sizes"] = c.box.sizes;
      cj["file"] = c.file;
      if (!c.key.empty()) cj["key"] = c.key;
      if (c.byte_range) cj["byte_range"] = {c.byte_range->first, c.byte_range->second};
      if (c.checksum) cj["checksum"] = checksum_hex(*c.checksum);
      if (c.header_checksum) cj["header_checksum"] = checksum_hex(*c.header_checksum);
      if (c.leaves) {
        ordered_json groups = ordered_json::array();
        for (uint64_t g : c.leaves->group_checksums) groups.push_back(checksum_hex(g));
        cj["leaves"] = {{"key", c.leaves->key},
                        {"leaf_size", c.leaves->leaf_size},
                        {"group_leaves", c.leaves->group_leaves},
                        {"group_checksums", std::move(groups)}};
      }
      if (c.block_size > 0) {
        cj["block_size"] = c.block_size;
        ordered_json blocks = ordered_json::array();
        for (uint64_t b : c.block_checksums) blocks.push_back(checksum_hex(b));
        cj["block_checksums"] = std::move(blocks);
      }
      chunks.push_back(std::move(cj));
    }
    tj[name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"chunks", std::move(chunks)}};
  }
  root["tensors"] = std::move(tj);
  ordered_json vj = ordered_json::object();
  for (const auto& [name, v] : values) vj[name] = value_to_json(v);
  root["values"] = std::move(vj);
  return seal_metadata_text(root.dump(1));
}

Metadata Metadata::from_json(const std::string& text, const std::string& label) {
  const json root = internal::parse_json_strict(text.data(), text.size(), label);
  HYPER_CHECK_VALUE(root.is_object(), label, " is not a JSON object");
  const json& format = field(root, "format", label);
  HYPER_CHECK_VALUE(format == "hyper-dcp", label, ": format is ", format.dump(),
                    ", expected \"hyper-dcp\"");
  Metadata m;
  if (auto it = root.find("metadata_checksum"); it != root.end()) {
    const uint64_t want = internal::parse_hex64(*it, label + " metadata_checksum");
    const size_t head = std::strlen(kSealHead), tail = std::strlen(kSealTail);
    const size_t sealed = head + 16 + tail;
    HYPER_CHECK_VALUE(text.size() >= sealed &&
                          text.compare(text.size() - sealed, head, kSealHead) == 0 &&
                          text.compare(text.size() - tail, tail, kSealTail) == 0,
                      label, ": \"metadata_checksum\" must be the last field, written as ",
                      "',\\n \"metadata_checksum\": \"<16 hex digits>\"\\n}\\n'");
    const uint64_t got = xxh3_64(text.data(), static_cast<int64_t>(text.size() - sealed));
    HYPER_CHECK_VALUE(got == want, "checksum mismatch in '", label, "': expected ",
                      checksum_hex(want), ", got ", checksum_hex(got),
                      " (the metadata was edited or is corrupted)");
    m.checksummed = true;
  }
  m.version = internal::get_count(field(root, "version", label), kMaxCount, label + " version");
  HYPER_CHECK_VALUE(m.version >= 1 && m.version <= kFormatVersion, label, ": format version ",
                    m.version, " is not supported (this library reads 1..", kFormatVersion, ")");
  if (auto it = root.find("checksum_algorithm"); it != root.end())
    HYPER_CHECK_VALUE(*it == "xxh3-64", label, ": unknown checksum_algorithm ", it->dump());

  const json& tensors = field(root, "tensors", label);
  HYPER_CHECK_VALUE(tensors.is_object(), label, ": \"tensors\" is not an object");
  for (auto it = tensors.begin(); it != tensors.end(); ++it) {
    const std::string tw = str_cat(label, ": tensor '", it.key(), "'");
    const json& tjs = it.value();
    HYPER_CHECK_VALUE(tjs.is_object(), tw, " is not an object");
    TensorMeta t;
    const json& dt = field(tjs, "dtype", tw);
    HYPER_CHECK_VALUE(dt.is_string(), tw, ": dtype is not a string");
    const auto d = dtype_from_name(dt.get<std::string>());
    HYPER_CHECK_VALUE(d.has_value(), tw, ": unknown dtype '", dt.get<std::string>(), "'");
    t.dtype = *d;
    t.shape = int_list(field(tjs, "shape", tw), tw + " shape");
    try {
      check_shape(t.shape, "shape");
    } catch (const ValueError& e) {
      throw ValueError(str_cat(tw, ": ", e.what()));
    }
    const json& chunks = field(tjs, "chunks", tw);
    HYPER_CHECK_VALUE(chunks.is_array(), tw, ": chunks is not a list");
    for (size_t ci = 0; ci < chunks.size(); ++ci) {
      const std::string cw = str_cat(tw, " chunk ", ci);
      const json& cj = chunks[ci];
      HYPER_CHECK_VALUE(cj.is_object(), cw, " is not an object");
      ChunkMeta c;
      c.box.offsets = int_list(field(cj, "offsets", cw), cw + " offsets");
      c.box.sizes = int_list(field(cj, "sizes", cw), cw + " sizes");
      HYPER_CHECK_VALUE(c.box.offsets.size() == t.shape.size() &&
                            c.box.sizes.size() == t.shape.size(),
                        cw, ": offsets/sizes do not have the rank of the shape (",
                        t.shape.size(), ")");
      for (size_t dd = 0; dd < t.shape.size(); ++dd)
        HYPER_CHECK_VALUE(c.box.offsets[dd] <= t.shape[dd] &&
                              c.box.sizes[dd] <= t.shape[dd] - c.box.offsets[dd],
                          cw, " ", c.box.to_string(), " lies outside the shape");
      const json& file = field(cj, "file", cw);
      HYPER_CHECK_VALUE(file.is_string() && !file.get<std::string>().empty(), cw,
                        ": file is not a non-empty string");
      c.file = file.get<std::string>();
      if (auto k = cj.find("key"); k != cj.end()) {
        HYPER_CHECK_VALUE(k->is_string() && !k->get<std::string>().empty(), cw,
                          ": key is not a non-empty string");
        c.key = k->get<std::string>();
      }
      // The box lies inside a checked shape (numel <= 2^62); its byte size may not.
      const int64_t esize = dtype_size(t.dtype);
      HYPER_CHECK_VALUE(c.box.numel() <= (int64_t{1} << 62) / esize, cw,
                        ": byte size overflows");
      const int64_t nbytes = c.box.numel() * esize;
      if (auto r = cj.find("byte_range"); r != cj.end()) {
        const auto br = int_list(*r, cw + " byte_range");
        HYPER_CHECK_VALUE(br.size() == 2, cw, ": byte_range is not two integers");
        HYPER_CHECK_VALUE(br[0] <= br[1], cw, ": byte_range [", br[0], ", ", br[1],
                          "] is reversed");
        HYPER_CHECK_VALUE(br[1] - br[0] == nbytes, cw, ": byte_range [", br[0], ", ", br[1],
                          "] holds ", br[1] - br[0], " bytes, the chunk needs ", nbytes);
        c.byte_range = std::make_pair(br[0], br[1]);
      }
      if (auto s = cj.find("checksum"); s != cj.end())
        c.checksum = internal::parse_hex64(*s, cw + " checksum");
      if (auto s = cj.find("header_checksum"); s != cj.end())
        c.header_checksum = internal::parse_hex64(*s, cw + " header_checksum");
      if (auto lj = cj.find("leaves"); lj != cj.end()) {
        const std::string lw = cw + " leaves";
        HYPER_CHECK_VALUE(lj->is_object(), lw, " is not an object");
        LeafChecksums l;
        const json& key = field(*lj, "key", lw);
        HYPER_CHECK_VALUE(key.is_string() && !key.get<std::string>().empty(), lw,
                          ": key is not a non-empty string");
        l.key = key.get<std::string>();
        l.leaf_size = internal::get_count(field(*lj, "leaf_size", lw), kMaxCount, lw + " leaf_size");
        l.group_leaves =
            internal::get_count(field(*lj, "group_leaves", lw), kMaxCount, lw + " group_leaves");
        HYPER_CHECK_VALUE(l.leaf_size > 0 && l.group_leaves > 0, lw,
                          ": leaf_size and group_leaves must be positive, got ", l.leaf_size,
                          " and ", l.group_leaves);
        HYPER_CHECK_VALUE(l.group_leaves <= (int64_t{1} << 40), lw, ": group_leaves ",
                          l.group_leaves, " is absurd");
        const json& groups = field(*lj, "group_checksums", lw);
        HYPER_CHECK_VALUE(groups.is_array(), lw, ": group_checksums is not a list");
        const int64_t n_leaves = l.leaves_for(nbytes);
        const int64_t expected = (n_leaves + l.group_leaves - 1) / l.group_leaves;
        HYPER_CHECK_VALUE(static_cast<int64_t>(groups.size()) == expected, lw, ": ",
                          groups.size(), " group checksums, expected ", expected, " for ",
                          n_leaves, " leaves of ", l.leaf_size, " bytes in groups of ",
                          l.group_leaves);
        for (size_t g = 0; g < groups.size(); ++g)
          l.group_checksums.push_back(
              internal::parse_hex64(groups[g], str_cat(lw, " group_checksums[", g, "]")));
        c.leaves = std::move(l);
      }
      if (auto bs = cj.find("block_size"); bs != cj.end()) {
        c.block_size = internal::get_count(*bs, kMaxCount, cw + " block_size");
        HYPER_CHECK_VALUE(c.block_size > 0, cw, ": block_size is 0");
        const json& blocks = field(cj, "block_checksums", cw);
        HYPER_CHECK_VALUE(blocks.is_array(), cw, ": block_checksums is not a list");
        const int64_t expected = (nbytes + c.block_size - 1) / c.block_size;
        HYPER_CHECK_VALUE(static_cast<int64_t>(blocks.size()) == expected, cw, ": ",
                          blocks.size(), " block checksums, expected ", expected, " for ",
                          nbytes, " bytes in blocks of ", c.block_size);
        for (size_t b = 0; b < blocks.size(); ++b)
          c.block_checksums.push_back(
              internal::parse_hex64(blocks[b], str_cat(cw, " block_checksums[", b, "]")));
      } else {
        HYPER_CHECK_VALUE(!cj.contains("block_checksums"), cw,
                          ": block_checksums without block_size");
      }
      t.chunks.push_back(std::move(c));
    }
    std::vector<Box> boxes;
    for (const auto& c : t.chunks) boxes.push_back(c.box);
    try {
      check_chunks_tile(t.shape, boxes);
    } catch (const ValueError& e) {
      throw ValueError(str_cat(tw, ": ", e.what()));
    }
    m.tensors.emplace(it.key(), std::move(t));
  }
  if (auto v = root.find("values"); v != root.end()) {
    HYPER_CHECK_VALUE(v->is_object(), label, ": \"values\" is not an object");
    for (auto it = v->begin(); it != v->end(); ++it) {
      const std::string vw = str_cat(label, ": value '", it.key(), "'");
      HYPER_CHECK_VALUE(!m.tensors.count(it.key()), vw, " is also a tensor");
      m.values.emplace(it.key(), value_from_json(it.value(), vw));
    }
  }
  return m;
}

std::vector<std::string> allocate_physical_keys(const std::vector<std::string>& logical) {
  std::map<std::string, int64_t> count;
  for (const auto& n : logical) ++count[n];
  std::set<std::string> used;
  std::vector<std::string> out(logical.size());
  auto literal = [&](const std::string& n) { return count[n] == 1 && n != "__metadata__"; };
  for (size_t i = 0; i < logical.size(); ++i)
    if (literal(logical[i])) {
      out[i] = logical[i];
      used.insert(logical[i]);
    }
  std::map<std::string, int64_t> next;
  for (size_t i = 0; i < logical.size(); ++i) {
    if (literal(logical[i])) continue;
    int64_t& k = next[logical[i]];
    std::string key;
    do {
      key = str_cat(logical[i], ".__dcp_chunk_", k++);
    } while (used.count(key));
    used.insert(key);
    out[i] = std::move(key);
  }
  return out;
}

}  // namespace hyper::dcp
