#include "tessel/core/error.h"

#include <gtest/gtest.h>

namespace tessel {
namespace {

TEST(Error, WhatNamesComponentAndMessage) {
  Error e(ErrorCode::kInvalidArgument, "Mesh", "bad ids [0,2]");
  EXPECT_STREQ(e.what(), "Mesh: bad ids [0,2]");
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(e.component(), "Mesh");
  EXPECT_EQ(e.message(), "bad ids [0,2]");
}

TEST(Error, CodeNames) {
  EXPECT_EQ(error_code_name(ErrorCode::kDeadlineExceeded), "DeadlineExceeded");
  EXPECT_EQ(error_code_name(ErrorCode::kInvalidArgument), "InvalidArgument");
  EXPECT_EQ(error_code_name(ErrorCode::kInternal), "Internal");
  EXPECT_EQ(error_code_name(ErrorCode::kResourceExhausted), "ResourceExhausted");
}

}  // namespace
}  // namespace tessel
