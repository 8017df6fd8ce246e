// Building mount tables; see namespace_builder.hpp.
#include "namespace/namespace_builder.hpp"

#include "namespace/create_policy.hpp"
#include "namespace/striped_layout.hpp"
#include "namespace/union_layout.hpp"

namespace skein {

std::shared_ptr<const MountTable> build_mount_table(const NamespaceConfig& ns,
                                                    const BackendMap& backends) {
  auto policy = make_create_policy(ns.create_policy);
  if (!policy)
    throw ConfigError("namespace '" + ns.name + "': unknown create policy '" + ns.create_policy +
                      "'");
  std::vector<Mount> mounts;
  for (auto& m : ns.mounts) {
    std::vector<Branch> branches;
    for (auto& b : m.branches) {
      auto it = backends.find(b.backend);
      if (it == backends.end())
        throw ConfigError("namespace '" + ns.name + "', mount '" + m.path + "': no backend '" +
                          b.backend + "'");
      branches.push_back({it->second, b.mode});
    }
    if (branches.empty()) continue;  // every backend of this mount was removed
    std::shared_ptr<Layout> layout;
    if (m.layout == LayoutKind::striped) {
      std::vector<std::shared_ptr<Backend>> stripe_backends;
      for (auto& b : branches) stripe_backends.push_back(b.backend);
      layout = std::make_shared<StripedLayout>(std::move(stripe_backends), m.stripe_size);
    } else {
      layout = std::make_shared<UnionLayout>(std::move(branches), policy);
    }
    mounts.push_back({m.path, std::move(layout)});
  }
  return std::make_shared<const MountTable>(std::move(mounts));
}

}  // namespace skein
