// init_process_group: torchrun environment parsing (every error), TCPStore rendezvous in
// threads, the default world.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <map>
#include <thread>

#include "hyper/comm/c10d_interop.h"
#include "hyper/comm/collectives.h"
#include "hyper/comm/device_mesh.h"
#include "hyper/comm/testing/harness.h"
#include "hyper/comm/world.h"
#include "hyper/core/errors.h"

namespace hyper {
namespace {

using Env = std::map<std::string, std::string>;

Env good_env() {
  return {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"},
          {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
}

void expect_env_error(Env env, const std::string& needle) {
  try {
    parse_torchrun_env(env);
    ADD_FAILURE() << "no error; expected: " << needle;
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// A peer that died makes Gloo's next write raise SIGPIPE; with the default disposition that
// kills the surviving rank (seen as comm_test dying of SIGPIPE in a missing-peer test under
// load). A World makes a default SIGPIPE "ignore": the write fails with EPIPE instead, and the
// collective with a CommError. A handler the program installed is kept.
void test_handler(int) {}

TEST(World, IgnoresADefaultSigpipeAndKeepsTheProgramsHandler) {
  ::signal(SIGPIPE, SIG_DFL);
  (void)make_world(c10::make_intrusive<c10d::HashStore>(), 0, 1, ProcessGroupOptions{});
  struct sigaction now {};
  ASSERT_EQ(::sigaction(SIGPIPE, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_IGN);
  // A write to a closed peer: EPIPE, and this process is still here.
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  ::close(fds[1]);
  errno = 0;
  EXPECT_EQ(::write(fds[0], "x", 1), -1);
  EXPECT_EQ(errno, EPIPE);
  ::close(fds[0]);

  ::signal(SIGPIPE, test_handler);
  (void)make_world(c10::make_intrusive<c10d::HashStore>(), 0, 1, ProcessGroupOptions{});
  ASSERT_EQ(::sigaction(SIGPIPE, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, &test_handler);
  ::signal(SIGPIPE, SIG_IGN);
}

TEST(TorchrunEnv, ParsesAGoodEnvironment) {
  TorchrunEnv e = parse_torchrun_env(good_env());
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.master_addr, "127.0.0.1");
  EXPECT_EQ(e.master_port, 29500);
  Env no_local = good_env();
  no_local.erase("LOCAL_RANK");
  EXPECT_EQ(parse_torchrun_env(no_local).local_rank, 1);
  EXPECT_FALSE(e.agent_store);
}

TEST(TorchrunEnv, Torchrun2AgentStore) {
  Env env = good_env();
  env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  EXPECT_TRUE(parse_torchrun_env(env).agent_store);
  env["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  EXPECT_FALSE(parse_torchrun_env(env).agent_store);
}

TEST(TorchrunEnv, EveryErrorNamesTheVariableAndValue) {
  for (const char* var : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) {
    Env env = good_env();
    env.erase(var);
    expect_env_error(env, std::string("environment variable ") + var + " is not set");
  }
  auto with = [](const std::string& k, const std::string& v) {
    Env env = good_env();
    env[k] = v;
    return env;
  };
  expect_env_error(with("RANK", "5"), "RANK=5 is not below WORLD_SIZE=4");
  expect_env_error(with("RANK", "4"), "RANK=4 is not below WORLD_SIZE=4");
  expect_env_error(with("RANK", "-1"), "RANK=-1 is negative");
  expect_env_error(with("RANK", "one"), "RANK=\"one\" is not an integer");
  expect_env_error(with("RANK", ""), "RANK=\"\" is not an integer");
  expect_env_error(with("WORLD_SIZE", "0"), "WORLD_SIZE=0 must be at least 1");
  expect_env_error(with("WORLD_SIZE", "4x"), "WORLD_SIZE=\"4x\" is not an integer");
  expect_env_error(with("WORLD_SIZE", "99999999999"), "WORLD_SIZE=99999999999 is out of range");
  expect_env_error(with("LOCAL_RANK", "4"), "LOCAL_RANK=4 is not below WORLD_SIZE=4");
  expect_env_error(with("LOCAL_RANK", "-2"), "LOCAL_RANK=-2 is negative");
  expect_env_error(with("MASTER_ADDR", ""), "MASTER_ADDR is empty");
  expect_env_error(with("MASTER_PORT", "70000"), "MASTER_PORT=70000 is not a TCP port");
  expect_env_error(with("MASTER_PORT", "0"), "MASTER_PORT=0 is not a TCP port");
  expect_env_error(with("MASTER_PORT", "http"), "MASTER_PORT=\"http\" is not an integer");
}

TEST(InitProcessGroup, ErrorsFromTheProcessEnvironment) {
  unsetenv("RANK");
  setenv("WORLD_SIZE", "2", 1);
  EXPECT_THROW(init_process_group(), ValueError);
  unsetenv("WORLD_SIZE");
  EXPECT_THROW(default_world(), ValueError);
  ProcessGroupOptions o;
  o.env = good_env();
  o.backend = "mpi";
  EXPECT_THROW(init_process_group(o), ValueError);
}

TEST(InitProcessGroup, TcpStoreRendezvousInThreads) {
  for (int n : {1, 2, 3}) {
    const int port = comm::testing::free_tcp_port();
    std::vector<std::thread> threads;
    std::vector<std::string> errors(n);
    std::vector<at::Tensor> results(n);
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        try {
          ProcessGroupOptions o;
          o.timeout = std::chrono::seconds(10);
          o.env = Env{{"RANK", std::to_string(r)}, {"WORLD_SIZE", std::to_string(n)},
                      {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port)}};
          World w = init_process_group(o);
          EXPECT_EQ(w.rank(), r);
          EXPECT_EQ(w.size(), n);
          results[r] = comm::all_reduce(at::full({2}, r + 1.0), comm::ReduceOp::kSum, w.group());
          auto mesh = init_device_mesh(w, "cpu", {n});
          EXPECT_EQ(mesh.get_rank(), r);
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(errors[r], "") << "rank " << r;
      if (results[r].defined()) {
        EXPECT_TRUE(at::equal(results[r], at::full({2}, n * (n + 1) / 2.0)));
      }
    }
  }
}

TEST(InitProcessGroup, DefaultWorldFromTheProcessEnvironment) {
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "1", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(comm::testing::free_tcp_port()).c_str(), 1);
  World w = init_process_group();
  EXPECT_THROW(init_process_group(), ValueError);  // write-once
  EXPECT_EQ(default_world().state(), w.state());
  auto mesh = init_device_mesh("cpu", {1}, {"dp"});
  comm::reset_stats();
  comm::all_gather_v(at::ones({2, 2}), mesh.get_group("dp"));
  EXPECT_EQ(comm::stats()[comm::CollectiveKind::kAllGatherV].calls, 1);
  EXPECT_EQ(comm::stats().bytes_sent(), 0);  // world of one: nothing on the wire
  destroy_process_group();
  EXPECT_THROW(default_world(), ValueError);
  for (const char* v : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) unsetenv(v);
}

TEST(InitProcessGroup, RendezvousTimesOutWhenAPeerNeverArrives) {
  const int port = comm::testing::free_tcp_port();
  ProcessGroupOptions o;
  o.timeout = std::chrono::seconds(3);
  o.env = Env{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
              {"MASTER_PORT", std::to_string(port)}};
  const auto start = std::chrono::steady_clock::now();
  try {
    init_process_group(o);
    ADD_FAILURE() << "expected a timeout";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("init_process_group"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 30);
}

}  // namespace
}  // namespace hyper
