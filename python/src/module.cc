// hyper._C: the C++ side of the Python package (python/hyper/*.py wraps it). Tensors cross as
// torch.Tensor objects (torch's own pybind11 casters); a DTensor crosses as the at::Tensor
// wrapper of the dispatcher (hyper/tensor/dtensor_tensor.h), so torch ops on it run hyper's
// sharding rules in C++. Placements cross as tuples: ("S", dim), ("R",), ("P", op),
// ("RS", dims, units). Every call that may communicate releases the GIL. hyper's C++ errors
// become ValueError, NotImplementedError, hyper.CommError (RuntimeError), hyper.SaveError
// (RuntimeError) and hyper.IOError (OSError) with the C++ message.
#include <torch/csrc/utils/pybind.h>

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "hyper/comm/c10d_interop.h"
#include "hyper/comm/device_mesh.h"
#include "hyper/comm/world.h"
#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/core/placement.h"
#include "hyper/dcp/state_dict.h"
#include "hyper/fsdp/flat_bucket.h"
#include "hyper/tensor/dtensor.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "placement_tuple.h"

namespace py = pybind11;

namespace {

using hyper::DeviceMesh;
using hyper::DTensor;
using hyper::Placement;
using hyper::Placements;

using hyper::python::placement_of;
using hyper::python::placements_of;
using hyper::python::tuple_of;

std::optional<Placements> opt_placements(const std::optional<py::sequence>& s) {
  if (!s) return std::nullopt;
  return placements_of(*s);
}

hyper::ProcessGroupOptions options_of(const std::optional<double>& timeout_s) {
  hyper::ProcessGroupOptions o;
  if (timeout_s)
    o.timeout = std::chrono::milliseconds(static_cast<int64_t>(*timeout_s * 1000.0));
  return o;
}

std::string mesh_repr(const DeviceMesh& m) {
  std::ostringstream os;
  os << "DeviceMesh(" << (m.device_type() == c10::DeviceType::CUDA ? "'cuda'" : "'cpu'") << ", "
     << hyper::shape_to_string(m.topology().shape());
  if (!m.topology().names().empty()) {
    os << ", mesh_dim_names=(";
    for (size_t i = 0; i < m.topology().names().size(); ++i)
      os << (i ? ", " : "") << "'" << m.topology().names()[i] << "'";
    os << (m.topology().names().size() == 1 ? ",)" : ")");
  }
  os << ")";
  return os.str();
}

PyObject* g_comm_error = nullptr;
PyObject* g_save_error = nullptr;
PyObject* g_io_error = nullptr;

/// The one table of hyper's C++ error types and their Python exceptions: the Python type of
/// `error` and its message, or nullptr for an error that is not one of hyper's.
PyObject* python_type_of(std::exception_ptr error, std::string* what) {
  try {
    std::rethrow_exception(error);
  } catch (const hyper::ValueError& e) {
    *what = e.what();
    return PyExc_ValueError;
  } catch (const hyper::NotImplementedError& e) {
    *what = e.what();
    return PyExc_NotImplementedError;
  } catch (const hyper::CommError& e) {
    *what = e.what();
    return g_comm_error;
  } catch (const hyper::SaveError& e) {
    *what = e.what();
    return g_save_error;
  } catch (const hyper::IOError& e) {
    *what = e.what();
    return g_io_error;
  } catch (...) {
    return nullptr;
  }
}

/// An error of hyper's C++ types as the exception torch's Python bindings turn into the
/// Python one: c10's ValueError / NotImplementedError (mapped by torch itself), or a
/// python_error holding hyper's Python exception. Other errors: unchanged (returns).
void translate_kernel_error(std::exception_ptr error) {
  std::string what;
  PyObject* type = python_type_of(error, &what);
  if (type == nullptr) return;
  const c10::SourceLocation here{__func__, __FILE__, static_cast<uint32_t>(__LINE__)};
  if (type == PyExc_ValueError) throw c10::ValueError(here, what);
  if (type == PyExc_NotImplementedError) throw c10::NotImplementedError(here, what);
  pybind11::gil_scoped_acquire gil;
  PyErr_SetString(type, what.c_str());
  python_error e;
  e.persist();
  throw e;
}

/// A flat Python state dict (name -> tensor / DTensor / bool / int / float / str) as a
/// StateDict. DTensors enter as their handles on the same local storage (load writes there).
hyper::dcp::StateDict state_dict_of(const py::dict& d) {
  hyper::dcp::StateDict sd;
  at::NoGradGuard no_grad;  // the handles hold the wrappers' own local tensors
  for (const auto& [k, v] : d) {
    const std::string name = py::cast<std::string>(k);
    if (THPVariable_Check(v.ptr())) {
      const at::Tensor t = THPVariable_Unpack(v.ptr());
      if (hyper::is_dtensor(t))
        sd.emplace(name, hyper::as_dtensor(t));
      else
        sd.emplace(name, t);
    } else if (py::isinstance<py::bool_>(v)) {
      sd.emplace(name, v.cast<bool>());
    } else if (py::isinstance<py::int_>(v)) {
      sd.emplace(name, v.cast<int64_t>());
    } else if (py::isinstance<py::float_>(v)) {
      sd.emplace(name, v.cast<double>());
    } else if (py::isinstance<py::str>(v)) {
      sd.emplace(name, v.cast<std::string>());
    } else {
      throw hyper::ValueError("hyper.dcp: entry '" + name + "' is a " +
                              std::string(py::str(py::type::of(v).attr("__name__"))) +
                              "; a state dict holds tensors, hyper DTensors, bool, int, float "
                              "and str");
    }
  }
  return sd;
}

hyper::dcp::SaveOptions save_options(const std::optional<hyper::World>& world) {
  hyper::dcp::SaveOptions o;
  o.world = world;
  return o;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "hyper's C++ core (use the hyper package, not this module)";

  // Errors: hyper's C++ types as Python exceptions, with the C++ message.
  static py::exception<hyper::CommError> comm_error(m, "CommError", PyExc_RuntimeError);
  static py::exception<hyper::SaveError> save_error(m, "SaveError", PyExc_RuntimeError);
  static py::exception<hyper::IOError> io_error(m, "IOError", PyExc_OSError);
  g_comm_error = comm_error.ptr();
  g_save_error = save_error.ptr();
  g_io_error = io_error.ptr();
  // Errors of torch ops on DTensors: hyper's kernels run inside torch's bindings.
  hyper::set_kernel_error_hook(&translate_kernel_error);
  py::register_exception_translator([](std::exception_ptr p) {
    std::string what;
    if (PyObject* type = p ? python_type_of(p, &what) : nullptr) {
      PyErr_SetString(type, what.c_str());
      return;
    }
    if (p) std::rethrow_exception(p);  // not hyper's: the next translator's
  });

  py::class_<DeviceMesh>(m, "DeviceMesh")
      .def_property_readonly("ndim", &DeviceMesh::ndim)
      .def_property_readonly("shape", [](const DeviceMesh& d) { return d.topology().shape(); })
      .def_property_readonly("mesh_dim_names",
                             [](const DeviceMesh& d) -> std::optional<std::vector<std::string>> {
                               if (d.topology().names().empty()) return std::nullopt;
                               return d.topology().names();
                             })
      .def_property_readonly("device_type",
                             [](const DeviceMesh& d) {
                               return d.device_type() == c10::DeviceType::CUDA ? "cuda" : "cpu";
                             })
      .def("get_group",
           [](const DeviceMesh& d, int64_t dim) {
             return hyper::comm::process_group_of(d.get_group(dim));
           },
           "The c10d process group of mesh dim `dim` on this rank (a torch "
           "ProcessGroup: torch's own for a mesh from DeviceMesh.from_torch).",
           py::arg("mesh_dim") = 0)
      .def("size", [](const DeviceMesh& d, std::optional<int64_t> dim) {
             return dim ? d.size(*dim) : d.size();
           }, py::arg("mesh_dim") = py::none())
      .def("get_rank", &DeviceMesh::get_rank)
      .def("get_coordinate", &DeviceMesh::get_coordinate)
      .def("get_local_rank",
           [](const DeviceMesh& d, const py::object& dim) {
             if (dim.is_none()) return d.get_local_rank(0);
             if (py::isinstance<py::str>(dim)) return d.get_local_rank(dim.cast<std::string>());
             return d.get_local_rank(dim.cast<int64_t>());
           },
           py::arg("mesh_dim") = py::none())
      .def("__getitem__",
           [](const DeviceMesh& d, const py::object& dim) {
             if (py::isinstance<py::str>(dim)) return d[dim.cast<std::string>()];
             return d[dim.cast<int64_t>()];
           })
      .def("__eq__", [](const DeviceMesh& a, const DeviceMesh& b) { return a == b; })
      .def("__hash__", [](const DeviceMesh& d) { return std::hash<std::string>()(mesh_repr(d)); })
      .def("__repr__", &mesh_repr);

  m.def("quiesce_gloo_workers",
        [](double bound_s) {
          return hyper::comm::quiesce_gloo_workers(std::chrono::milliseconds(
              static_cast<int64_t>(bound_s * 1000)));
        },
        "Waits (at most bound_s) until the Gloo workers of every group hyper wraps hold no "
        "work (hyper::comm::quiesce_gloo_workers); run at exit.",
        py::arg("bound_s"), py::call_guard<py::gil_scoped_release>());
  m.def("track_gloo_workers",
        [](const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
          hyper::comm::track_gloo_workers(*pg);
        },
        "Adds a process group's Gloo workers to those quiesce_gloo_workers waits for.",
        py::arg("group"));

  py::class_<hyper::World>(m, "World")
      .def_property_readonly("rank", &hyper::World::rank)
      .def_property_readonly("size", &hyper::World::size);
  m.def("make_world",
        [](const c10::intrusive_ptr<c10d::Store>& store, const std::string& prefix, int rank,
           int world_size, std::optional<double> timeout_s) {
          auto scoped = c10::make_intrusive<c10d::PrefixStore>(prefix, store);
          return hyper::make_world(scoped, rank, world_size, options_of(timeout_s));
        },
        "hyper's World over torch.distributed's store, its keys under `prefix` (no second "
        "rendezvous).",
        py::arg("store"), py::arg("prefix"), py::arg("rank"), py::arg("world_size"),
        py::arg("timeout_s"), py::call_guard<py::gil_scoped_release>());
  m.def("mesh_from_process_groups",
        [](const hyper::World& world, const std::string& device_type, std::vector<int64_t> shape,
           std::vector<std::string> names,
           std::vector<c10::intrusive_ptr<c10d::ProcessGroup>> groups,
           std::vector<std::vector<int>> global_ranks) {
          return hyper::mesh_from_process_groups(world, device_type, std::move(shape),
                                                 std::move(names), std::move(groups),
                                                 std::move(global_ranks));
        },
        "A mesh on torch.distributed's process groups, one per mesh dim (this rank's, with "
        "its members' global ranks).",
        py::arg("world"), py::arg("device_type"), py::arg("shape"), py::arg("names"),
        py::arg("groups"), py::arg("global_ranks"), py::call_guard<py::gil_scoped_release>());
  m.def("init_world_from_env",
        [](std::optional<double> timeout_s) {
          try {
            return hyper::default_world();
          } catch (const hyper::ValueError&) {
            return hyper::init_process_group(options_of(timeout_s));
          }
        },
        "hyper's default World, joined from torchrun's / hyperrun's environment once.",
        py::arg("timeout_s"), py::call_guard<py::gil_scoped_release>());
  m.def("init_device_mesh",
        [](const hyper::World& world, const std::string& device_type, std::vector<int64_t> shape,
           std::vector<std::string> names) {
          return hyper::init_device_mesh(world, device_type, std::move(shape), std::move(names));
        },
        py::arg("world"), py::arg("device_type"), py::arg("shape"), py::arg("names"),
        py::call_guard<py::gil_scoped_release>());

  m.def("mesh_world", [](const DeviceMesh& d) { return d.world(); });

  // Checkpoints (hyper.dcp): the C++ save / async_save / load on a flat state dict.
  m.def("dcp_save",
        [](const py::dict& state, const std::string& dir, std::optional<hyper::World> world) {
          const hyper::dcp::StateDict sd = state_dict_of(state);
          py::gil_scoped_release no_gil;
          hyper::dcp::save(sd, dir, save_options(world));
        },
        py::arg("state"), py::arg("dir"), py::arg("world"));
  py::class_<hyper::dcp::AsyncSaveHandle>(m, "AsyncSaveHandle")
      .def("wait", &hyper::dcp::AsyncSaveHandle::wait, py::call_guard<py::gil_scoped_release>())
      .def("done", &hyper::dcp::AsyncSaveHandle::done);
  m.def("dcp_async_save",
        [](const py::dict& state, const std::string& dir, std::optional<hyper::World> world) {
          const hyper::dcp::StateDict sd = state_dict_of(state);
          py::gil_scoped_release no_gil;
          return std::make_unique<hyper::dcp::AsyncSaveHandle>(
              hyper::dcp::async_save(sd, dir, save_options(world)));
        },
        py::arg("state"), py::arg("dir"), py::arg("world"));
  m.def("dcp_load",
        [](py::dict state, const std::string& dir, bool verify_checksums) {
          hyper::dcp::StateDict sd = state_dict_of(state);
          hyper::dcp::LoadOptions o;
          o.verify_checksums = verify_checksums;
          hyper::dcp::LoadStats stats;
          {
            py::gil_scoped_release no_gil;
            stats = hyper::dcp::load(sd, dir, o);
          }
          // Values are replaced (tensors were loaded in place).
          for (const auto& [name, v] : sd) {
            if (const auto* b = std::get_if<bool>(&v)) state[py::str(name)] = *b;
            else if (const auto* i = std::get_if<int64_t>(&v)) state[py::str(name)] = *i;
            else if (const auto* f = std::get_if<double>(&v)) state[py::str(name)] = *f;
            else if (const auto* str = std::get_if<std::string>(&v)) state[py::str(name)] = *str;
          }
          return py::make_tuple(stats.bytes_read, stats.bytes_needed);
        },
        py::arg("state"), py::arg("dir"), py::arg("verify_checksums"));

  m.def("is_dtensor", [](const at::Tensor& t) { return hyper::is_dtensor(t); });
  m.def("placements", [](const at::Tensor& t) {
    const Placements& ps = hyper::as_dtensor(t).placements();
    py::list l;
    for (const Placement& p : ps) l.append(tuple_of(p));
    return py::tuple(l);
  });
  m.def("device_mesh", [](const at::Tensor& t) { return hyper::as_dtensor(t).device_mesh(); });
  m.def("local_shape", [](const at::Tensor& t) { return hyper::as_dtensor(t).local_shape(); });
  m.def("is_pending", [](const at::Tensor& t) { return hyper::as_dtensor(t).is_pending(); });
  m.def("describe", [](const at::Tensor& t) { return hyper::as_dtensor(t).to_string(); });

  m.def("from_local",
        [](const at::Tensor& local, const DeviceMesh& mesh, const py::sequence& placements,
           std::optional<std::vector<int64_t>> shape, bool run_check) {
          const Placements ps = placements_of(placements);
          py::gil_scoped_release no_gil;
          return hyper::as_tensor(DTensor::from_local(local, mesh, ps, std::move(shape), run_check));
        },
        py::arg("local"), py::arg("mesh"), py::arg("placements"), py::arg("shape"),
        py::arg("run_check"));
  m.def("distribute_tensor",
        [](const at::Tensor& global, const DeviceMesh& mesh, const py::sequence& placements,
           std::optional<int> src_data_rank) {
          const Placements ps = placements_of(placements);
          py::gil_scoped_release no_gil;
          return hyper::as_tensor(hyper::distribute_tensor(global, mesh, ps, src_data_rank));
        },
        py::arg("tensor"), py::arg("mesh"), py::arg("placements"), py::arg("src_data_rank"));
  m.def("to_local",
        [](const at::Tensor& t, const std::optional<py::sequence>& grad_placements) {
          const std::optional<Placements> g = opt_placements(grad_placements);
          py::gil_scoped_release no_gil;
          return hyper::as_dtensor(t).to_local(g);
        },
        py::arg("t"), py::arg("grad_placements"));
  m.def("full_tensor",
        [](const at::Tensor& t, const std::optional<py::sequence>& grad_placements) {
          const std::optional<Placements> g = opt_placements(grad_placements);
          py::gil_scoped_release no_gil;
          return hyper::as_dtensor(t).full_tensor(g);
        },
        py::arg("t"), py::arg("grad_placements"));
  m.def("redistribute",
        [](const at::Tensor& t, const DeviceMesh& mesh, const py::sequence& placements,
           bool async_op) {
          const Placements ps = placements_of(placements);
          py::gil_scoped_release no_gil;
          return hyper::as_tensor(hyper::as_dtensor(t).redistribute(mesh, ps, async_op));
        },
        py::arg("t"), py::arg("mesh"), py::arg("placements"), py::arg("async_op"));
  m.def("wait",
        [](const at::Tensor& t) {
          py::gil_scoped_release no_gil;
          hyper::as_dtensor(t).wait();
        },
        py::arg("t"));
  // A pending collective's handle: wait() returns its result (the GIL released meanwhile).
  py::class_<hyper::comm::Work>(m, "Work")
      .def("wait",
           [](const hyper::comm::Work& w) {
             py::gil_scoped_release no_gil;
             return w.wait();
           })
      .def("is_completed", &hyper::comm::Work::is_completed);

  // One fully-sharded bucket's storage (hyper/fsdp/flat_bucket.h); hyper.fsdp drives it.
  using hyper::fsdp::FlatBucket;
  py::class_<FlatBucket>(m, "FlatBucket")
      .def(py::init([](const DeviceMesh& mesh, const std::vector<at::Tensor>& params,
                       int64_t block, int64_t shard_dim) {
             py::gil_scoped_release no_gil;
             return std::make_unique<FlatBucket>(mesh, params, block, shard_dim);
           }),
           py::arg("mesh"), py::arg("params"), py::arg("block"), py::arg("shard_dim") = -1)
      .def_property_readonly("plan", [](const FlatBucket& b) { return b.plan().to_string(); })
      .def_property_readonly("rank_units", [](const FlatBucket& b) { return b.plan().rank_units(); })
      .def_property_readonly("numel", [](const FlatBucket& b) { return b.plan().numel(); })
      .def_property_readonly("shard", &FlatBucket::shard)
      .def_property_readonly("copied_bytes", &FlatBucket::copied_bytes)
      .def("param_over",
           [](const FlatBucket& b, int64_t p, const at::Tensor& flat) {
             return hyper::as_tensor(b.param_over(p, flat));
           },
           py::arg("p"), py::arg("flat"))
      .def("unshard_async",
           [](const FlatBucket& b, std::optional<at::Tensor> output,
              std::optional<at::Tensor> source) {
             py::gil_scoped_release no_gil;
             return b.unshard_async(std::move(output), std::move(source));
           },
           py::arg("output") = py::none(), py::arg("source") = py::none())
      .def("views", &FlatBucket::views, py::arg("full"))
      .def("reduce_scatter_grads_async",
           [](const FlatBucket& b, const std::vector<std::optional<at::Tensor>>& grads,
              const std::string& op, std::optional<at::Tensor> output) {
             std::vector<at::Tensor> gs;
             for (const auto& g : grads) gs.push_back(g ? *g : at::Tensor());
             HYPER_CHECK_VALUE(op == "sum" || op == "avg", "FlatBucket reduce_scatter_grads: op '",
                               op, "' (expected 'sum' or 'avg')");
             py::gil_scoped_release no_gil;
             return b.reduce_scatter_grads_async(
                 gs, op == "sum" ? hyper::comm::ReduceOp::kSum : hyper::comm::ReduceOp::kAvg,
                 std::move(output));
           },
           py::arg("grads"), py::arg("op"), py::arg("output") = py::none());

  m.def("check_placement", [](const py::tuple& p) { return tuple_of(placement_of(p)); },
        "The placement tuple as C++ reads it (its checks run: ValueError).");
}
