# LibTorch (Debian's libtorch-dev 1.13, or any 2.x) as an interface target.
find_package(Torch REQUIRED CONFIG)
if(NOT TARGET hyper_torch_deps)
  add_library(hyper_torch_deps INTERFACE)
  # LibTorch headers are system headers: our warnings stay ours.
  target_include_directories(hyper_torch_deps SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
  target_link_libraries(hyper_torch_deps INTERFACE ${TORCH_LIBRARIES})
  target_compile_definitions(hyper_torch_deps INTERFACE USE_C10D_GLOO)
  set_property(GLOBAL APPEND PROPERTY HYPER_EXPORTED_TARGETS hyper_torch_deps)
endif()
