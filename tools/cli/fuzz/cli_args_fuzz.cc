// libFuzzer target for the command-line parser of every hyper program (tools/cli/args.h),
// hyperrun's included. The input is an argv: NUL-separated arguments; the first byte picks
// the Positionals mode. The parser is set up like hyperrun's (value options with one-letter
// and underscore spellings, flags, help) and records every setter call.
//
// Invariants, checked against a reference reading of the same argv written here: only
// UsageError is thrown, for the same argument and with the same message (its template with
// {arg} and {name} replaced by the argument and the option name as given); the setters run in
// argument order with exactly the text after `=` / after the one-letter name / the next
// argument; positionals come back unchanged and in order; after a help flag nothing else is
// parsed.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tools/cli/args.h"
#include "tools/cli/fuzz/fuzz_util.h"

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using hyper::cli::Positionals;
  const Positionals mode = data[0] % 3 == 0   ? Positionals::kNone
                           : data[0] % 3 == 1 ? Positionals::kInterleaved
                                              : Positionals::kStopAtFirst;
  std::vector<std::string> args{"prog"};
  for (auto& a : hyper::fuzz::split_nul(data + 1, size - 1)) args.push_back(std::move(a));
  if (args.size() > 64) return 0;
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());

  const hyper::cli::Messages messages{"unknown option '{arg}' ({name})",
                                      "missing value after {name} ({arg})",
                                      "option {name} takes no value (got '{arg}')"};
  std::vector<std::pair<std::string, std::string>> calls;  // (name, value) or (flag, "")
  hyper::cli::ArgParser p(messages, mode);
  p.option({"--nproc-per-node", "-n"},
           [&](const std::string& v, const std::string& name) { calls.emplace_back(name, v); });
  p.option({"--master-port"}, [&](const std::string& v) { calls.emplace_back("--master-port", v); });
  p.flag({"--verbose", "-v"}, [&] { calls.emplace_back("--verbose", ""); });
  p.help({"-h", "--help"});
  std::vector<std::string> positional;
  std::string error;
  try {
    positional = p.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const hyper::cli::UsageError& e) {
    error = e.what();
    check(!error.empty());
  }

  // Reference reading: the same grammar, written out again; a message is its template with
  // {arg} and {name} replaced once each, by the values as given.
  auto message = [](const std::string& text, const std::string& arg, const std::string& name) {
    std::string out;
    for (size_t i = 0; i < text.size();) {
      if (text.compare(i, 5, "{arg}") == 0) out += arg, i += 5;
      else if (text.compare(i, 6, "{name}") == 0) out += name, i += 6;
      else out += text[i++];
    }
    return out;
  };
  std::vector<std::pair<std::string, std::string>> want;
  std::vector<std::string> want_pos;
  std::string want_error;
  bool end = false;
  for (size_t i = 1; i < args.size() && want_error.empty(); ++i) {
    const std::string& a = args[i];
    if (end) {
      want_pos.push_back(a);
      continue;
    }
    if (a == "--" && mode != Positionals::kNone) {
      end = true;
      continue;
    }
    if (a.size() < 2 || a[0] != '-') {
      if (mode == Positionals::kNone) {
        want_error = message(messages.unknown, a, a);
        break;
      }
      want_pos.push_back(a);
      end = mode == Positionals::kStopAtFirst;
      continue;
    }
    std::string name = a, value;
    bool inline_value = false;
    if (a[1] == '-') {
      const auto eq = a.find('=');
      if (eq != std::string::npos) name = a.substr(0, eq), value = a.substr(eq + 1), inline_value = true;
      for (size_t k = 2; k < name.size(); ++k)
        if (name[k] == '_') name[k] = '-';
    } else {
      name = a.substr(0, 2);
      if (a.size() > 2) value = a.substr(a[2] == '=' ? 3 : 2), inline_value = true;
    }
    const bool is_help = name == "-h" || name == "--help";
    const bool is_flag = name == "--verbose" || name == "-v";
    const bool is_value = name == "--nproc-per-node" || name == "-n" || name == "--master-port";
    if (!is_help && !is_flag && !is_value) {
      want_error = message(messages.unknown, a, name);
      break;
    }
    if (is_value) {
      if (!inline_value && i + 1 >= args.size()) {
        want_error = message(messages.missing_value, a, name);
        break;
      }
      if (!inline_value) value = args[++i];
      want.emplace_back(name, value);
      continue;
    }
    if (inline_value) {
      want_error = message(messages.unexpected_value, a, name);
      break;
    }
    if (is_help) break;
    want.emplace_back("--verbose", "");
  }
  check(error == want_error);
  check(calls == want);
  if (error.empty()) check(positional == want_pos);
  return 0;
}
