// The tessel CLI's --json output: every command builds one nlohmann::ordered_json value (keys in
// the order they are set) and prints it with print_json(), as one line of valid JSON.
//
//   Json out;
//   out["devices"] = 4;
//   out["time_us"] = json_number(us);   // 6 significant digits; NaN or an infinity: null
//   print_json(out);                    // {"devices":4,"time_us":12.3457}
//
// JSON has no NaN or infinity: a non-finite number is written as null (nlohmann's dump does so
// for any double it is given; json_number makes it explicit), never as a bare nan or inf.
#pragma once

#include <nlohmann/json.hpp>

namespace tessel::cli {

using Json = nlohmann::ordered_json;

// `value` rounded to `significant` digits (what a measurement carries), or null when it is NaN
// or infinite.
Json json_number(double value, int significant = 6);

// Writes `value` and a newline to stdout and flushes it.
void print_json(const Json& value);

}  // namespace tessel::cli
