# The torch wheel's CUDA libraries, for a C++ program that links the wheel's LibTorch.
#
# Python's `import torch` preloads the CUDA libraries of the nvidia-* wheels; a C++ program has
# no such step. LibTorch's CMake package links CUDA::cudart and CUDA::nvrtc from the CUDA
# toolkit it finds (e.g. /usr/local/cuda, possibly an older minor version), which would load a
# second libcudart.so.13 beside the one libtorch_cuda expects and resolve libtorch_cuda's
# libnccl.so.2 against the toolkit's NCCL at link time. This module, included after
# find_package(Torch):
#   - points CUDA::cudart / CUDA::nvrtc (and TORCH_LIBRARIES' copies of them) at the wheel's
#     libraries where the wheel has them;
#   - sets HYPER_TORCH_WHEEL_CUDA_LIBDIRS (site-packages/nvidia/*/lib) and
#     HYPER_TORCH_WHEEL_NCCL_INCLUDE (the nccl.h that matches the wheel's NCCL: ProcessGroupNCCL's
#     layout depends on NCCL's version macros).
# Used by hyper's own build (HyperTorch.cmake) and by the installed hyperConfig.cmake.
# Does nothing for a LibTorch that is not inside a wheel (no site-packages/nvidia next to it).

set(HYPER_TORCH_WHEEL_CUDA_LIBDIRS "")
set(HYPER_TORCH_WHEEL_NCCL_INCLUDE "")
if(TORCH_INSTALL_PREFIX)
  set(_hyper_torch_root "${TORCH_INSTALL_PREFIX}")
else()
  get_filename_component(_hyper_torch_root "${Torch_DIR}/../../.." ABSOLUTE)
endif()
get_filename_component(_hyper_site "${_hyper_torch_root}/.." ABSOLUTE)
if(EXISTS "${_hyper_site}/nvidia")
  file(GLOB HYPER_TORCH_WHEEL_CUDA_LIBDIRS LIST_DIRECTORIES true "${_hyper_site}/nvidia/*/lib")
  if(EXISTS "${_hyper_site}/nvidia/nccl/include/nccl.h")
    set(HYPER_TORCH_WHEEL_NCCL_INCLUDE "${_hyper_site}/nvidia/nccl/include")
  endif()
  # name of the imported CUDA target -> file name of the wheel's library
  foreach(_hyper_pair IN ITEMS "cudart=libcudart.so" "nvrtc=libnvrtc.so")
    string(REPLACE "=" ";" _hyper_pair "${_hyper_pair}")
    list(GET _hyper_pair 0 _hyper_t)
    list(GET _hyper_pair 1 _hyper_f)
    set(_hyper_found "")
    foreach(_hyper_d IN LISTS HYPER_TORCH_WHEEL_CUDA_LIBDIRS)
      file(GLOB _hyper_cand "${_hyper_d}/${_hyper_f}.[0-9]*")
      list(FILTER _hyper_cand EXCLUDE REGEX "\\.so\\.[0-9]+\\.[0-9]")
      if(_hyper_cand)
        list(GET _hyper_cand 0 _hyper_found)
        break()
      endif()
    endforeach()
    if(_hyper_found AND TARGET CUDA::${_hyper_t})
      get_target_property(_hyper_old CUDA::${_hyper_t} IMPORTED_LOCATION)
      set_target_properties(CUDA::${_hyper_t} PROPERTIES IMPORTED_LOCATION "${_hyper_found}")
      if(_hyper_old AND TORCH_LIBRARIES)
        list(TRANSFORM TORCH_LIBRARIES REPLACE "^${_hyper_old}$" "${_hyper_found}")
      endif()
      # TORCH_LIBRARIES may name the toolkit's unversioned symlink
      if(TORCH_LIBRARIES)
        list(TRANSFORM TORCH_LIBRARIES REPLACE ".*/${_hyper_f}$" "${_hyper_found}")
      endif()
    endif()
  endforeach()
endif()
unset(_hyper_torch_root)
unset(_hyper_site)
unset(_hyper_pair)
unset(_hyper_t)
unset(_hyper_f)
unset(_hyper_found)
unset(_hyper_cand)
unset(_hyper_d)
unset(_hyper_old)

# hyper_torch_wheel_link(<target> <INTERFACE|PUBLIC|PRIVATE> [BUILD_ONLY]): the link-time
# search path for libtorch_cuda's own dependencies (libnccl.so.2 ...) and the run-time path to
# the wheel's CUDA libraries, plus the matching nccl.h ahead of any other. BUILD_ONLY wraps
# them in $<BUILD_INTERFACE:...> (an exported target must not carry this machine's paths; the
# installed hyperConfig.cmake calls this again on the consumer's machine).
function(hyper_torch_wheel_link target scope)
  set(_pre "")
  set(_post "")
  if("${ARGN}" STREQUAL "BUILD_ONLY")
    set(_pre "$<BUILD_INTERFACE:")
    set(_post ">")
  endif()
  foreach(_d IN LISTS HYPER_TORCH_WHEEL_CUDA_LIBDIRS)
    target_link_options(${target} ${scope} "${_pre}LINKER:-rpath-link,${_d}${_post}"
                        "${_pre}LINKER:-rpath,${_d}${_post}")
  endforeach()
  if(HYPER_TORCH_WHEEL_NCCL_INCLUDE)
    target_include_directories(${target} SYSTEM BEFORE ${scope}
                               "${_pre}${HYPER_TORCH_WHEEL_NCCL_INCLUDE}${_post}")
  endif()
endfunction()
