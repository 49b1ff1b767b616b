#include "tools/cli/args.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace hyper::cli {
namespace {

using Args = std::vector<std::string>;

/// Parses `args` (argv[0] is added) and returns the positionals, or "error: <message>".
struct Outcome {
  std::vector<std::string> positional;
  std::string error;
};
Outcome run(ArgParser& p, const Args& args) {
  std::vector<const char*> argv{"prog"};
  for (const auto& a : args) argv.push_back(a.c_str());
  Outcome r;
  try {
    r.positional = p.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const UsageError& e) {
    r.error = e.what();
  }
  return r;
}

struct Opts {
  std::string value, name;
  int flags = 0;
};

ArgParser parser(Opts& o, Messages m = {}, Positionals pos = Positionals::kNone) {
  ArgParser p(std::move(m), pos);
  p.option({"-n", "--nproc-per-node"}, [&o](const std::string& v, const std::string& name) {
    o.value = v;
    o.name = name;
  });
  p.flag({"--standalone"}, [&o] { ++o.flags; });
  p.help({"-h", "--help"});
  return p;
}

TEST(ArgParser, ValueSpellings) {
  for (const Args& a : std::vector<Args>{{"-n", "4"}, {"-n4"}, {"-n=4"}, {"--nproc-per-node", "4"},
                                         {"--nproc-per-node=4"}, {"--nproc_per_node", "4"}}) {
    Opts o;
    ArgParser p = parser(o);
    EXPECT_EQ(run(p, a).error, "") << a[0];
    EXPECT_EQ(o.value, "4") << a[0];
    EXPECT_EQ(o.name, a[0].rfind("--", 0) == 0 ? "--nproc-per-node" : "-n") << a[0];
  }
  Opts o;
  ArgParser p = parser(o);
  EXPECT_EQ(run(p, {"-n", "-5", "--nproc-per-node="}).error, "");  // values may look like options
  EXPECT_EQ(o.value, "");
}

TEST(ArgParser, FlagsAndHelp) {
  Opts o;
  ArgParser p = parser(o);
  EXPECT_EQ(run(p, {"--standalone", "--standalone"}).error, "");
  EXPECT_EQ(o.flags, 2);
  EXPECT_FALSE(p.help_requested());
  // help ends parsing: what follows is not read.
  EXPECT_EQ(run(p, {"--standalone", "-h", "--bogus", "-n"}).error, "");
  EXPECT_TRUE(p.help_requested());
  EXPECT_EQ(o.flags, 3);
  EXPECT_EQ(run(p, {"--standalone"}).error, "");
  EXPECT_FALSE(p.help_requested());  // reset by the next parse
}

TEST(ArgParser, DefaultMessages) {
  Opts o;
  ArgParser p = parser(o);
  EXPECT_EQ(run(p, {"--bogus=1"}).error, "unknown option '--bogus=1'");
  EXPECT_EQ(run(p, {"-x"}).error, "unknown option '-x'");
  EXPECT_EQ(run(p, {"prog"}).error, "unknown option 'prog'");
  EXPECT_EQ(run(p, {"--"}).error, "unknown option '--'");
  EXPECT_EQ(run(p, {"-n"}).error, "missing value after -n");
  EXPECT_EQ(run(p, {"--nproc_per_node"}).error, "missing value after --nproc-per-node");
  EXPECT_EQ(run(p, {"--standalone=1"}).error,
            "option --standalone takes no value (got '--standalone=1')");
  EXPECT_EQ(run(p, {"-hx"}).error, "option -h takes no value (got '-hx')");
}

TEST(ArgParser, ProgramMessages) {
  Opts o;
  ArgParser p = parser(o, {"bench: unknown argument '{arg}' (use -n N)", "{arg} needs a value",
                           "{name}: no value please ({arg}, {arg})"});
  EXPECT_EQ(run(p, {"--mib"}).error, "bench: unknown argument '--mib' (use -n N)");
  EXPECT_EQ(run(p, {"--nproc_per_node"}).error, "--nproc_per_node needs a value");
  EXPECT_EQ(run(p, {"--standalone=x"}).error,
            "--standalone: no value please (--standalone=x, --standalone=x)");
}

// An argument that itself contains `{name}` (or `{arg}`) is quoted verbatim: the message is
// filled in one pass, so that text is not replaced again (a cli_args_fuzz input).
TEST(ArgParser, MessagesQuoteArgumentsVerbatim) {
  Opts o;
  ArgParser p = parser(o, {"unknown '{arg}' ({name})", "missing value after {name} ({arg})",
                           "{name} takes no value (got '{arg}')"});
  EXPECT_EQ(run(p, {"--{name}"}).error, "unknown '--{name}' (--{name})");
  EXPECT_EQ(run(p, {"--{arg}={name}"}).error, "unknown '--{arg}={name}' (--{arg})");
  EXPECT_EQ(run(p, {"-{"}).error, "unknown '-{' (-{)");
  EXPECT_EQ(run(p, {"--standalone={name}{arg}"}).error,
            "--standalone takes no value (got '--standalone={name}{arg}')");
  ArgParser d = parser(o);
  EXPECT_EQ(run(d, {"{name}"}).error, "unknown option '{name}'");
}

TEST(ArgParser, SetterErrorsPassThrough) {
  ArgParser p;
  p.option({"--n"}, [](const std::string& v) { (void)std::stoll(v); });
  p.option({"--port"}, [](const std::string& v, const std::string& name) {
    if (v != "80") throw UsageError("invalid value for " + name + ": '" + v + "'");
  });
  EXPECT_EQ(run(p, {"--port", "81"}).error, "invalid value for --port: '81'");
  std::vector<const char*> argv{"prog", "--n", "x"};
  EXPECT_THROW(p.parse(3, argv.data()), std::invalid_argument);  // std::stoll's own
}

TEST(ArgParser, InterleavedPositionals) {
  Opts o;
  ArgParser p = parser(o, {}, Positionals::kInterleaved);
  Outcome r = run(p, {"a", "--standalone", "-", "-n", "2", "b", "--", "--standalone", "-n"});
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.positional, (Args{"a", "-", "b", "--standalone", "-n"}));
  EXPECT_EQ(o.flags, 1);
  EXPECT_EQ(o.value, "2");
  EXPECT_EQ(run(p, {"a", "--bogus"}).error, "unknown option '--bogus'");
}

