# LibTorch as an interface target (hyper_torch_deps).
#
# Where LibTorch comes from, first match wins:
#   1. Torch_DIR or CMAKE_PREFIX_PATH given by the caller;
#   2. the `torch` wheel of HYPER_PYTHON (default: the project's virtual environment
#      <source>/.venv/bin/python, made by scripts/deps.sh), through
#      torch.utils.cmake_prefix_path;
#   3. whatever find_package(Torch CONFIG) finds on the system (Debian's libtorch-dev 1.13).
#
# HYPER_WITH_CUDA (default: ON where the found LibTorch is a CUDA build and nvcc exists) adds
# the NCCL process-group path (USE_C10D_NCCL) and links torch's CUDA libraries.
set(_hyper_default_python "${PROJECT_SOURCE_DIR}/.venv/bin/python")
if(SKBUILD AND Python3_EXECUTABLE)  # pip install .: the interpreter the package is built for
  set(_hyper_default_python "${Python3_EXECUTABLE}")
endif()
set(HYPER_PYTHON "${_hyper_default_python}" CACHE FILEPATH
    "Python whose torch package provides LibTorch (scripts/deps.sh makes it)")

if(NOT Torch_DIR AND EXISTS "${HYPER_PYTHON}")
  execute_process(
    COMMAND "${HYPER_PYTHON}" -c
            "import torch, torch.utils; print(torch.utils.cmake_prefix_path); print(torch.__version__); print(torch.version.cuda or '')"
    OUTPUT_VARIABLE _hyper_torch_out
    RESULT_VARIABLE _hyper_torch_rc
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(_hyper_torch_rc EQUAL 0)
    string(REPLACE "\n" ";" _hyper_torch_out "${_hyper_torch_out}")
    list(GET _hyper_torch_out 0 _hyper_torch_prefix)
    list(GET _hyper_torch_out 1 HYPER_TORCH_WHEEL_VERSION)
    list(APPEND CMAKE_PREFIX_PATH "${_hyper_torch_prefix}")
    set(Torch_DIR "${_hyper_torch_prefix}/Torch" CACHE PATH "LibTorch's CMake package" FORCE)
  else()
    message(WARNING "${HYPER_PYTHON} has no usable torch package; looking for LibTorch elsewhere")
  endif()
endif()

# Torch's CUDA build looks for the CUDA toolkit; point it at nvcc when one is on the machine.
find_program(HYPER_NVCC nvcc HINTS /usr/local/cuda/bin)
if(HYPER_NVCC AND NOT CUDAToolkit_ROOT)
  get_filename_component(_hyper_cuda_bin "${HYPER_NVCC}" DIRECTORY)
  get_filename_component(CUDAToolkit_ROOT "${_hyper_cuda_bin}" DIRECTORY)
  if(NOT CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_COMPILER "${HYPER_NVCC}")
  endif()
endif()

find_package(Torch REQUIRED CONFIG)
include(hyperTorchWheel)
# For hyperConfig.cmake: where this LibTorch and CUDA toolkit are.
get_filename_component(HYPER_TORCH_CMAKE_DIR "${Torch_DIR}" ABSOLUTE)
get_filename_component(HYPER_TORCH_PREFIX "${HYPER_TORCH_CMAKE_DIR}/.." ABSOLUTE)
set(HYPER_CUDA_ROOT "${CUDAToolkit_ROOT}")
set(HYPER_TORCH_VERSION "${Torch_VERSION}")
if(NOT HYPER_TORCH_VERSION AND HYPER_TORCH_WHEEL_VERSION)
  set(HYPER_TORCH_VERSION "${HYPER_TORCH_WHEEL_VERSION}")
endif()

# A CUDA build of LibTorch links torch_cuda (TORCH_LIBRARIES names it).
set(_hyper_torch_has_cuda OFF)
if(TARGET torch_cuda OR "${TORCH_LIBRARIES}" MATCHES "torch_cuda")
  set(_hyper_torch_has_cuda ON)
endif()
# HYPER_WITH_CUDA follows the LibTorch: a CUDA build's own targets (torch_cuda) define
# USE_C10D_NCCL for everything that links torch, so the NCCL path is compiled whatever this
# says; OFF is for a CPU-only LibTorch.
option(HYPER_WITH_CUDA "CUDA tensors and the NCCL process-group path" ${_hyper_torch_has_cuda})
if(HYPER_WITH_CUDA AND NOT _hyper_torch_has_cuda)
  message(FATAL_ERROR "HYPER_WITH_CUDA=ON but LibTorch at ${Torch_DIR} is not a CUDA build")
endif()
if(NOT HYPER_WITH_CUDA AND _hyper_torch_has_cuda)
  message(WARNING "HYPER_WITH_CUDA=OFF has no effect with a CUDA build of LibTorch (${Torch_DIR}): "
                  "its targets define USE_C10D_NCCL; building the CUDA configuration")
  set(HYPER_WITH_CUDA ON CACHE BOOL "CUDA tensors and the NCCL process-group path" FORCE)
endif()
message(STATUS "hyper: LibTorch ${HYPER_TORCH_VERSION} from ${Torch_DIR} "
               "(CUDA build: ${_hyper_torch_has_cuda}; HYPER_WITH_CUDA=${HYPER_WITH_CUDA})")

# Gloo: LibTorch's c10d headers include <gloo/...>; the torch wheel does not ship them, so
# Debian's libgloo-dev provides the headers. Its library is never linked: the gloo symbols
# hyper calls are those inside libtorch_cpu (one copy of gloo in the process).
find_path(HYPER_GLOO_INCLUDE_DIR gloo/allgatherv.h PATHS /usr/include /usr/local/include)
if(NOT HYPER_GLOO_INCLUDE_DIR)
  message(FATAL_ERROR "gloo headers not found (Debian: libgloo-dev): LibTorch's "
                      "ProcessGroupGloo.hpp includes them")
endif()

if(NOT TARGET hyper_torch_deps)
  add_library(hyper_torch_deps INTERFACE)
  # LibTorch headers are system headers: our warnings stay ours.
  target_include_directories(hyper_torch_deps SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
  target_link_libraries(hyper_torch_deps INTERFACE ${TORCH_LIBRARIES})
  hyper_torch_wheel_link(hyper_torch_deps INTERFACE BUILD_ONLY)
  target_compile_definitions(hyper_torch_deps INTERFACE USE_C10D_GLOO)
  if(HYPER_WITH_CUDA)
    target_compile_definitions(hyper_torch_deps INTERFACE USE_C10D_NCCL HYPER_WITH_CUDA=1)
  endif()
  set_property(GLOBAL APPEND PROPERTY HYPER_EXPORTED_TARGETS hyper_torch_deps)
endif()
