#include "tools/cli/args.h"

#include <algorithm>
#include <charconv>

namespace hyper::cli {

namespace {

/// `text` with every `{arg}` replaced by `arg` and every `{name}` by `name`, in one pass: the
/// values are copied verbatim, never searched for placeholders themselves.
std::string fill(const std::string& text, const std::string& arg, const std::string& name) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    if (text.compare(i, 5, "{arg}") == 0) {
      out += arg;
      i += 5;
    } else if (text.compare(i, 6, "{name}") == 0) {
      out += name;
      i += 6;
    } else {
      out += text[i++];
    }
  }
  return out;
}

}  // namespace

ArgParser::ArgParser(Messages messages, Positionals positionals)
    : messages_(std::move(messages)), positionals_(positionals) {}

ArgParser& ArgParser::add(std::initializer_list<const char*> names, Spec spec) {
  for (const char* n : names) spec.names.emplace_back(n);
  specs_.push_back(std::move(spec));
  return *this;
}

ArgParser& ArgParser::option(
    std::initializer_list<const char*> names,
    std::function<void(const std::string& value, const std::string& name)> set) {
  return add(names, Spec{{}, Spec::kValue, std::move(set), {}});
}

ArgParser& ArgParser::option(std::initializer_list<const char*> names,
                             std::function<void(const std::string& value)> set) {
  return option(names, [set = std::move(set)](const std::string& v, const std::string&) { set(v); });
}

ArgParser& ArgParser::flag(std::initializer_list<const char*> names, std::function<void()> set) {
  return add(names, Spec{{}, Spec::kFlag, {}, std::move(set)});
}

ArgParser& ArgParser::help(std::initializer_list<const char*> names) {
  return add(names, Spec{{}, Spec::kHelp, {}, {}});
}

const ArgParser::Spec* ArgParser::find(const std::string& name) const {
  for (const Spec& s : specs_)
    if (std::find(s.names.begin(), s.names.end(), name) != s.names.end()) return &s;
  return nullptr;
}

void ArgParser::fail(const std::string& text, const std::string& arg,
                     const std::string& name) const {
  throw UsageError(fill(text, arg, name));
}

std::vector<std::string> ArgParser::parse(int argc, const char* const* argv, int first) {
  std::vector<std::string> positional;
  help_ = false;
  bool options_end = false;
  for (int i = first; i < argc; ++i) {
    const std::string arg = argv[i];
    if (options_end) {
      positional.push_back(arg);
      continue;
    }
    if (arg == "--" && positionals_ != Positionals::kNone) {
      options_end = true;
      continue;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      if (positionals_ == Positionals::kNone) fail(messages_.unknown, arg, arg);
      positional.push_back(arg);
      options_end = positionals_ == Positionals::kStopAtFirst;
      continue;
    }
    std::string name, inline_value;
    bool has_inline = false;
    if (arg[1] == '-') {
      const std::size_t eq = arg.find('=');
      name = arg.substr(0, eq);
      if (eq != std::string::npos) {
        inline_value = arg.substr(eq + 1);
        has_inline = true;
      }
      std::replace(name.begin() + 2, name.end(), '_', '-');
    } else {
      name = arg.substr(0, 2);
      if (arg.size() > 2) {
        inline_value = arg.substr(arg[2] == '=' ? 3 : 2);  // -n4, -n=4
        has_inline = true;
      }
    }
    const Spec* spec = find(name);
    if (spec == nullptr) fail(messages_.unknown, arg, name);
    if (spec->kind == Spec::kValue) {
      if (!has_inline && i + 1 >= argc) fail(messages_.missing_value, arg, name);
      spec->set_value(has_inline ? inline_value : std::string(argv[++i]), name);
      continue;
    }
    if (has_inline) fail(messages_.unexpected_value, arg, name);
    if (spec->kind == Spec::kHelp) {
      help_ = true;
      return positional;
    }
    spec->set_flag();
  }
  return positional;
}

int64_t parse_integer(const std::string& text, const std::string& option, int64_t lo, int64_t hi,
                      const char* what) {
  int64_t value = 0;
  const char* first = text.data();
  const char* last = first + text.size();
  const auto [ptr, ec] = std::from_chars(first, last, value);
  if (text.empty() || ec != std::errc() || ptr != last || value < lo || value > hi)
    throw UsageError("invalid value for " + option + ": '" + text + "' (expected " + what +
                     " from " + std::to_string(lo) + " to " + std::to_string(hi) + ")");
  return value;
}

}  // namespace hyper::cli
