#include "tessel/core/shape.h"

#include <gtest/gtest.h>

#include <sstream>

#include "tessel/core/error.h"

namespace tessel {
namespace {

// Runs fn, expects an Error with `code` from component "Shape" whose message contains `text`.
template <typename F>
void expect_shape_error(F&& fn, ErrorCode code, const std::string& text) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing '" << text << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_EQ(e.component(), "Shape");
    EXPECT_NE(e.message().find(text), std::string::npos) << e.what();
  }
}

TEST(Shape, BasicQueries) {
  Shape s{8, 6};
  EXPECT_EQ(s.rank(), 2);
  EXPECT_EQ(s[0], 8);
  EXPECT_EQ(s[1], 6);
  EXPECT_EQ(s.num_elements(), 48);
  EXPECT_EQ(s.dims(), (std::vector<int64_t>{8, 6}));
  EXPECT_EQ(s.strides(), (std::vector<int64_t>{6, 1}));
  EXPECT_EQ(s.to_string(), "[8,6]");
  EXPECT_EQ(Shape({2, 3, 4}).strides(), (std::vector<int64_t>{12, 4, 1}));
}

TEST(Shape, ScalarAndEmpty) {
  Shape scalar;
  EXPECT_EQ(scalar.rank(), 0);
  EXPECT_EQ(scalar.num_elements(), 1);
  EXPECT_EQ(scalar.to_string(), "[]");
  EXPECT_TRUE(scalar.strides().empty());
  EXPECT_EQ(Shape({3, 0, 2}).num_elements(), 0);
}

TEST(Shape, DimCountsNegativeAxesFromTheEnd) {
  Shape s{8, 6, 4};
  EXPECT_EQ(s.dim(0), 8);
  EXPECT_EQ(s.dim(2), 4);
  EXPECT_EQ(s.dim(-1), 4);
  EXPECT_EQ(s.dim(-3), 8);
}

TEST(Shape, DimThrowsOnOutOfRangeAxis) {
  Shape s{8, 6};
  expect_shape_error([&] { s.dim(2); }, ErrorCode::kOutOfRange, "axis 2");
  expect_shape_error([&] { s.dim(-3); }, ErrorCode::kOutOfRange, "axis -3");
  expect_shape_error([&] { Shape().dim(0); }, ErrorCode::kOutOfRange, "rank-0");
}

TEST(Shape, ThrowsOnNegativeExtent) {
  expect_shape_error(
      [] {
        Shape({4, -1});
      },
      ErrorCode::kInvalidArgument, "dimension 1 has negative extent -1");
  expect_shape_error([] { Shape(std::vector<int64_t>{-2}); }, ErrorCode::kInvalidArgument, "-2");
}

TEST(Shape, ThrowsOnElementCountOverflow) {
  expect_shape_error(
      [] {
        Shape({int64_t{1} << 40, int64_t{1} << 40});
      },
      ErrorCode::kInvalidArgument, "overflows");
  EXPECT_EQ(Shape({int64_t{1} << 40, int64_t{1} << 40, 0}).num_elements(), 0);
}

TEST(Shape, ParseAcceptsBracketedBareAndEmpty) {
  EXPECT_EQ(Shape::parse("8,6"), (Shape{8, 6}));
  EXPECT_EQ(Shape::parse("[8,6]"), (Shape{8, 6}));
  EXPECT_EQ(Shape::parse("[ 8, 6 ]"), (Shape{8, 6}));
  EXPECT_EQ(Shape::parse("5"), (Shape{5}));
  EXPECT_EQ(Shape::parse(""), Shape());
  EXPECT_EQ(Shape::parse("[]"), Shape());
  EXPECT_EQ(Shape::parse("[0,3]"), (Shape{0, 3}));
}

TEST(Shape, ParseRoundTripsToString) {
  for (const Shape& s : {Shape(), Shape{1}, Shape{8, 6}, Shape{2, 0, 7}}) {
    EXPECT_EQ(Shape::parse(s.to_string()), s) << s.to_string();
  }
}

TEST(Shape, ParseFailsOnMalformedText) {
  for (const char* bad : {"8,,6", "8,", ",8", "a", "[8,6", "8,6]", "[", "8.5", "8 6",
                          "99999999999999999999", "[[8]]"}) {
    expect_shape_error([&] { Shape::parse(bad); }, ErrorCode::kInvalidArgument,
                       std::string("'") + bad + "'");
  }
  expect_shape_error([] { Shape::parse("[4,-1]"); }, ErrorCode::kInvalidArgument, "-1");
}

TEST(Shape, StreamsAsText) {
  std::ostringstream os;
  os << Shape{2, 3};
  EXPECT_EQ(os.str(), "[2,3]");
}

}  // namespace
}  // namespace tessel
