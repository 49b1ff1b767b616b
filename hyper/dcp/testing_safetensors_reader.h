#pragma once
/// \file testing_safetensors_reader.h
/// Tests only: reads safetensors files with the `safetensors` package (tests/safetensors_reader.py
/// run by the project's Python, HYPER_PYTHON). A missing Python or package is a test failure,
/// not a skip: the independent reader is part of what the tests prove.

#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#ifndef HYPER_PYTHON
#error "HYPER_PYTHON (the Python with the safetensors package) must be defined by CMake"
#endif
#ifndef HYPER_SAFETENSORS_READER
#error "HYPER_SAFETENSORS_READER (tests/safetensors_reader.py) must be defined by CMake"
#endif

namespace hyper::dcp::testing {

/// {file name: {key: {dtype, shape, values}}} as the safetensors package reads `files`.
/// Adds a gtest failure (and returns null) when the reader cannot run or refuses a file.
inline nlohmann::json read_with_safetensors(const std::vector<std::string>& files) {
  std::string cmd = std::string("'") + HYPER_PYTHON + "' '" + HYPER_SAFETENSORS_READER + "'";
  for (const auto& f : files) cmd += " '" + f + "'";
  cmd += " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) {
    ADD_FAILURE() << "cannot run " << cmd;
    return nullptr;
  }
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
  const int status = ::pclose(p);
  if (status != 0) {
    ADD_FAILURE() << "the safetensors package refused the files (scripts/deps.sh installs it "
                     "into .venv): "
                  << cmd << "\n" << text;
    return nullptr;
  }
  return nlohmann::json::parse(text);
}

}  // namespace hyper::dcp::testing
