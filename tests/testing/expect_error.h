// EXPECT_TESSEL_ERROR(statement, code, substring): the statement throws tessel::Error with that
// code and a what() containing the substring.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "tessel/core/error.h"

#define EXPECT_TESSEL_ERROR(statement, expected_code, substring)                            \
  do {                                                                                      \
    try {                                                                                   \
      statement;                                                                            \
      ADD_FAILURE() << "expected tessel::Error from: " #statement;                          \
    } catch (const ::tessel::Error& e) {                                                    \
      EXPECT_EQ(::tessel::error_code_name(e.code()), ::tessel::error_code_name(expected_code)) \
          << e.what();                                                                      \
      EXPECT_NE(std::string(e.what()).find(substring), std::string::npos)                   \
          << "message: " << e.what() << "\nexpected to contain: " << (substring);           \
    }                                                                                       \
  } while (0)
