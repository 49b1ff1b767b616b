#pragma once
/// \file args.h
/// The command-line parser of hyper's programs (tools/, bench/, examples/): one loop for
/// hyperrun, hyper-dcp, hyper-plan, the benchmarks and the examples, each keeping its own
/// messages. C++ standard library only. (Why not CLI11: docs/architecture.md.)
///
/// Syntax, for every program:
/// - `--name VALUE`, `--name=VALUE`; a one-letter option also as `-xVALUE`, `-x=VALUE`;
/// - underscores in a long name read as dashes (`--nproc_per_node`, as torchrun);
/// - `-` alone is a positional argument; `--` ends the options where positionals are allowed.
///
///   hyper::cli::ArgParser p({"unknown argument '{arg}'", "missing value after {name}"});
///   p.option({"--src"}, [&](const std::string& v) { src = v; });
///   p.flag({"--verify"}, [&] { verify = true; });
///   p.help({"-h", "--help"});
///   p.parse(argc, argv);  // throws UsageError("unknown argument '--bogus'")
///   if (p.help_requested()) ...

#include <functional>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

namespace hyper::cli {

/// A bad command line. what() is the whole message; the program adds its name, the usage
/// and its exit status (2 in every hyper program).
class UsageError : public std::invalid_argument {
 public:
  explicit UsageError(const std::string& what) : std::invalid_argument(what) {}
};

/// The parser's own errors, as the program words them. In each, `{arg}` stands for the
/// argument as given and `{name}` for the option's name (no `=VALUE`, dashes for underscores).
struct Messages {
  /// An option nobody registered, or a positional argument where none is allowed.
  std::string unknown = "unknown option '{arg}'";
  /// A value option that is the last argument.
  std::string missing_value = "missing value after {name}";
  /// `--flag=VALUE` or `-fVALUE` for an option that takes no value.
  std::string unexpected_value = "option {name} takes no value (got '{arg}')";
};

/// Where positional arguments may stand.
enum class Positionals {
  kNone,         ///< none: each is an unknown argument
  kInterleaved,  ///< anywhere among the options (hyper-dcp's DIR)
  kStopAtFirst,  ///< the first one ends the options; it and the rest are returned untouched
                 ///< (hyperrun's `prog args...`)
};

/// Options in registration order, parsed in argument order: each setter runs when its
/// option is read, so later options override earlier ones.
class ArgParser {
 public:
  explicit ArgParser(Messages messages = {}, Positionals positionals = Positionals::kNone);

  /// An option that takes a value; `set(value, name)` stores it. A setter reports a bad value
  /// by throwing (UsageError or any other exception, which parse() lets through).
  ArgParser& option(std::initializer_list<const char*> names,
                    std::function<void(const std::string& value, const std::string& name)> set);
  /// The same for a setter that does not need the name.
  ArgParser& option(std::initializer_list<const char*> names,
                    std::function<void(const std::string& value)> set);
  /// An option without a value.
  ArgParser& flag(std::initializer_list<const char*> names, std::function<void()> set);
  /// A flag that ends parsing at once: parse() returns what it has and help_requested() is
  /// true, whatever follows.
  ArgParser& help(std::initializer_list<const char*> names);

  /// Parses argv[first..argc) and returns the positional arguments. Throws UsageError with a
  /// Messages text for an unknown option, a missing or unexpected value, or a positional
  /// argument under Positionals::kNone.
  std::vector<std::string> parse(int argc, const char* const* argv, int first = 1);
  std::vector<std::string> parse(int argc, char** argv, int first = 1) {
    return parse(argc, const_cast<const char* const*>(argv), first);
  }
  bool help_requested() const { return help_; }

 private:
  struct Spec {
    std::vector<std::string> names;
    enum Kind { kValue, kFlag, kHelp } kind;
    std::function<void(const std::string&, const std::string&)> set_value;
    std::function<void()> set_flag;
  };
  ArgParser& add(std::initializer_list<const char*> names, Spec spec);
  const Spec* find(const std::string& name) const;
  [[noreturn]] void fail(const std::string& text, const std::string& arg,
                         const std::string& name) const;

  Messages messages_;
  Positionals positionals_;
  std::vector<Spec> specs_;
  bool help_ = false;
};

/// `text` as a decimal integer in lo..hi (no sign other than '-', no spaces, no suffix), or
/// UsageError "invalid value for OPTION: 'TEXT' (expected WHAT from LO to HI)".
int64_t parse_integer(const std::string& text, const std::string& option, int64_t lo, int64_t hi,
                      const char* what);

}  // namespace hyper::cli
