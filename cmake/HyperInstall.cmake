# Installation and the CMake package (find_package(hyper CONFIG)).
#
# Included at the end of the top CMakeLists.txt, after every layer has been added, so that
# the global property HYPER_EXPORTED_TARGETS (filled by hyper_add_library and HyperTorch.cmake)
# is complete. Installs:
#   include/hyper/...              public headers (no internal/, testing*, *_test*)
#   lib/libhyper_<layer>.a         every exported target, export set hyperTargets, namespace hyper::
#   lib/cmake/hyper/               hyperTargets.cmake, hyperConfig.cmake, hyperConfigVersion.cmake
# and defines hyper::hyper, the umbrella target linking every layer.

set(HYPER_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/hyper" CACHE STRING
    "Where hyperConfig.cmake is installed (relative to the prefix)")

get_property(_hyper_targets GLOBAL PROPERTY HYPER_EXPORTED_TARGETS)
list(REMOVE_DUPLICATES _hyper_targets)

# --- hyper::hyper: umbrella over every layer -------------------------------------------------
# Links every exported target named hyper_*, so it grows as layers are added.
add_library(hyper_all INTERFACE)
add_library(hyper::hyper ALIAS hyper_all)
set_target_properties(hyper_all PROPERTIES EXPORT_NAME hyper)
foreach(_t IN LISTS _hyper_targets)
  if(_t MATCHES "^hyper_")
    target_link_libraries(hyper_all INTERFACE ${_t})
  endif()
endforeach()