TEST(ArgParser, StopAtFirstPositional) {
  Opts o;
  ArgParser p = parser(o, {}, Positionals::kStopAtFirst);
  Outcome r = run(p, {"-n", "2", "prog", "--its", "-n", "own", "--", "args"});
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.positional, (Args{"prog", "--its", "-n", "own", "--", "args"}));
  EXPECT_EQ(o.value, "2");
  r = run(p, {"--standalone", "--", "--prog", "-h"});
  EXPECT_EQ(r.positional, (Args{"--prog", "-h"}));
  EXPECT_FALSE(p.help_requested());
  EXPECT_EQ(run(p, {"-n", "2"}).positional, Args{});
}

}  // namespace

TEST(ParseInteger, AcceptsExactlyADecimalIntegerInRange) {
  EXPECT_EQ(parse_integer("42", "--n", 1, 100, "a count"), 42);
  EXPECT_EQ(parse_integer("-3", "--n", -5, 5, "a count"), -3);
  EXPECT_EQ(parse_integer("9223372036854775807", "--n", 0, INT64_MAX, "a count"), INT64_MAX);
  for (const char* bad : {"", "4x", " 4", "4 ", "+4", "0x10", "1e3", "0", "101",
                          "99999999999999999999"}) {
    try {
      parse_integer(bad, "--n", 1, 100, "a count");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()), std::string("invalid value for --n: '") + bad +
                                           "' (expected a count from 1 to 100)");
    }
  }
}

}  // namespace hyper::cli
