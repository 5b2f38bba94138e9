// Helpers for the tensor tests.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "tessel/core/error.h"

namespace tessel::testing {

// Runs fn and expects a tessel::Error with `code` from `component` whose message contains
// `text`.
template <typename F>
void expect_error(F&& fn, ErrorCode code, const std::string& component, const std::string& text) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected " << error_code_name(code) << " containing '" << text
                  << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_EQ(e.component(), component) << e.what();
    EXPECT_NE(e.message().find(text), std::string::npos) << e.what();
  }
}

}  // namespace tessel::testing
