// DeviceName parsing and printing, following TensorFlow's DeviceNameUtils::ParseFullName.
//
// Deliberate differences from TensorFlow, each stricter or clearer:
//  - the leading '/' is optional ("job:a/task:0" == "/job:a/task:0");
//  - device types must be upper case ("CPU", "XLA_CPU"); TF also accepts "cpu";
//  - a part given twice ("/task:0/task:1", "/cpu:0/device:GPU:1") is an error, not last-wins;
//  - numbers above INT_MAX are an error, not a silent wrap;
//  - "/device:*:3" keeps its id when printed (TF drops an id whose type is a wildcard).
#include "tessel/core/device_name.h"

#include <cctype>
#include <climits>

#include "core/errors.h"

namespace tessel {
namespace {

bool is_upper_type_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

bool is_job_name(std::string_view s) {
  if (s.empty() || !std::isalpha(static_cast<unsigned char>(s.front()))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

bool is_device_type(std::string_view s) {
  if (s.empty() || s.front() < 'A' || s.front() > 'Z') return false;
  for (char c : s) {
    if (!is_upper_type_char(c)) return false;
  }
  return true;
}

// Parses one DeviceName; on failure returns nullopt and says why in *error.
class Parser {
 public:
  explicit Parser(std::string_view text) : rest_(text) {}

  std::optional<DeviceName> run(std::string* error) {
    error_ = error;
    if (rest_.empty() || rest_ == "/") return DeviceName{};
    bool first = true;  // the leading '/' is optional
    while (!rest_.empty()) {
      if (!consume("/") && !first) {
        fail("expected '/' before '{}'", rest_);
        return std::nullopt;
      }
      first = false;
      if (!part()) return std::nullopt;
    }
    return name_;
  }

 private:
  // Records why parsing failed; returns false so callers can `return fail(...)`.
  template <typename... Args>
  bool fail(fmt::format_string<Args...> format, Args&&... args) {
    *error_ = fmt::format(format, std::forward<Args>(args)...);
    return false;
  }

  bool consume(std::string_view prefix) {
    if (!rest_.starts_with(prefix)) return false;
    rest_.remove_prefix(prefix.size());
    return true;
  }

  // Up to (not including) the first of `stops`.
  std::string_view take_until(std::string_view stops) {
    const std::string_view token = rest_.substr(0, rest_.find_first_of(stops));
    rest_.remove_prefix(token.size());
    return token;
  }

  // "*" (nullopt in *out) or a decimal int; false on anything else.
  bool number_or_wildcard(std::string_view what, std::optional<int>* out) {
    if (consume("*")) return true;
    size_t n = 0;
    int64_t value = 0;
    while (n < rest_.size() && std::isdigit(static_cast<unsigned char>(rest_[n]))) {
      value = value * 10 + (rest_[n] - '0');
      if (value > INT_MAX) return fail("{} number is larger than {}", what, INT_MAX);
      ++n;
    }
    if (n == 0) {
      return fail("{} needs a number or '*', got '{}'", what, take_until("/"));
    }
    rest_.remove_prefix(n);
    *out = static_cast<int>(value);
    return true;
  }

  // Marks a part as seen; false (with an error) when it was already given.
  bool first_time(bool* seen, std::string_view what) {
    if (*seen) return fail("part '{}' is given twice", what);
    *seen = true;
    return true;
  }

  bool part() {
    if (consume("job:")) {
      if (!first_time(&seen_job_, "job")) return false;
      if (consume("*")) return true;
      const std::string_view job = take_until("/");
      if (!is_job_name(job)) {
        return fail("bad job name '{}' (a letter, then letters, digits or '_')", job);
      }
      name_.job = std::string(job);
      return true;
    }
    if (consume("replica:")) {
      return first_time(&seen_replica_, "replica") && number_or_wildcard("replica", &name_.replica);
    }
    if (consume("task:")) {
      return first_time(&seen_task_, "task") && number_or_wildcard("task", &name_.task);
    }
    if (consume("device:")) {
      if (!first_time(&seen_device_, "device")) return false;
      if (!consume("*")) {
        const std::string_view type = take_until("/:");
        if (!is_device_type(type)) {
          return fail(
              "bad device type '{}' (an upper-case letter, then upper-case letters, "
              "digits or '_')",
              type);
        }
        name_.type = std::string(type);
      }
      return !consume(":") || number_or_wildcard("device id", &name_.id);
    }
    for (std::string_view legacy : {"cpu:", "CPU:", "gpu:", "GPU:"}) {
      if (consume(legacy)) {
        if (!first_time(&seen_device_, "device")) return false;
        name_.type = (legacy[0] == 'c' || legacy[0] == 'C') ? "CPU" : "GPU";
        return number_or_wildcard("device id", &name_.id);
      }
    }
    return fail("unknown part '{}' (expected job:, replica:, task:, device:, cpu: or gpu:)",
                take_until("/"));
  }

  std::string_view rest_;  // text not yet consumed
  std::string* error_ = nullptr;
  DeviceName name_;
  bool seen_job_ = false;
  bool seen_replica_ = false;
  bool seen_task_ = false;
  bool seen_device_ = false;  // device:, cpu: or gpu:
};

}  // namespace

std::optional<DeviceName> DeviceName::try_parse(std::string_view text) {
  std::string error;
  return Parser(text).run(&error);
}

DeviceName DeviceName::parse(std::string_view text) {
  std::string error;
  std::optional<DeviceName> name = Parser(text).run(&error);
  if (!name) detail::throw_invalid("DeviceName", "cannot parse '{}': {}", text, error);
  return *name;
}

DeviceName DeviceName::make(std::string job, int replica, int task, std::string type, int id) {
  if (!is_job_name(job)) {
    detail::throw_invalid("DeviceName", "bad job name '{}' (a letter, then letters, digits or '_')",
                          job);
  }
  if (!is_device_type(type)) {
    detail::throw_invalid("DeviceName",
                          "bad device type '{}' (an upper-case letter, then upper-case letters, "
                          "digits or '_')",
                          type);
  }
  if (replica < 0 || task < 0 || id < 0) {
    detail::throw_invalid("DeviceName", "replica {}, task {} and id {} must be non-negative",
                          replica, task, id);
  }
  return DeviceName{std::move(job), replica, task, std::move(type), id};
}

std::string DeviceName::to_string() const {
  std::string out;
  if (job) out += "/job:" + *job;
  if (replica) out += fmt::format("/replica:{}", *replica);
  if (task) out += fmt::format("/task:{}", *task);
  if (type || id) {
    out += fmt::format("/device:{}:{}", type ? *type : "*", id ? std::to_string(*id) : "*");
  }
  return out;
}

bool DeviceName::is_fully_specified() const { return job && replica && task && type && id; }

bool DeviceName::matches(const DeviceName& other) const {
  return (!job || job == other.job) && (!replica || replica == other.replica) &&
         (!task || task == other.task) && (!type || type == other.type) && (!id || id == other.id);
}

}  // namespace tessel
