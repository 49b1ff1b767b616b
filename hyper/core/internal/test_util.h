#pragma once
// Test-only helpers shared by hyper's GoogleTest files (not installed: internal/).

#include <gtest/gtest.h>

#include <exception>
#include <string>

// Runs `stmt`, expects it to throw `type`, and expects what() to contain `substr`.
#define EXPECT_THROW_MSG(stmt, type, substr)                                          \
  do {                                                                                \
    try {                                                                             \
      stmt;                                                                           \
      ADD_FAILURE() << "expected " #type " from: " #stmt;                             \
    } catch (const type& e_) {                                                        \
      EXPECT_NE(std::string(e_.what()).find(substr), std::string::npos)               \
          << "message '" << e_.what() << "' lacks '" << (substr) << "'";              \
    } catch (const std::exception& e_) {                                              \
      ADD_FAILURE() << "expected " #type " from: " #stmt << "; got another exception: " \
                    << e_.what();                                                     \
    }                                                                                 \
  } while (0)
