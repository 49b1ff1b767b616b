// Uses the installed torch-free trace module: <hyper/trace.h> and hyper::trace (which brings
// cairo along through the package's pkg-config lookup).
#include <hyper/trace.h>

#include <iostream>

int main() {
  hyper::trace::Timeline tl;
  {
    auto comm = hyper::trace::Region::collective(&tl, "all_gather", 0);
    auto mm = hyper::trace::Region::compute(&tl, "mm", 0);
  }
  const std::string png = hyper::trace::render_step_picture(tl.events());
  std::cout << tl.events().size() << " regions, step picture " << png.size() << " bytes\n";
  return tl.events().size() == 2 && png.rfind("\x89PNG", 0) == 0 ? 0 : 1;
}
