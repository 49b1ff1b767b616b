// Uses the installed torch-free core: <hyper/core.h> and hyper::core only.
#include <hyper/core.h>

#include <iostream>

int main() {
  hyper::Placement s = hyper::Shard(0);
  hyper::Placement g = hyper::RaggedShard({0, 1}, {1, 2});
  std::cout << s.to_string() << " " << g.to_string() << "\n";
  return hyper::Shard(0).to_string() == "S(0)" ? 0 : 1;
}
