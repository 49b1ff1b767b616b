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
  HYPER_CHECK_VALUE(j.size() <= static_cast<size_t>(kMaxMetadataDims), what, " has ", j.size(),
                    " entries (at most ", kMaxMetadataDims, ")");
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

namespace {

// The checks of one chunk (its small DOM `cj`) of tensor `t`, whose dtype and shape are valid.
ChunkMeta chunk_from_json(const json& cj, const TensorMeta& t, const std::string& cw) {
  HYPER_CHECK_VALUE(cj.is_object(), cw, " is not an object");
  ChunkMeta c;
  c.box.offsets = int_list(field(cj, "offsets", cw), cw + " offsets");
  c.box.sizes = int_list(field(cj, "sizes", cw), cw + " sizes");
  HYPER_CHECK_VALUE(c.box.offsets.size() == t.shape.size() && c.box.sizes.size() == t.shape.size(),
                    cw, ": offsets/sizes do not have the rank of the shape (", t.shape.size(),
                    ")");
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
  HYPER_CHECK_VALUE(c.box.numel() <= (int64_t{1} << 62) / esize, cw, ": byte size overflows");
  const int64_t nbytes = c.box.numel() * esize;
  if (auto r = cj.find("byte_range"); r != cj.end()) {
    const auto br = int_list(*r, cw + " byte_range");
    HYPER_CHECK_VALUE(br.size() == 2, cw, ": byte_range is not two integers");
    HYPER_CHECK_VALUE(br[0] <= br[1], cw, ": byte_range [", br[0], ", ", br[1], "] is reversed");
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
                      ": leaf_size and group_leaves must be positive, got ", l.leaf_size, " and ",
                      l.group_leaves);
    HYPER_CHECK_VALUE(l.group_leaves <= (int64_t{1} << 40), lw, ": group_leaves ",
                      l.group_leaves, " is absurd");
    // Bounds that keep the reader's leaf and group arithmetic (leaf_size * group_leaves,
    // pieces of whole groups) from overflowing on a hostile .metadata.
    HYPER_CHECK_VALUE(l.leaf_size <= std::max<int64_t>(nbytes, 1), lw, ": leaf_size ",
                      l.leaf_size, " is larger than the chunk's ", nbytes, " bytes");
    HYPER_CHECK_VALUE(l.group_leaves <= kMaxCount / l.leaf_size, lw, ": groups of ",
                      l.group_leaves, " leaves of ", l.leaf_size, " bytes overflow");
    const json& groups = field(*lj, "group_checksums", lw);
    HYPER_CHECK_VALUE(groups.is_array(), lw, ": group_checksums is not a list");
    const int64_t n_leaves = l.leaves_for(nbytes);
    const int64_t expected = (n_leaves + l.group_leaves - 1) / l.group_leaves;
    HYPER_CHECK_VALUE(static_cast<int64_t>(groups.size()) == expected, lw, ": ", groups.size(),
                      " group checksums, expected ", expected, " for ", n_leaves, " leaves of ",
                      l.leaf_size, " bytes in groups of ", l.group_leaves);
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
    HYPER_CHECK_VALUE(static_cast<int64_t>(blocks.size()) == expected, cw, ": ", blocks.size(),
                      " block checksums, expected ", expected, " for ", nbytes,
                      " bytes in blocks of ", c.block_size);
    for (size_t b = 0; b < blocks.size(); ++b)
      c.block_checksums.push_back(
          internal::parse_hex64(blocks[b], str_cat(cw, " block_checksums[", b, "]")));
  } else {
    HYPER_CHECK_VALUE(!cj.contains("block_checksums"), cw, ": block_checksums without block_size");
  }
  return c;
}

// The streaming reader of .metadata: an nlohmann SAX handler. It walks the levels of the
// format itself (the root object, "tensors", each tensor object, its "chunks" list,
// "values") and builds a small DOM of only one subtree at a time: a root field, a tensor's
// dtype or shape, one chunk, one value; each is converted and dropped when it closes.
// Unknown fields are skipped without being built. So the memory is the result plus one
// chunk's DOM (plus chunks buffered when a writer put "chunks" before "dtype" or "shape":
// they are converted when the tensor's object closes).
// Every event checks the limits: nesting depth, string and key length, and the number of
// entries of a shape/offsets/sizes/byte_range list, before it is stored.
class MetadataReader {
 public:
  MetadataReader(const std::string& label, bool sealed, Metadata& m)
      : label_(label), sealed_(sealed), m_(m) {}

