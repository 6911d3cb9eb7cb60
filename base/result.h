// Result<T>: a value or an Error carrying errno and context, for module boundaries (g++ 12 has no
// std::expected). Errors are values on the data plane; only policy loading throws.
#pragma once

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <variant>

namespace cordon {

struct Error {
  std::string message;  // what failed, with its arguments: "mount(\"proc\", \"/proc\"): ..."
  int code = 0;         // errno at the failing call, 0 when not a syscall failure
  std::string hint;     // what the operator can do about it, may be empty

  // Prepends context: "setting up /tmp: mount(...): EPERM".
  Error&& with_context(const std::string& ctx) && {
    message = ctx + ": " + message;
    return std::move(*this);
  }
  std::string to_string() const {
    std::string s = message;
    if (code != 0) {
      s += ": ";
      s += std::strerror(code);
    }
    if (!hint.empty()) {
      s += " (" + hint + ")";
    }
    return s;
  }
};

// Builds an Error from the errno of the call that just failed. Capture errno first, then format.
inline Error sys_error(std::string what, std::string hint = {}) {
  int e = errno;
  return Error{std::move(what), e, std::move(hint)};
}
inline Error make_error(std::string what, std::string hint = {}) {
  return Error{std::move(what), 0, std::move(hint)};
}

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}
  Result(Error err) : v_(std::move(err)) {}
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  const T& value() const& { return std::get<0>(v_); }
  T& operator*() & { return value(); }
  T* operator->() { return &std::get<0>(v_); }
  const T* operator->() const { return &std::get<0>(v_); }
  const Error& error() const& { return std::get<1>(v_); }
  Error&& error() && { return std::get<1>(std::move(v_)); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error err) : err_(std::move(err)), ok_(false) {}
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const& { return err_; }
  Error&& error() && { return std::move(err_); }

 private:
  Error err_;
  bool ok_ = true;
};

using Status = Result<void>;

}  // namespace cordon

// TRY(expr): evaluates a Result; on error returns it from the enclosing function.
#define CORDON_CONCAT_INNER(a, b) a##b
#define CORDON_CONCAT(a, b) CORDON_CONCAT_INNER(a, b)
#define TRY(expr)                                            \
  do {                                                       \
    auto CORDON_CONCAT(_r, __LINE__) = (expr);               \
    if (!CORDON_CONCAT(_r, __LINE__).ok()) {                 \
      return std::move(CORDON_CONCAT(_r, __LINE__)).error(); \
    }                                                        \
  } while (0)
// ASSIGN_OR_RETURN(lhs, expr): lhs = value of expr, or return its error.
#define ASSIGN_OR_RETURN(lhs, expr)                        \
  auto CORDON_CONCAT(_a, __LINE__) = (expr);               \
  if (!CORDON_CONCAT(_a, __LINE__).ok()) {                 \
    return std::move(CORDON_CONCAT(_a, __LINE__)).error(); \
  }                                                        \
  lhs = std::move(CORDON_CONCAT(_a, __LINE__)).value()
