#include "hyper/comm/mesh_attachment.h"

#include <mutex>

#include "hyper/comm/internal/state.h"
#include "hyper/core/errors.h"

namespace hyper::comm {

std::shared_ptr<void> mesh_attachment(const DeviceMesh& mesh, const std::string& key,
                                      const std::function<std::shared_ptr<void>()>& make) {
  HYPER_CHECK_VALUE(mesh.defined(), "mesh_attachment(", key, "): the mesh is undefined");
  internal::MeshShared& shared = *mesh.state()->shared;
  std::lock_guard<std::mutex> lock(shared.mu);
  auto it = shared.attachments.find(key);
  if (it == shared.attachments.end()) it = shared.attachments.emplace(key, make()).first;
  return it->second;
}

}  // namespace hyper::comm
