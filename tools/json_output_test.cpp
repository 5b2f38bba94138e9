// json_output.h: what every --json output of the CLI goes through.
#include "json_output.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace tessel::cli {
namespace {

TEST(JsonOutput, NonFiniteNumbersAreNull) {
  EXPECT_TRUE(json_number(std::nan("")).is_null());
  EXPECT_TRUE(json_number(std::numeric_limits<double>::infinity()).is_null());
  EXPECT_TRUE(json_number(-std::numeric_limits<double>::infinity()).is_null());
  // A bare double given to the writer is written as null too (nlohmann's dump), never nan.
  const Json out{{"loss", std::nan("")},
                 {"scale", -std::numeric_limits<double>::infinity()},
                 {"rounded", json_number(-std::nan(""))}};
  EXPECT_EQ(out.dump(), R"({"loss":null,"scale":null,"rounded":null})");
}

TEST(JsonOutput, NumbersKeepTheirSignificantDigits) {
  EXPECT_EQ(Json(json_number(123.456789)).dump(), "123.457");
  EXPECT_EQ(Json(json_number(2.0 / 3.0, 3)).dump(), "0.667");
  EXPECT_EQ(Json(json_number(1e-7)).dump(), "1e-07");
  EXPECT_EQ(Json(json_number(0.0)).dump(), "0.0");
  EXPECT_EQ(Json(json_number(-4096.0)).dump(), "-4096.0");
}

TEST(JsonOutput, KeysKeepTheirOrderAndTextIsEscaped) {
  Json out;
  out["zeta"] = 1;
  out["alpha"] = "a \"quoted\"\n\x01 name";
  EXPECT_EQ(out.dump(), R"({"zeta":1,"alpha":"a \"quoted\"\n\u0001 name"})");
}

}  // namespace
}  // namespace tessel::cli
