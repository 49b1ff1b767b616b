# Helper functions, one per target kind. Every hyper target gets -Wall -Wextra;
# third-party headers (LibTorch, gtest) come in as system headers.

set(HYPER_WARNINGS -Wall -Wextra -Wno-unused-parameter)

# hyper_add_library(NAME <layer> SOURCES ... [PUBLIC_DEPS ...] [PRIVATE_DEPS ...])
# Creates target hyper_<layer>, alias hyper::<layer>, exported as hyper::<layer>.
function(hyper_add_library)
  cmake_parse_arguments(A "" "NAME" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  set(t hyper_${A_NAME})
  add_library(${t} ${A_SOURCES})
  add_library(hyper::${A_NAME} ALIAS ${t})
  set_target_properties(${t} PROPERTIES EXPORT_NAME ${A_NAME} OUTPUT_NAME hyper_${A_NAME})
  target_include_directories(${t} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_compile_features(${t} PUBLIC cxx_std_17)
  target_compile_options(${t} PRIVATE ${HYPER_WARNINGS})
  target_link_libraries(${t} PUBLIC ${A_PUBLIC_DEPS} PRIVATE ${A_PRIVATE_DEPS})
  set_property(GLOBAL APPEND PROPERTY HYPER_EXPORTED_TARGETS ${t})
endfunction()

# hyper_add_test(NAME <binary> SOURCES ... DEPS ... [LABELS ...] [TIMEOUT s]
#                [SPLIT <ctest name> <gtest filter>])
# One gtest binary = one ctest entry (start-up of LibTorch is paid once per binary). SPLIT
# registers a second entry of the same binary that runs the suites matching the filter, and
# the first entry runs the rest: two halves that ctest -j runs side by side, each well inside
# its TIMEOUT (one binary still builds once).
function(hyper_add_test)
  if(NOT HYPER_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(A "" "NAME;TIMEOUT" "SOURCES;DEPS;LABELS;SPLIT" ${ARGN})
  add_executable(${A_NAME} ${A_SOURCES})
  target_compile_options(${A_NAME} PRIVATE ${HYPER_WARNINGS})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 600)
  endif()
  if(A_SPLIT)
    list(LENGTH A_SPLIT _n)
    if(NOT _n EQUAL 2)
      message(FATAL_ERROR "hyper_add_test(${A_NAME}): SPLIT takes a ctest name and a gtest filter")
    endif()
    list(GET A_SPLIT 0 _split_name)
    list(GET A_SPLIT 1 _split_filter)
    add_test(NAME ${A_NAME} COMMAND ${A_NAME} --gtest_brief=1 "--gtest_filter=-${_split_filter}")
    add_test(NAME ${_split_name} COMMAND ${A_NAME} --gtest_brief=1 "--gtest_filter=${_split_filter}")
    # A filter that selects nothing (a suite renamed) must fail, not pass with 0 tests.
    set_tests_properties(${A_NAME} ${_split_name} PROPERTIES
      FAIL_REGULAR_EXPRESSION "\\[==========\\] 0 tests from 0 test suites ran")
    set_tests_properties(${_split_name} PROPERTIES TIMEOUT ${A_TIMEOUT} LABELS "${A_LABELS}")
  else()
    add_test(NAME ${A_NAME} COMMAND ${A_NAME} --gtest_brief=1)
  endif()
  set_tests_properties(${A_NAME} PROPERTIES TIMEOUT ${A_TIMEOUT} LABELS "${A_LABELS}")
endfunction()

# hyper_add_tool(NAME <exe> SOURCES ... DEPS ...): installed into bin/.
function(hyper_add_tool)
  cmake_parse_arguments(A "" "NAME" "SOURCES;DEPS" ${ARGN})
  add_executable(${A_NAME} ${A_SOURCES})
  target_compile_options(${A_NAME} PRIVATE ${HYPER_WARNINGS})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS})
  install(TARGETS ${A_NAME} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endfunction()

# hyper_add_fuzzer(NAME <exe> SOURCES ... DEPS ...): a libFuzzer target, built only with
# -DHYPER_BUILD_FUZZ=ON (clang; scripts/fuzz.sh). Compiled and linked with libFuzzer, ASan and
# UBSan (UB aborts: -fno-sanitize-recover=undefined); the code under test gets the coverage
# and sanitizer instrumentation from CMAKE_CXX_FLAGS (-fsanitize=fuzzer-no-link,...).
set(HYPER_FUZZ_SANITIZERS -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
function(hyper_add_fuzzer)
  if(NOT HYPER_BUILD_FUZZ)
    return()
  endif()
  cmake_parse_arguments(A "" "NAME" "SOURCES;DEPS" ${ARGN})
  add_executable(${A_NAME} ${A_SOURCES})
  target_compile_options(${A_NAME} PRIVATE ${HYPER_WARNINGS} ${HYPER_FUZZ_SANITIZERS})
  target_link_options(${A_NAME} PRIVATE ${HYPER_FUZZ_SANITIZERS})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS})
endfunction()
