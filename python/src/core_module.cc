// hyper._core: the torch-free core for Python programs that do not use PyTorch (the MindSpore
// backend, python/hyper/mindspore). It needs pybind11, hyper::core and hyper::dcp_storage (the
// checkpoint's files, writer and save protocol); arrays cross as numpy arrays. Placements cross
// as the tuples of placement_tuple.h; layouts as (mesh shape, placements, global shape). hyper's C++ errors become ValueError and
// NotImplementedError with the C++ message; checkpoint errors become _core.SaveError
// (RuntimeError) and _core.IOError (OSError).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/core/geometry.h"
#include "hyper/core/layout.h"
#include "hyper/core/mesh_topology.h"
#include "hyper/core/redistribute_plan.h"
#include "hyper/dcp/reader.h"
#include "hyper/dcp/save_protocol.h"
#include "placement_tuple.h"

namespace py = pybind11;

namespace {

using hyper::Layout;
using hyper::python::placements_of;

Layout layout_of(const std::vector<int64_t>& mesh_shape, const py::sequence& placements,
                 const std::vector<int64_t>& shape) {
  return Layout(hyper::MeshTopology(mesh_shape), placements_of(placements), shape);
}

py::array_t<int64_t> array_of(const std::vector<int64_t>& v) {
  py::array_t<int64_t> a(static_cast<py::ssize_t>(v.size()));
  std::copy(v.begin(), v.end(), a.mutable_data());
  return a;
}

/// Appends to `out` the flat positions, in a local storage holding `region`, of `box`'s
/// elements in row-major order of the box (`box` lies inside region.box).
void append_positions(const hyper::FlatBox& region, const hyper::Box& box,
                      std::vector<int64_t>& out) {
  hyper::for_each_run(region.box.sizes, hyper::relative_to(box, region.box),
                      [&](int64_t off, int64_t len) {
                        for (int64_t k = 0; k < len; ++k)
                          out.push_back(region.local_start + off + k);
                      });
}

/// The global row-major positions of the local storage of mesh index `index`.
py::array_t<int64_t> local_indices(const std::vector<int64_t>& mesh_shape,
                                   const py::sequence& placements,
                                   const std::vector<int64_t>& shape, int64_t index) {
  const Layout layout = layout_of(mesh_shape, placements, shape);
  std::vector<int64_t> idx;
  idx.reserve(static_cast<size_t>(layout.local_numel(index)));
  for (const auto& fb : layout.local_region(index))
    hyper::for_each_run(layout.shape(), fb.box, [&](int64_t off, int64_t len) {
      for (int64_t k = 0; k < len; ++k) idx.push_back(off + k);
    });
  return array_of(idx);
}

py::dict layout_info(const std::vector<int64_t>& mesh_shape, const py::sequence& placements,
                     const std::vector<int64_t>& shape, int64_t index) {
  const Layout layout = layout_of(mesh_shape, placements, shape);
  py::dict d;
  d["local_shape"] = layout.local_shape(index);
  d["local_numel"] = layout.local_numel(index);
  d["partial_zeros"] = layout.holds_partial_zeros(index);
  py::list region;
  for (const auto& fb : layout.local_region(index))
    region.append(py::make_tuple(fb.box.offsets, fb.box.sizes, fb.local_start));
  d["region"] = region;
  d["text"] = layout.to_string();
  py::list placements_out;
  for (const auto& p : layout.placements()) placements_out.append(hyper::python::tuple_of(p));
  d["placements"] = py::tuple(placements_out);
  return d;
}

/// One rank's part of the redistribution src -> dst as index arrays for an executor whose
/// only exchange is "every rank's packed buffer reaches every rank" (an all-gather of
/// buffers padded to `max_send` elements, or one broadcast per sender):
/// - send_idx: the positions in this rank's source storage of every element it sends to any
///   other rank, each once (a piece two ranks need is packed once: every rank receives every
///   packed buffer), in ascending order;
/// - send_totals[r]: elements rank r packs (max_send: their maximum, at least 1);
/// - take_idx / dst_idx: for each element this rank receives or copies locally, in plan
///   order (assign pieces first, then reduce pieces): its position in the virtual buffer
///   [rank 0's packed buffer | ... | rank n-1's | this rank's source storage], each packed
///   buffer max_send elements long, and its position in the target storage. The first
///   n_assign are written, the rest combined with reduce_op (avg: divided by reduce_count);
/// - all_reduce_world: the plan only reduces Partial over every mesh dim that has more
///   than one rank (an all-reduce of the whole world may replace the exchange);
/// - zero_fill: this rank's target storage is zeros (nothing is taken);
/// - sent / received / lower_bound: this rank's element counts of the plan (what hyper
///   moves is counted by the executor).
py::dict exchange_plan(const std::vector<int64_t>& mesh_shape, const py::sequence& src_p,
                       const py::sequence& dst_p, const std::vector<int64_t>& shape,
                       int64_t index) {
  const Layout src = layout_of(mesh_shape, src_p, shape);
  const Layout dst = layout_of(mesh_shape, dst_p, shape);
  const hyper::RedistributePlan plan = hyper::plan_redistribute(src, dst);
  const int64_t n = src.mesh().size();
  HYPER_CHECK_VALUE(index >= 0 && index < n, "mesh index ", index, " outside a mesh of ", n,
                    " ranks");
  std::vector<std::vector<hyper::FlatBox>> src_regions(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) src_regions[r] = src.local_region(r);
  const std::vector<hyper::FlatBox> dst_region = dst.local_region(index);

  // packed[r][s]: where source position s of rank r sits in r's packed buffer (-1: not sent).
  std::vector<std::vector<int64_t>> packed(static_cast<size_t>(n));
  std::vector<int64_t> scratch;
  for (const auto& p : plan.pieces) {
    if (p.is_local()) continue;
    auto& mark = packed[p.src];
    if (mark.empty()) mark.assign(static_cast<size_t>(src.local_numel(p.src)), -1);
    scratch.clear();
    append_positions(src_regions[p.src][p.src_region], p.box, scratch);
    for (int64_t s : scratch) mark[s] = 0;
  }
  std::vector<int64_t> send_totals(static_cast<size_t>(n), 0), send_idx;
  for (int64_t r = 0; r < n; ++r) {
    int64_t next = 0;
    for (size_t s = 0; s < packed[r].size(); ++s) {
      if (packed[r][s] < 0) continue;
      if (r == index) send_idx.push_back(static_cast<int64_t>(s));
      packed[r][s] = next++;
    }
    send_totals[r] = next;
  }
  const int64_t max_send = std::max<int64_t>(
      1, *std::max_element(send_totals.begin(), send_totals.end()));

  std::vector<int64_t> take_idx, dst_idx;
  int64_t n_assign = 0;
  for (const auto& p : plan.pieces) {
    if (p.dst != index) continue;
    scratch.clear();
    append_positions(src_regions[p.src][p.src_region], p.box, scratch);
    for (int64_t s : scratch)
      take_idx.push_back(p.is_local() ? n * max_send + s : p.src * max_send + packed[p.src][s]);
    append_positions(dst_region[p.dst_region], p.box, dst_idx);
    if (!p.reduce) n_assign += p.numel();
  }

  bool all_reduce_world = !plan.all_reduce_dims.empty();
  for (int64_t m = 0; m < src.mesh().ndim(); ++m)
    if (src.mesh().size(m) > 1 &&
        std::find(plan.all_reduce_dims.begin(), plan.all_reduce_dims.end(), m) ==
            plan.all_reduce_dims.end())
      all_reduce_world = false;

  py::dict d;
  d["send_idx"] = array_of(send_idx);
  d["send_totals"] = send_totals;
  d["max_send"] = max_send;
  d["take_idx"] = array_of(take_idx);
  d["dst_idx"] = array_of(dst_idx);
  d["n_assign"] = n_assign;
  d["reduce_op"] = plan.reduce_op;
  d["reduce_count"] = plan.reduce_count;
  d["zero_fill"] = plan.is_zero_fill(index);
  d["all_reduce_world"] = all_reduce_world;
  d["local_only"] = plan.is_local_only();
  d["sent"] = plan.traffic[index].sent;
  d["received"] = plan.traffic[index].received;
  d["lower_bound"] = plan.traffic[index].lower_bound;
  d["dst_local_shape"] = dst.local_shape(index);
  return d;
}

// ---- checkpoint ---------------------------------------------------------------------------

hyper::dcp::DType dtype_of(const std::string& name) {
  const auto d = hyper::dcp::dtype_from_name(name);
  HYPER_CHECK_VALUE(d.has_value(), "unknown checkpoint dtype '", name, "'");
  return *d;
}

std::vector<hyper::FlatBox> region_of(const py::sequence& region) {
  std::vector<hyper::FlatBox> out;
  for (const py::handle h : region) {
    const auto t = py::reinterpret_borrow<py::tuple>(h);
    out.push_back(hyper::FlatBox{hyper::Box(t[0].cast<std::vector<int64_t>>(),
                                            t[1].cast<std::vector<int64_t>>()),
                                 t[2].cast<int64_t>()});
  }
  return out;
}

/// A SaveChannel whose collectives are a Python object's methods: broadcast_text(bytes) ->
/// bytes, all_gather_text(bytes) -> bytes, broadcast_code(int) -> int, failure(what, message)
/// -> str. Python exceptions propagate as pybind11's error_already_set (a std::exception the
/// protocol reports).
class PyChannel final : public hyper::dcp::SaveChannel {
 public:
  explicit PyChannel(py::object obj) : obj_(std::move(obj)) {}
  std::string broadcast_text(const std::string& text) override {
    return obj_.attr("broadcast_text")(py::bytes(text)).cast<std::string>();
  }
  std::string all_gather_text(const std::string& text) override {
    return obj_.attr("all_gather_text")(py::bytes(text)).cast<std::string>();
  }
  int64_t broadcast_code(int64_t code) override {
    return obj_.attr("broadcast_code")(code).cast<int64_t>();
  }
  std::string failure(const char* what, const std::exception& e) const override {
    return obj_.attr("failure")(what, error_text(e)).cast<std::string>();
  }
  /// A Python error as "Type: message" (error_already_set's what() appends a traceback).
  std::string error_text(const std::exception& e) const override {
    if (const auto* pe = dynamic_cast<const py::error_already_set*>(&e))
      return py::str(pe->type().attr("__name__")).cast<std::string>() + ": " +
             py::str(pe->value()).cast<std::string>();
    return e.what();
  }