  // --- the nlohmann SAX interface
  bool null() { return value(json(nullptr)); }
  bool boolean(bool v) { return value(json(v)); }
  bool number_integer(json::number_integer_t v) { return value(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return value(json(v)); }
  bool number_float(json::number_float_t v, const json::string_t& /*text*/) {
    return value(json(v));
  }
  bool string(json::string_t& s) {
    // A value's string ("str") is bounded by the file size limit only.
    if (!(cap_ && cap_kind_ == Cap::kValue)) check_length(s, "string");
    return value(json(std::move(s)));
  }
  bool binary(json::binary_t& /*b*/) {
    throw ValueError(str_cat("invalid JSON in ", label_, ": binary data"));  // not in JSON text
  }
  bool start_object(std::size_t /*n*/) { return open(/*object=*/true); }
  bool start_array(std::size_t /*n*/) { return open(/*object=*/false); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(json::string_t& k);
  bool parse_error(std::size_t /*pos*/, const std::string& /*token*/,
                   const json::exception& e) {
    throw ValueError(str_cat("invalid JSON in ", label_, ": ", e.what()));
  }

  bool done() const { return done_; }

 private:
  enum class Level { kRoot, kTensors, kTensor, kChunks, kValues };
  // What the next value at a structural level is.
  enum class Next {
    kRoot, kRootField, kTensors, kValues, kTensor, kTensorField, kChunks, kValue, kSkip
  };
  // What a captured subtree is.
  enum class Cap { kRootField, kTensorField, kChunk, kValue, kSkip };
  struct Frame {
    Level level;
    std::set<std::string> keys;  // kRoot, kTensor: the keys seen (duplicates are refused)
  };
  struct CapFrame {
    json* node;                  // null when skipping
    std::set<std::string> keys;  // an object's keys seen
    size_t max_entries;          // a list of dims: at most kMaxMetadataDims
    bool scalars_only;           // a list of numbers or strings: a nested one is refused
    std::string what;            // a list: its name in messages
    std::string name;            // the key it sits under in its parent object
  };
  struct ListRule {
    size_t max_entries = std::numeric_limits<size_t>::max();
    bool scalars_only = false;
    std::string what;
  };

  // A tensor being read.
  struct Tensor {
    std::string name, tw;
    TensorMeta t;
    bool dtype = false, shape = false, chunks = false, chunks_list = false;
    std::vector<json> pending;  // chunks read before dtype and shape
    int64_t n_chunks = 0;
  };

  void check_length(const std::string& s, const char* what) const {
    HYPER_CHECK_VALUE(s.size() <= static_cast<size_t>(kMaxMetadataStringBytes), label_, ": a ",
                      what, " of ", s.size(), " bytes, more than the limit of ",
                      kMaxMetadataStringBytes, " (kMaxMetadataStringBytes), starting '",
                      s.substr(0, 32), "...'");
  }

  [[noreturn]] void duplicate(const std::string& k, const std::string& where) const {
    throw ValueError(str_cat("invalid JSON in ", label_, ": duplicate key '", k, "'", where));
  }

  std::string cap_context() const {
    switch (cap_kind_) {
      case Cap::kRootField: return str_cat(" (in \"", field_, "\")");
      case Cap::kTensorField: return str_cat(" (in tensor '", tensor_.name, "' ", field_, ")");
      case Cap::kChunk:
        return str_cat(" (in tensor '", tensor_.name, "' chunk ", tensor_.n_chunks, ")");
      case Cap::kValue: return str_cat(" (in value '", field_, "')");
      case Cap::kSkip: return "";
    }
    return "";
  }

  // The rule for a list opened inside a capture (at capture depth cap_stack_.size()).
  ListRule list_rule() const {
    const size_t dims = static_cast<size_t>(kMaxMetadataDims);
    if (cap_kind_ == Cap::kTensorField && cap_stack_.empty() && field_ == "shape")
      return {dims, true, tensor_.tw + " shape"};
    if (cap_kind_ != Cap::kChunk || cap_stack_.empty() || cap_stack_.back().node == nullptr ||
        !cap_stack_.back().node->is_object())
      return {};
    const std::string cw = str_cat(tensor_.tw, " chunk ", tensor_.n_chunks);
    if (cap_stack_.size() == 1 &&
        (cap_key_ == "offsets" || cap_key_ == "sizes" || cap_key_ == "byte_range"))
      return {dims, true, str_cat(cw, " ", cap_key_)};
    if (cap_stack_.size() == 1 && cap_key_ == "block_checksums")
      return {std::numeric_limits<size_t>::max(), true, cw + " block_checksums"};
    if (cap_stack_.size() == 2 && cap_stack_.back().name == "leaves" &&
        cap_key_ == "group_checksums")
      return {std::numeric_limits<size_t>::max(), true, cw + " leaves group_checksums"};
    return {};
  }

  // A field of a chunk (or of its leaves) this version reads; others are skipped unbuilt.
  bool known_chunk_field() const {
    static const std::set<std::string> chunk = {
        "offsets",  "sizes",           "file",   "key",        "byte_range",
        "checksum", "header_checksum", "leaves", "block_size", "block_checksums"};
    static const std::set<std::string> leaves = {"key", "leaf_size", "group_leaves",
                                                 "group_checksums"};
    if (cap_stack_.size() == 1) return chunk.count(cap_key_) > 0;
    if (cap_stack_.size() == 2 && cap_stack_.back().name == "leaves")
      return leaves.count(cap_key_) > 0;
    return true;
  }

  // A container where a scalar is expected is refused as it opens (never built).
  void check_container_allowed(bool object) const {
    const char* kind = object ? "an object" : "a list";
    if (cap_stack_.empty()) {
      if (cap_kind_ == Cap::kRootField)
        throw ValueError(str_cat(label_, ": \"", field_, "\" is ", kind, ", expected a ",
                                 field_ == "version" ? "number" : "string"));
      if (cap_kind_ == Cap::kTensorField && field_ == "dtype")
        throw ValueError(str_cat(tensor_.tw, ": dtype is not a string"));
      if (cap_kind_ == Cap::kTensorField && field_ == "shape" && object)
        throw ValueError(str_cat(tensor_.tw, " shape is not a list"));
      return;
    }
    const CapFrame& top = cap_stack_.back();
    if (top.node != nullptr && top.scalars_only)
      throw ValueError(str_cat(top.what, "[", top.node->size(), "] is ", kind,
                               ", expected a number or a string"));
  }

  // Stores `v` in the captured subtree; returns where it lies (null when skipping).
  json* put(json v) {
    if (cap_stack_.empty()) {
      if (cap_kind_ == Cap::kSkip) return nullptr;
      cap_root_ = std::move(v);
      return &cap_root_;
    }
    CapFrame& top = cap_stack_.back();
    if (top.node == nullptr) return nullptr;
    if (top.node->is_array()) {
      HYPER_CHECK_VALUE(top.node->size() < top.max_entries, top.what, " has more than ",
                        top.max_entries, " entries (the limit of dims, kMaxMetadataDims)");
      top.node->push_back(std::move(v));
      return &top.node->back();
    }
    if (cap_kind_ == Cap::kChunk && !known_chunk_field()) return nullptr;
    json& slot = (*top.node)[cap_key_];
    slot = std::move(v);
    return &slot;
  }

  void begin_capture(Cap kind) {
    cap_ = true;
    cap_kind_ = kind;
    cap_root_ = json();
    cap_stack_.clear();
  }

  bool value(json v) {
    if (!cap_) {
      if (!start_value()) return true;
    }
    put(std::move(v));
    if (cap_stack_.empty()) end_capture();
    return true;
  }

  bool open(bool object) {
    ++depth_;
    HYPER_CHECK_VALUE(depth_ <= kMaxMetadataDepth, "invalid JSON in ", label_,
                      ": nested deeper than ", kMaxMetadataDepth, " levels (kMaxMetadataDepth)");
    if (!cap_) {
      if (object) {
        switch (structural_next()) {
          case Next::kRoot: frames_.push_back({Level::kRoot, {}}); return true;
          case Next::kTensors: frames_.push_back({Level::kTensors, {}}); return true;
          case Next::kValues: frames_.push_back({Level::kValues, {}}); return true;
          case Next::kTensor: begin_tensor(); frames_.push_back({Level::kTensor, {}}); return true;
          default: break;
        }
      } else if (structural_next() == Next::kChunks) {
        tensor_.chunks_list = true;
        frames_.push_back({Level::kChunks, {}});
        return true;
      }
      if (!start_value()) return true;
    }
    check_container_allowed(object);
    ListRule rule = object ? ListRule{} : list_rule();
    std::string name = cap_stack_.empty() ? std::string() : cap_key_;
    json* node = put(object ? json::object() : json::array());
    cap_stack_.push_back(
        {node, {}, rule.max_entries, rule.scalars_only, std::move(rule.what), std::move(name)});
    return true;
  }

  bool close() {
    --depth_;
    if (cap_) {
      cap_stack_.pop_back();
      if (cap_stack_.empty()) end_capture();
      return true;
    }
    const Level level = frames_.back().level;
    frames_.pop_back();
    if (level == Level::kTensor) end_tensor();
    if (level == Level::kRoot) finish();
    return true;
  }

  // The next value's role at a structural level.
  Next structural_next() const {
    if (frames_.empty()) return Next::kRoot;
    if (frames_.back().level == Level::kChunks) return Next::kSkip;  // (chunks: captured)
    return next_;
  }

  // A scalar, or a container that is not structural, starts: decides what to capture.
  // Returns false when the value is consumed here (a scalar where a container was wanted
  // throws instead).
  bool start_value() {
    if (frames_.empty()) throw ValueError(str_cat(label_, " is not a JSON object"));
    if (done_) return false;
    const Level level = frames_.back().level;
    if (level == Level::kChunks) {
      begin_capture(Cap::kChunk);
      return true;
    }
    switch (next_) {
      case Next::kTensors:
        throw ValueError(str_cat(label_, ": \"tensors\" is not an object"));
      case Next::kValues:
        throw ValueError(str_cat(label_, ": \"values\" is not an object"));
      case Next::kTensor:
        throw ValueError(str_cat(label_, ": tensor '", field_, "' is not an object"));
      case Next::kChunks:
        tensor_.chunks_list = false;  // refused when the tensor closes (after dtype, shape)
        begin_capture(Cap::kSkip);
        return true;
      case Next::kRootField: begin_capture(Cap::kRootField); return true;
      case Next::kTensorField: begin_capture(Cap::kTensorField); return true;
      case Next::kValue: begin_capture(Cap::kValue); return true;
      case Next::kSkip: begin_capture(Cap::kSkip); return true;
      case Next::kRoot: break;
    }
    throw InternalError(str_cat("metadata reader: unexpected value in ", label_));
  }

  void end_capture() {
    cap_ = false;
    switch (cap_kind_) {
      case Cap::kRootField: root_field(cap_root_); break;
      case Cap::kTensorField: tensor_field(cap_root_); break;
      case Cap::kChunk: chunk(std::move(cap_root_)); break;
      case Cap::kValue: {
        const std::string vw = str_cat(label_, ": value '", field_, "'");
        m_.values.emplace(field_, value_from_json(cap_root_, vw));
        break;
      }
      case Cap::kSkip: break;
    }
    cap_root_ = json();
  }

  void root_field(const json& v) {
    if (field_ == "format") {
      HYPER_CHECK_VALUE(v == "hyper-dcp", label_, ": format is ", v.dump(),
                        ", expected \"hyper-dcp\"");
      format_ = true;
    } else if (field_ == "version") {
      m_.version = internal::get_count(v, kMaxCount, label_ + " version");
      HYPER_CHECK_VALUE(m_.version >= 1 && m_.version <= kFormatVersion, label_,
                        ": format version ", m_.version,
                        " is not supported (this library reads 1..", kFormatVersion, ")");
      version_ = true;
    } else if (field_ == "checksum_algorithm") {
      HYPER_CHECK_VALUE(v == "xxh3-64", label_, ": unknown checksum_algorithm ", v.dump());
    } else if (field_ == "metadata_checksum") {
      internal::parse_hex64(v, label_ + " metadata_checksum");
      // from_json checked the checksum on the text when it ends in the sealed form.
      HYPER_CHECK_VALUE(sealed_, label_,
                        ": \"metadata_checksum\" must be the last field, written as ",
                        "',\\n \"metadata_checksum\": \"<16 hex digits>\"\\n}\\n'");
      m_.checksummed = true;
    }
  }

  void begin_tensor() {
    tensor_ = Tensor();
    tensor_.name = field_;
    tensor_.tw = str_cat(label_, ": tensor '", field_, "'");
  }

  void check_dtype(const json& dt) {
    HYPER_CHECK_VALUE(dt.is_string(), tensor_.tw, ": dtype is not a string");
    const auto d = dtype_from_name(dt.get<std::string>());
    HYPER_CHECK_VALUE(d.has_value(), tensor_.tw, ": unknown dtype '", dt.get<std::string>(), "'");
    tensor_.t.dtype = *d;
    tensor_.dtype = true;
  }

  void check_shape_field(const json& s) {
    tensor_.t.shape = int_list(s, tensor_.tw + " shape");
    try {
      check_shape(tensor_.t.shape, "shape");
    } catch (const ValueError& e) {
      throw ValueError(str_cat(tensor_.tw, ": ", e.what()));
    }
    tensor_.shape = true;
  }

  void tensor_field(const json& v) {
    if (field_ == "dtype") check_dtype(v);
    else if (field_ == "shape") check_shape_field(v);
  }

  void chunk(json cj) {
    const int64_t ci = tensor_.n_chunks++;
    if (tensor_.dtype && tensor_.shape && tensor_.pending.empty()) {
      tensor_.t.chunks.push_back(chunk_from_json(cj, tensor_.t, str_cat(tensor_.tw, " chunk ", ci)));
    } else {
      tensor_.pending.push_back(std::move(cj));
    }
  }

  void end_tensor() {
    Tensor& t = tensor_;
    HYPER_CHECK_VALUE(t.dtype, t.tw, " lacks \"dtype\"");
    HYPER_CHECK_VALUE(t.shape, t.tw, " lacks \"shape\"");
    HYPER_CHECK_VALUE(t.chunks, t.tw, " lacks \"chunks\"");
    HYPER_CHECK_VALUE(t.chunks_list, t.tw, ": chunks is not a list");
    for (size_t i = 0; i < t.pending.size(); ++i) {
      const size_t ci = t.t.chunks.size();
      t.t.chunks.push_back(chunk_from_json(t.pending[i], t.t, str_cat(t.tw, " chunk ", ci)));
      t.pending[i] = json();
    }
    std::vector<Box> boxes;
    boxes.reserve(t.t.chunks.size());
    for (const auto& c : t.t.chunks) boxes.push_back(c.box);
    try {
      check_chunks_tile(t.t.shape, boxes);
    } catch (const ValueError& e) {
      throw ValueError(str_cat(t.tw, ": ", e.what()));
    }
    m_.tensors.emplace(t.name, std::move(t.t));
    tensor_ = Tensor();
  }

  void finish() {
    HYPER_CHECK_VALUE(format_, label_, " lacks \"format\"");
    HYPER_CHECK_VALUE(version_, label_, " lacks \"version\"");
    HYPER_CHECK_VALUE(tensors_, label_, " lacks \"tensors\"");
    for (const auto& [name, v] : m_.values)
      HYPER_CHECK_VALUE(!m_.tensors.count(name), label_, ": value '", name, "' is also a tensor");
    done_ = true;
  }

  const std::string& label_;
  const bool sealed_;
  Metadata& m_;
  int depth_ = 0;
  bool done_ = false, format_ = false, version_ = false, tensors_ = false;
  std::vector<Frame> frames_;
  Next next_ = Next::kRoot;
  std::string field_;  // the key that named the value being read at a structural level
  Tensor tensor_;
  // The subtree being captured.
  bool cap_ = false;
  Cap cap_kind_ = Cap::kSkip;
  json cap_root_;
  std::vector<CapFrame> cap_stack_;
  std::string cap_key_;  // the key of the next value inside the captured object
};

// A first pass, only for a text that is not sealed yet names "metadata_checksum": finds the
// root's "metadata_checksum" field (if any) and its value, building nothing else, so that a
// misplaced seal is refused before the content is (as a sealed text is checked first).
class RootChecksumFinder {
 public:
  bool null() { return scalar(json(nullptr)); }
  bool boolean(bool v) { return scalar(json(v)); }
  bool number_integer(json::number_integer_t v) { return scalar(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return scalar(json(v)); }
  bool number_float(json::number_float_t v, const json::string_t&) { return scalar(json(v)); }
  bool string(json::string_t& s) { return scalar(json(s)); }
  bool binary(json::binary_t&) { return false; }
  bool start_object(std::size_t) { return open(); }
  bool start_array(std::size_t) { return open(); }
  bool end_object() { return --depth_, true; }
  bool end_array() { return --depth_, true; }
  bool key(json::string_t& k) {
    at_field_ = depth_ == 1 && k == "metadata_checksum";
    if (at_field_) found_ = true;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const json::exception&) { return false; }

  bool found_ = false;
  json value_;  // null when the value is a list or an object

 private:
  bool scalar(json v) {
    if (at_field_ && depth_ == 1) value_ = std::move(v);
    at_field_ = false;
    return true;
  }
  bool open() {
    at_field_ = false;
    ++depth_;
    return depth_ <= kMaxMetadataDepth;  // (deeper: the main pass refuses it)
  }
  int depth_ = 0;
  bool at_field_ = false;
};

bool MetadataReader::key(json::string_t& k) {
  check_length(k, "key");
  if (cap_) {
    CapFrame& top = cap_stack_.back();
    if (top.node != nullptr && !top.keys.insert(k).second) duplicate(k, cap_context());
    // A value is {"<type>": v}: a second key is refused before its value is built.
    HYPER_CHECK_VALUE(!(cap_kind_ == Cap::kValue && cap_stack_.size() == 1 && top.keys.size() > 1),
                      label_, ": value '", field_,
                      "' must be an object with one of \"int\", \"float\", \"bool\", \"str\"");
    cap_key_ = std::move(k);
    return true;
  }
  Frame& f = frames_.back();
  switch (f.level) {
    case Level::kRoot:
      if (!f.keys.insert(k).second) duplicate(k, "");
      if (k == "tensors") {
        next_ = Next::kTensors;
        tensors_ = true;
      } else if (k == "values") {
        next_ = Next::kValues;
      } else if (k == "format" || k == "version" || k == "checksum_algorithm" ||
                 k == "metadata_checksum") {
        next_ = Next::kRootField;
      } else {
        next_ = Next::kSkip;
      }
      break;
    case Level::kTensors:
      if (m_.tensors.count(k)) duplicate(k, str_cat(" (tensor '", k, "' twice in \"tensors\")"));
      next_ = Next::kTensor;
      break;
    case Level::kValues:
      if (m_.values.count(k)) duplicate(k, str_cat(" (value '", k, "' twice in \"values\")"));
      next_ = Next::kValue;
      break;
    case Level::kTensor:
      if (!f.keys.insert(k).second) duplicate(k, str_cat(" (in tensor '", tensor_.name, "')"));
      if (k == "dtype" || k == "shape") {
        next_ = Next::kTensorField;
      } else if (k == "chunks") {
        next_ = Next::kChunks;
        tensor_.chunks = true;
      } else {
        next_ = Next::kSkip;
      }
      break;
    case Level::kChunks:
      break;  // (a list has no keys)
  }
  field_ = std::move(k);
  return true;
}

}  // namespace

Metadata Metadata::from_json(const std::string& text, const std::string& label) {
  Metadata m;
  // The sealed form is checked on the text before it is parsed: a corrupted byte is named
  // as a checksum mismatch, not as whatever the parse would trip on.
  const size_t head = std::strlen(kSealHead), tail = std::strlen(kSealTail);
  const size_t sealed_size = head + 16 + tail;
  const bool sealed = text.size() >= sealed_size &&
                      text.compare(text.size() - sealed_size, head, kSealHead) == 0 &&
                      text.compare(text.size() - tail, tail, kSealTail) == 0;
  if (sealed) {
    const uint64_t want = internal::parse_hex64(
        json(text.substr(text.size() - tail - 16, 16)), label + " metadata_checksum");
    const uint64_t got = xxh3_64(text.data(), static_cast<int64_t>(text.size() - sealed_size));
    HYPER_CHECK_VALUE(got == want, "checksum mismatch in '", label, "': expected ",
                      checksum_hex(want), ", got ", checksum_hex(got),
                      " (the metadata was edited or is corrupted)");
  }
  if (!sealed && text.find("\"metadata_checksum\"") != std::string::npos) {
    RootChecksumFinder finder;
    json::sax_parse(text.data(), text.data() + text.size(), &finder);
    if (finder.found_) {
      internal::parse_hex64(finder.value_, label + " metadata_checksum");
      throw ValueError(str_cat(label, ": \"metadata_checksum\" must be the last field, written as ",
                               "',\\n \"metadata_checksum\": \"<16 hex digits>\"\\n}\\n'"));
    }
  }
  MetadataReader reader(label, sealed, m);
  json::sax_parse(text.data(), text.data() + text.size(), &reader);
  HYPER_CHECK_VALUE(reader.done(), "invalid JSON in ", label, ": incomplete");
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