# --- hyper_torch_deps: LibTorch as seen by the installed package -----------------------------
# In the build tree hyper_torch_deps carries ${TORCH_INCLUDE_DIRS} and ${TORCH_LIBRARIES}
# (imported targets `torch`, `torch_library` plus absolute library paths such as libc10.so).
# Installed, it must not hard-code this machine's paths: its install interface links only the
# imported targets named in TORCH_LIBRARIES. hyperConfig.cmake runs find_dependency(Torch)
# before loading hyperTargets.cmake, which re-creates those targets in the consumer; `torch`
# carries the include dirs (as system headers), the ABI flag and c10 transitively.
# USE_C10D_GLOO is kept as is.
if(TARGET hyper_torch_deps)
  set_target_properties(hyper_torch_deps PROPERTIES EXPORT_NAME torch_deps)
  get_target_property(_libs hyper_torch_deps INTERFACE_LINK_LIBRARIES)
  get_target_property(_incs hyper_torch_deps INTERFACE_INCLUDE_DIRECTORIES)
  get_target_property(_sys hyper_torch_deps INTERFACE_SYSTEM_INCLUDE_DIRECTORIES)
  set(_new_libs "")
  foreach(_l IN LISTS _libs)
    list(APPEND _new_libs "$<BUILD_INTERFACE:${_l}>")
    if(TARGET "${_l}")
      list(APPEND _new_libs "$<INSTALL_INTERFACE:${_l}>")
    endif()
  endforeach()
  set_property(TARGET hyper_torch_deps PROPERTY INTERFACE_LINK_LIBRARIES "${_new_libs}")
  foreach(_prop_var IN ITEMS _incs _sys)
    if(${_prop_var})
      set(_wrapped "")
      foreach(_d IN LISTS ${_prop_var})
        list(APPEND _wrapped "$<BUILD_INTERFACE:${_d}>")
      endforeach()
      set(${_prop_var} "${_wrapped}")
    endif()
  endforeach()
  if(_incs)
    set_property(TARGET hyper_torch_deps PROPERTY INTERFACE_INCLUDE_DIRECTORIES "${_incs}")
  endif()
  if(_sys)
    set_property(TARGET hyper_torch_deps PROPERTY INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${_sys}")
  endif()
endif()

# --- Which third-party packages the exported targets need ------------------------------------
# Scan the link interfaces (for static libraries, private deps are exported too, as
# $<LINK_ONLY:...>) so hyperConfig.cmake calls find_dependency only for what is used.
set(HYPER_NEEDS_NLOHMANN_JSON OFF)
set(HYPER_NEEDS_THREADS OFF)
set(HYPER_NEEDS_CAIRO OFF)
foreach(_t IN LISTS _hyper_targets)
  get_target_property(_type ${_t} TYPE)
  get_target_property(_link ${_t} INTERFACE_LINK_LIBRARIES)
  if(NOT _type STREQUAL "INTERFACE_LIBRARY")
    get_target_property(_priv ${_t} LINK_LIBRARIES)
    list(APPEND _link ${_priv})
  endif()
  foreach(_l IN LISTS _link)
    if(_l MATCHES "nlohmann_json::")
      set(HYPER_NEEDS_NLOHMANN_JSON ON)
    elseif(_l MATCHES "Threads::")
      set(HYPER_NEEDS_THREADS ON)
    elseif(_l MATCHES "PkgConfig::HYPER_CAIRO")
      set(HYPER_NEEDS_CAIRO ON)
    elseif(_l MATCHES "^(\\$<[A-Z_]+:)?([A-Za-z0-9_]+)::" AND NOT CMAKE_MATCH_2 MATCHES "^hyper$")
      message(WARNING "hyper: exported target ${_t} links ${_l}; teach "
                      "cmake/HyperInstall.cmake and cmake/hyperConfig.cmake.in to find it")
    endif()
  endforeach()
endforeach()

# --- Headers -----------------------------------------------------------------------------------
# Public headers keep their directories. Not installed: internal/ (private by convention),
# testing/ and testing_*.h (gtest-based harnesses and test helpers, whose code is not installed
# either) and *_test* files. Without LibTorch only the core's headers are installed: the other
# layers' headers (and <hyper/hyper.h>) need LibTorch and their libraries are not built; the
# torch-free trace module's are installed with the core's.
set(_hyper_header_args FILES_MATCHING PATTERN "*.h"
    PATTERN "internal" EXCLUDE PATTERN "testing*" EXCLUDE PATTERN "*_test*" EXCLUDE)
if(HYPER_WITH_TORCH)
  install(DIRECTORY "${PROJECT_SOURCE_DIR}/hyper/"
          DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/hyper" ${_hyper_header_args})
else()
  install(FILES "${PROJECT_SOURCE_DIR}/hyper/core.h"
          DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/hyper" OPTIONAL)
  install(DIRECTORY "${PROJECT_SOURCE_DIR}/hyper/core/"
          DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/hyper/core" ${_hyper_header_args})
  install(FILES "${PROJECT_SOURCE_DIR}/hyper/trace.h"
          DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/hyper")
  install(DIRECTORY "${PROJECT_SOURCE_DIR}/hyper/trace/"
          DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/hyper/trace" ${_hyper_header_args})
endif()

# --- Targets and the package -------------------------------------------------------------------
install(TARGETS ${_hyper_targets} hyper_all
  EXPORT hyperTargets
  ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}"
  LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}"
  RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
# (include/ reaches consumers through hyper_add_library's $<INSTALL_INTERFACE:include>.)
install(EXPORT hyperTargets
  NAMESPACE hyper::
  FILE hyperTargets.cmake
  DESTINATION "${HYPER_INSTALL_CMAKEDIR}")

configure_package_config_file(
  "${CMAKE_CURRENT_LIST_DIR}/hyperConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/hyperConfig.cmake"
  INSTALL_DESTINATION "${HYPER_INSTALL_CMAKEDIR}")
# 0.x: minor versions may break the API.
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/hyperConfigVersion.cmake"
  VERSION "${PROJECT_VERSION}"
  COMPATIBILITY SameMinorVersion)
install(FILES
  "${CMAKE_CURRENT_LIST_DIR}/hyperTorchWheel.cmake"
  "${PROJECT_BINARY_DIR}/hyperConfig.cmake"
  "${PROJECT_BINARY_DIR}/hyperConfigVersion.cmake"
  DESTINATION "${HYPER_INSTALL_CMAKEDIR}")

unset(_hyper_targets)
unset(_hyper_header_args)