 private:
  py::object obj_;
};

/// One rank's save: `chunks` are (name, global shape, offsets, sizes, dtype name, contiguous
/// numpy array of the box's elements); `values` a dict of int / float / bool / str.
void dcp_save(const std::string& dir, int rank, int size, const py::list& chunks,
              const py::dict& values, py::object channel, int64_t checksum_block_size) {
  std::vector<hyper::dcp::RawChunk> raw;
  std::vector<py::array> keep;
  for (const py::handle h : chunks) {
    const auto t = py::reinterpret_borrow<py::tuple>(h);
    py::array a = t[5].cast<py::array>();
    HYPER_CHECK_VALUE(a.flags() & py::array::c_style, "chunk of '", t[0].cast<std::string>(),
                      "': the array is not C-contiguous");
    raw.push_back(hyper::dcp::RawChunk{
        t[0].cast<std::string>(), t[1].cast<std::vector<int64_t>>(),
        hyper::Box(t[2].cast<std::vector<int64_t>>(), t[3].cast<std::vector<int64_t>>()),
        dtype_of(t[4].cast<std::string>()), a.data(), static_cast<int64_t>(a.nbytes())});
    keep.push_back(std::move(a));
  }
  hyper::dcp::SaveRequest req;
  req.dir = dir;
  req.rank = rank;
  req.size = size;
  req.checksum_block_size = checksum_block_size;
  req.has_chunks = !raw.empty();
  req.write = [&raw](const std::string& d, const std::string& file,
                     const hyper::dcp::WriteOptions& wo, int64_t* bytes) {
    return hyper::dcp::write_raw_chunks(d, file, raw, wo, bytes);
  };
  for (const auto& [k, v] : values) {
    const std::string name = k.cast<std::string>();
    if (py::isinstance<py::bool_>(v)) req.values.emplace(name, v.cast<bool>());
    else if (py::isinstance<py::int_>(v)) req.values.emplace(name, v.cast<int64_t>());
    else if (py::isinstance<py::float_>(v)) req.values.emplace(name, v.cast<double>());
    else if (py::isinstance<py::str>(v)) req.values.emplace(name, v.cast<std::string>());
    else
      throw hyper::ValueError("checkpoint value '" + name + "' is a " +
                              std::string(py::str(py::type::of(v).attr("__name__"))) +
                              "; values are bool, int, float and str");
  }
  PyChannel ch(std::move(channel));
  hyper::dcp::run_save(req, size > 1 ? &ch : nullptr);
}

py::object value_to_py(const hyper::dcp::Value& v) {
  return std::visit([](const auto& x) -> py::object { return py::cast(x); }, v);
}

void bind_reader(py::module_& m) {
  using hyper::dcp::CheckpointReader;
  py::class_<CheckpointReader>(m, "CheckpointReader")
      .def(py::init([](const std::string& dir, bool verify, bool allow_unchecksummed,
                       int64_t max_metadata_bytes) {
             hyper::dcp::ReadOptions o;
             o.verify_checksums = verify;
             o.allow_unchecksummed = allow_unchecksummed;
             o.max_metadata_bytes = max_metadata_bytes;
             return std::make_unique<CheckpointReader>(dir, o);
           }),
           py::arg("dir"), py::arg("verify") = true, py::arg("allow_unchecksummed") = false,
           py::arg("max_metadata_bytes") = hyper::dcp::kDefaultMaxMetadataBytes)
      .def("tensors",
           [](const CheckpointReader& r) {
             py::dict d;
             for (const auto& [name, t] : r.metadata().tensors)
               d[py::str(name)] = py::make_tuple(hyper::dcp::dtype_name(t.dtype), t.shape);
             return d;
           },
           "{name: (dtype name, global shape)}")
      .def("values",
           [](const CheckpointReader& r) {
             py::dict d;
             for (const auto& [name, v] : r.metadata().values) d[py::str(name)] = value_to_py(v);
             return d;
           })
      .def("verify",
           [](CheckpointReader& r, const std::string& name, const py::sequence& region,
              const std::string& dtype, int64_t nbytes) {
             r.verify(name, region_of(region), dtype_of(dtype), nbytes);
           })
      .def("read_into",
           [](CheckpointReader& r, const std::string& name, const py::sequence& region,
              const std::string& dtype, py::array out, bool verified) {
             HYPER_CHECK_VALUE((out.flags() & py::array::c_style) && out.writeable(),
                               "read_into '", name, "': the array must be C-contiguous and "
                               "writeable");
             const auto reg = region_of(region);
             if (verified)
               r.copy_verified(name, reg, dtype_of(dtype), out.mutable_data(),
                               static_cast<int64_t>(out.nbytes()));
             else
               r.read(name, reg, dtype_of(dtype), out.mutable_data(),
                      static_cast<int64_t>(out.nbytes()));
           },
           py::arg("name"), py::arg("region"), py::arg("dtype"), py::arg("out"),
           py::arg("verified") = false)
      .def("check_unchanged", &CheckpointReader::check_unchanged)
      .def("bytes_read", &CheckpointReader::bytes_read);
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "hyper's torch-free core (use the hyper package, not this module)";
  static py::exception<hyper::SaveError> save_error(m, "SaveError", PyExc_RuntimeError);
  static py::exception<hyper::IOError> io_error(m, "IOError", PyExc_OSError);
  // Module-local: hyper._C (imported beside it where torch is installed) registers its own
  // global translator with exceptions of the same names; calls into _core raise _core's.
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const hyper::ValueError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const hyper::NotImplementedError& e) {
      PyErr_SetString(PyExc_NotImplementedError, e.what());
    } catch (const hyper::SaveError& e) {
      PyErr_SetString(save_error.ptr(), e.what());
    } catch (const hyper::IOError& e) {
      PyErr_SetString(io_error.ptr(), e.what());
    }
  });
  m.def("check_placement",
        [](const py::tuple& p) { return hyper::python::tuple_of(hyper::python::placement_of(p)); },
        "The placement tuple, checked and normalised (ValueError naming a bad one).");
  m.def("layout_info", &layout_info, py::arg("mesh_shape"), py::arg("placements"),
        py::arg("shape"), py::arg("index"));
  m.def("local_indices", &local_indices, py::arg("mesh_shape"), py::arg("placements"),
        py::arg("shape"), py::arg("index"));
  m.def("dcp_save", &dcp_save, py::arg("dir"), py::arg("rank"), py::arg("size"),
        py::arg("chunks"), py::arg("values"), py::arg("channel"),
        py::arg("checksum_block_size") = int64_t{1} << 20);
  bind_reader(m);
  m.def("replica_owner", &hyper::dcp::replica_owner, py::arg("name"), py::arg("replicas"),
        "The replica that writes a replicated tensor: XXH3-64(name) % replicas (as hyper::dcp).");
  m.def("exchange_plan", &exchange_plan, py::arg("mesh_shape"), py::arg("src"), py::arg("dst"),
        py::arg("shape"), py::arg("index"));
}
