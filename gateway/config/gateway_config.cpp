// Loading and checking the gateway's TOML configuration; see gateway_config.hpp.
#include "config/gateway_config.hpp"

#include <sys/stat.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

#include "namespace/create_policy.hpp"
#include "skein/address.hpp"
#include "skein/credential_file.hpp"
#include "skein/logging.hpp"
#include "skein/path.hpp"
#include "skein/size.hpp"

namespace skein {
namespace {

class Checker {
 public:
  explicit Checker(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const toml::node* node, const std::string& what) const {
    std::ostringstream os;
    os << source_;
    if (node && node->source().begin.line) os << ":" << node->source().begin.line;
    os << ": " << what;
    throw ConfigError(os.str());
  }

  void only_keys(const toml::table& t, const std::set<std::string>& allowed,
                 const std::string& where) {
    for (auto& [k, v] : t) {
      if (!allowed.count(std::string(k.str())))
        fail(&v, "unknown key '" + std::string(k.str()) + "' in " + where);
    }
  }

  std::string string(const toml::table& t, const char* key, const std::string& where, bool required,
                     std::string def = {}) {
    const toml::node* n = t.get(key);
    if (!n) {
      if (required) fail(&t, where + " needs '" + key + "'");
      return def;
    }
    auto v = n->value<std::string>();
    if (!v || !n->is_string())
      fail(n, "'" + std::string(key) + "' in " + where + " must be a string");
    return *v;
  }

  int64_t integer(const toml::table& t, const char* key, const std::string& where, int64_t def,
                  int64_t lo, int64_t hi) {
    const toml::node* n = t.get(key);
    if (!n) return def;
    if (!n->is_integer()) fail(n, "'" + std::string(key) + "' in " + where + " must be an integer");
    int64_t v = *n->value<int64_t>();
    if (v < lo || v > hi)
      fail(n, "'" + std::string(key) + "' in " + where + " must be between " + std::to_string(lo) +
                  " and " + std::to_string(hi) + ", not " + std::to_string(v));
    return v;
  }

  uint64_t size(const toml::table& t, const char* key, const std::string& where, uint64_t def) {
    const toml::node* n = t.get(key);
    if (!n) return def;
    if (n->is_integer() && *n->value<int64_t>() >= 0) return uint64_t(*n->value<int64_t>());
    if (n->is_string()) {
      auto v = parse_size(*n->value<std::string>());
      if (v) return *v;
    }
    fail(n, "'" + std::string(key) + "' in " + where +
                " must be a size such as 4096, \"64K\", \"4M\", \"2G\"");
  }

  void readable_file(const toml::table& t, const char* key, const std::string& value,
                     const std::string& where) {
    if (access(value.c_str(), R_OK) != 0)
      fail(t.get(key), "'" + std::string(key) + "' in " + where + ": cannot read " + value);
  }

  // A file holding a secret: readable, and by its owner only.
  void private_file(const toml::table& t, const char* key, const std::string& value,
                    const std::string& what) {
    if (auto problem = private_file_problem(value, what)) fail(t.get(key), *problem);
  }

  std::vector<std::string> strings(const toml::table& t, const char* key,
                                   const std::string& where) {
    std::vector<std::string> out;
    const toml::node* n = t.get(key);
    if (!n) return out;
    auto* arr = n->as_array();
    if (!arr) fail(n, "'" + std::string(key) + "' in " + where + " must be a list of strings");
    for (auto& item : *arr) {
      auto v = item.value<std::string>();
      if (!v || !item.is_string())
        fail(&item, "'" + std::string(key) + "' in " + where + " must be a list of strings");
      out.push_back(*v);
    }
    return out;
  }

 private:
  std::string source_;
};

// The backend's directory as host:port:root, the root without a trailing '/'.
std::string place_of(const BackendConfig& b) {
  std::string root = b.root;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  std::string host = b.endpoint.host;
  for (auto& ch : host) ch = static_cast<char>(tolower((unsigned char)ch));
  return host + ":" + std::to_string(b.endpoint.port) + ":" + root;
}

// Whether two backends reach the same files: the same server, and one root is the other or
// lies below it.
bool same_files(const BackendConfig& a, const BackendConfig& b) {
  const std::string x = place_of(a), y = place_of(b);
  if (x == y) return true;
  const auto& [shorter, longer] = x.size() < y.size() ? std::tie(x, y) : std::tie(y, x);
  return longer.starts_with(shorter) && (shorter.back() == '/' || longer[shorter.size()] == '/');
}

const BackendConfig* find_backend(const GatewayConfig& cfg, const std::string& name) {
  for (auto& b : cfg.backends)
    if (b.name == name) return &b;
  return nullptr;
}

TlsConfig parse_tls(Checker& c, const toml::node* node) {
  auto* t = node->as_table();
  const std::string where = "[gateway.tls]";
  if (!t) c.fail(node, where + " must be a table");
  c.only_keys(*t,
              {"cert_file", "key_file", "client_ca_file", "crl_dir", "node_clients",
               "admin_clients", "reload_interval_s"},
              where);
  TlsConfig tls;
  tls.cert_file = c.string(*t, "cert_file", where, true);
  c.readable_file(*t, "cert_file", tls.cert_file, where);
  tls.key_file = c.string(*t, "key_file", where, true);
  c.private_file(*t, "key_file", tls.key_file, "'key_file' in " + where);
  tls.client_ca_file = c.string(*t, "client_ca_file", where, false);
  if (t->get("client_ca_file")) c.readable_file(*t, "client_ca_file", tls.client_ca_file, where);
  tls.crl_dir = c.string(*t, "crl_dir", where, false);
  tls.reload_interval_s = static_cast<int>(c.integer(*t, "reload_interval_s", where, 60, 1, 86400));
  for (auto [key, list] : {std::pair{"node_clients", &tls.node_clients},
                           std::pair{"admin_clients", &tls.admin_clients}}) {
    if (!t->get(key)) continue;
    if (tls.client_ca_file.empty())
      c.fail(t->get(key), std::string("'") + key + "' in " + where +
                              " maps client certificates to roles: it needs 'client_ca_file' "
                              "(mutual TLS)");
    list->clear();
    for (auto& text : c.strings(*t, key, where)) {
      auto p = CertificatePattern::parse(text);
      if (!p)
        c.fail(t->get(key), std::string("'") + key + "' in " + where + ": '" + text +
                                "' must be \"CN=PATTERN\" (the certificate's common name) or "
                                "\"SAN=PATTERN\" (a subject alternative name), * and ? allowed");
      list->push_back(*p);
    }
  }
  return tls;
}

std::chrono::seconds duration(Checker& c, const toml::table& t, const char* key,
                              const std::string& where, std::chrono::seconds def) {
  const toml::node* n = t.get(key);
  if (!n) return def;
  if (n->is_integer() && *n->value<int64_t>() > 0 &&
      *n->value<int64_t>() <= kLongestDuration.count())
    return std::chrono::seconds(*n->value<int64_t>());
  if (n->is_string()) {
    auto v = parse_duration(*n->value<std::string>());
    if (v && v->count() > 0) return *v;
  }
  c.fail(n, "'" + std::string(key) + "' in " + where +
                " must be a duration such as 3600, \"90s\", \"30m\", \"24h\", \"7d\", of at "
                "most 100 years (36525d)");
}

JobsConfig parse_jobs(Checker& c, const toml::node* node, const GatewayConfig& cfg) {
  auto* t = node->as_table();
  const std::string where = "[jobs]";
  if (!t) c.fail(node, where + " must be a table");
  c.only_keys(
      *t,
      {"database", "default_pool", "pool", "default_quota_inodes", "default_lifetime",
       "max_lifetime", "allow_root_owner", "orphan_grace", "stage_threads", "stage_max_running"},
      where);
  JobsConfig jobs;
  jobs.database = c.string(*t, "database", where, true);
  if (jobs.database.empty() || jobs.database.front() != '/')
    c.fail(t->get("database"), "'database' in [jobs] must be an absolute path");
  jobs.default_quota_inodes =
      static_cast<uint64_t>(c.integer(*t, "default_quota_inodes", where, 1000000, 1, INT64_MAX));
  jobs.default_lifetime = duration(c, *t, "default_lifetime", where, jobs.default_lifetime);
  jobs.max_lifetime = duration(c, *t, "max_lifetime", where, jobs.max_lifetime);
  if (jobs.default_lifetime > jobs.max_lifetime)
    c.fail(t->get("default_lifetime"), "'default_lifetime' in [jobs] is longer than max_lifetime");
  jobs.orphan_grace = duration(c, *t, "orphan_grace", where, jobs.orphan_grace);
  jobs.stage_threads =
      static_cast<unsigned>(c.integer(*t, "stage_threads", where, jobs.stage_threads, 1, 256));
  jobs.stage_max_running = static_cast<unsigned>(
      c.integer(*t, "stage_max_running", where, jobs.stage_max_running, 1, 64));
  if (auto* r = t->get("allow_root_owner")) {
    if (!r->is_boolean()) c.fail(r, "'allow_root_owner' in [jobs] must be true or false");
    jobs.allow_root_owner = *r->value<bool>();
  }
  // Which static mounts use which backend: a pool's backends must serve none, or the job
  // directories would show in them (and their files could overwrite a job's).
  std::map<std::string, std::string> used_by;
  for (auto& n : cfg.namespaces)
    for (auto& m : n.mounts)
      for (auto& b : m.branches) used_by.emplace(b.backend, n.name + ":" + m.path);
  std::set<std::string> in_pools;
  auto* pools = t->get("pool");
  if (!pools) c.fail(t, "[jobs] needs at least one [[jobs.pool]] of backends");
  auto* arr = pools->as_array();
  if (!arr || !arr->is_array_of_tables())
    c.fail(pools, "'pool' in [jobs] must be [[jobs.pool]] tables");
  for (auto& pnode : *arr) {
    auto& pt = *pnode.as_table();
    c.only_keys(pt, {"name", "backends", "stripe_size"}, "[[jobs.pool]]");
    PoolConfig pool;
    pool.name = c.string(pt, "name", "[[jobs.pool]]", true);
    if (pool.name.empty() || pool.name.find_first_of("/ \t") != std::string::npos)
      c.fail(pt.get("name"),
             "pool name '" + pool.name + "' must be non-empty, without '/' or spaces");
    if (jobs.pool(pool.name)) c.fail(&pt, "pool '" + pool.name + "' is defined twice");
    const std::string pwhere = "pool '" + pool.name + "'";
    for (auto& name : c.strings(pt, "backends", pwhere)) {
      if (!find_backend(cfg, name))
        c.fail(pt.get("backends"), pwhere + " names unknown backend '" + name + "'");
      if (auto u = used_by.find(name); u != used_by.end())
        c.fail(pt.get("backends"), "backend '" + name + "' of " + pwhere +
                                       " is also a branch of mount " + u->second +
                                       ": a pool's backends must serve no other namespace");
      // Nor may another backend reach the pool's files (the same directory, one above or one
      // below it on the same server): its namespace would show every job's directory.
      for (auto& [other, mount] : used_by) {
        const BackendConfig* a = find_backend(cfg, name);
        const BackendConfig* b = find_backend(cfg, other);
        if (a && b && same_files(*a, *b))
          c.fail(pt.get("backends"),
                 "backend '" + name + "' of " + pwhere + " (" + place_of(*a) +
                     ") reaches the same files as backend '" + other + "' (" + place_of(*b) +
                     ") of mount " + mount +
                     ": a pool's files must be reachable by no other namespace");
      }
      if (!in_pools.insert(name).second)
        c.fail(pt.get("backends"), "backend '" + name + "' is in two pools (or twice in one)");
      pool.backends.push_back(name);
    }
    if (pool.backends.empty()) c.fail(&pt, pwhere + " needs a non-empty list 'backends'");
    pool.stripe_size = c.size(pt, "stripe_size", pwhere, pool.stripe_size);
    if (pool.stripe_size < 4096 || pool.stripe_size % 4096 != 0)
      c.fail(pt.get("stripe_size"), "stripe_size of " + pwhere + " must be a multiple of 4K");
    jobs.pools.push_back(std::move(pool));
  }
  jobs.default_pool = c.string(*t, "default_pool", where, false, jobs.pools.front().name);
  if (!jobs.pool(jobs.default_pool))
    c.fail(t->get("default_pool"),
           "default_pool '" + jobs.default_pool + "' is not a [[jobs.pool]]");
  return jobs;
}

}  // namespace

GatewayConfig parse_gateway_config(std::string_view text, const std::string& source) {
  Checker c(source);
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << source << ":" << e.source().begin.line << ": " << e.description();
    throw ConfigError(os.str());
  }
  c.only_keys(root, {"gateway", "backend", "namespace", "jobs"}, "the file");

  GatewayConfig cfg;
  cfg.source = source;
  if (auto* gw = root.get("gateway")) {
    auto* t = gw->as_table();
    if (!t) c.fail(gw, "[gateway] must be a table");
    c.only_keys(*t,
                {"listen", "log_level", "timeout_ms", "admin_token_file", "lease_timeout_ms",
                 "revalidate_interval_ms", "revalidate_batch", "interest_limit", "remote_watch",
                 "insecure", "tls", "backend_files_dir", "orphan_timeout_ms", "max_open_files"},
                "[gateway]");
    cfg.lease_timeout =
        std::chrono::milliseconds(c.integer(*t, "lease_timeout_ms", "[gateway]", 1000, 10, 600000));
    cfg.revalidate_interval = std::chrono::milliseconds(
        c.integer(*t, "revalidate_interval_ms", "[gateway]", 1000, 50, 3600000));
    cfg.revalidate_batch =
        static_cast<size_t>(c.integer(*t, "revalidate_batch", "[gateway]", 1000, 1, 10000000));
    cfg.orphan_timeout = std::chrono::milliseconds(
        c.integer(*t, "orphan_timeout_ms", "[gateway]", 600000, 1000, 7 * 86400000LL));
    cfg.interest_limit =
        static_cast<size_t>(c.integer(*t, "interest_limit", "[gateway]", 200000, 1, 100000000));
    cfg.max_open_files = static_cast<size_t>(c.integer(
        *t, "max_open_files", "[gateway]", static_cast<int64_t>(cfg.max_open_files), 1, 10000000));
    if (auto* rw = t->get("remote_watch")) {
      if (!rw->is_boolean()) c.fail(rw, "'remote_watch' in [gateway] must be true or false");
      cfg.remote_watch = *rw->value<bool>();
    }
    cfg.listen = c.string(*t, "listen", "[gateway]", false, cfg.listen);
    // A Unix socket's path is gRPC's to judge.
    if (cfg.listen.rfind("unix:", 0) != 0 && !port_of_address(cfg.listen))
      c.fail(t->get("listen"),
             "'listen' must be HOST:PORT with a port up to 65535 (0: any "
             "free one), e.g. \"0.0.0.0:7070\"");
    cfg.log_level = c.string(*t, "log_level", "[gateway]", false, cfg.log_level);
    if (!is_log_level(cfg.log_level))
      c.fail(t->get("log_level"),
             "'log_level' must be one of trace, debug, info, warn, error, "
             "critical, off (not '" +
                 cfg.log_level + "')");
    cfg.timeout =
        std::chrono::milliseconds(c.integer(*t, "timeout_ms", "[gateway]", 15000, 100, 3600000));
    cfg.admin_token_file = c.string(*t, "admin_token_file", "[gateway]", false);
    // The token grants everything: like an SSH key, only its owner may read it.
    if (t->get("admin_token_file"))
      c.private_file(*t, "admin_token_file", cfg.admin_token_file, "'admin_token_file'");
    if (auto* in = t->get("insecure")) {
      if (!in->is_boolean()) c.fail(in, "'insecure' in [gateway] must be true or false");
      cfg.insecure = *in->value<bool>();
    }
    cfg.backend_files_dir = c.string(*t, "backend_files_dir", "[gateway]", false);
    if (t->get("backend_files_dir")) {
      struct stat st {};
      if (cfg.backend_files_dir.empty() || cfg.backend_files_dir.front() != '/' ||
          ::stat(cfg.backend_files_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        c.fail(t->get("backend_files_dir"),
               "'backend_files_dir' must be an existing directory, as an absolute path");
    }
    if (auto* tls = t->get("tls")) cfg.tls = parse_tls(c, tls);
  }
  if (!cfg.tls && !cfg.insecure)
    c.fail(root.get("gateway"),
           "[gateway] needs a [gateway.tls] table (cert_file, key_file) so that gRPC is "
           "encrypted; plaintext only with 'insecure = true' in [gateway] (never across a "
           "network you do not trust)");

  std::set<std::string> backend_names;
  if (auto* bs = root.get("backend")) {
    auto* arr = bs->as_array();
    if (!arr || !arr->is_array_of_tables())
      c.fail(bs, "'backend' must be an array of tables: [[backend]]");
    for (auto& node : *arr) {
      auto& t = *node.as_table();
      std::string where = "[[backend]]";
      c.only_keys(t,
                  {"name", "host", "port", "user", "identity_file", "known_hosts", "root",
                   "connections", "min_free_space", "ssh_transport", "ssh_config",
                   "certificate_file", "proxy_jump", "ssh_agent"},
                  where);
      BackendConfig b;
      b.name = c.string(t, "name", where, true);
      where = "backend '" + b.name + "'";
      if (b.name.empty() || b.name.find_first_of("/ \t") != std::string::npos)
        c.fail(t.get("name"),
               "backend name '" + b.name + "' must be non-empty, without '/' or spaces");
      if (!backend_names.insert(b.name).second)
        c.fail(&t, "backend '" + b.name + "' is defined twice");
      auto& ep = b.endpoint;
      ep.host = c.string(t, "host", where, true);
      ep.port = static_cast<int>(c.integer(t, "port", where, 22, 1, 65535));
      const char* user = getenv("USER");
      ep.user = c.string(t, "user", where, false, user ? user : "root");
      // Without an identity file: the agent, then what ssh_config names.
      ep.identity_file = c.string(t, "identity_file", where, false);
      if (!ep.identity_file.empty()) {
        if (auto problem = sftp::private_key_problem(ep.identity_file))
          c.fail(t.get("identity_file"), "'identity_file' in " + where + ": " + *problem);
      }
      ep.certificate_file = c.string(t, "certificate_file", where, false);
      if (!ep.certificate_file.empty())
        c.readable_file(t, "certificate_file", ep.certificate_file, where);
      // Without a known_hosts file: the site's (~/.ssh/known_hosts, /etc/ssh/ssh_known_hosts).
      ep.known_hosts = c.string(t, "known_hosts", where, false);
      if (!ep.known_hosts.empty()) c.readable_file(t, "known_hosts", ep.known_hosts, where);
      ep.ssh_config = c.string(t, "ssh_config", where, false);
      if (!ep.ssh_config.empty()) c.readable_file(t, "ssh_config", ep.ssh_config, where);
      ep.proxy_jump = c.string(t, "proxy_jump", where, false);
      ep.agent_socket = c.string(t, "ssh_agent", where, false);
      ep.timeout = cfg.timeout;
      const std::string transport = c.string(t, "ssh_transport", where, false, "libssh");
      if (auto problem = sftp::parse_ssh_transport(transport, ep.transport))
        c.fail(t.get("ssh_transport"), "'ssh_transport' in " + where + ": " + *problem);
      if (auto problem = sftp::endpoint_problem(ep))
        c.fail(t.get(ep.proxy_jump.empty() ? "host" : "proxy_jump"), where + ": " + *problem);
      b.root = c.string(t, "root", where, true);
      // Normalised as a backend added at run time is: "/data/" and "/data" are one root (the
      // remote watcher compares the server's paths with it).
      if (auto root = normalize_virtual_path(b.root))  // nothing for a relative path
        b.root = *root;
      else
        c.fail(t.get("root"), "'root' in " + where + " must be an absolute path");
      b.connections = static_cast<int>(c.integer(t, "connections", where, 4, 1, 64));
      b.min_free_bytes = c.size(t, "min_free_space", where, 0);
      cfg.backends.push_back(std::move(b));
    }
  }
  if (cfg.backends.empty()) c.fail(nullptr, "no [[backend]] defined");

  std::set<std::string> ns_names;
  if (auto* ns = root.get("namespace")) {
    auto* arr = ns->as_array();
    if (!arr || !arr->is_array_of_tables())
      c.fail(ns, "'namespace' must be an array of tables: [[namespace]]");
    for (auto& node : *arr) {
      auto& t = *node.as_table();
      c.only_keys(t, {"name", "token_file", "create_policy", "mount"}, "[[namespace]]");
      NamespaceConfig n;
      n.name = c.string(t, "name", "[[namespace]]", true);
      std::string where = "namespace '" + n.name + "'";
      if (n.name.empty() || n.name.find('/') != std::string::npos)
        c.fail(t.get("name"), "namespace name '" + n.name + "' must be non-empty, without '/'");
      if (!ns_names.insert(n.name).second)
        c.fail(&t, "namespace '" + n.name + "' is defined twice");
      n.token_file = c.string(t, "token_file", where, false);
      if (!t.get("token_file"))
        c.fail(&t, where +
                       " needs 'token_file': every call names a namespace and carries its "
                       "token (a file of mode 0600 holding a random string, e.g. from "
                       "`openssl rand -hex 32`)");
      c.private_file(t, "token_file", n.token_file, "token_file of " + where);
      n.create_policy = c.string(t, "create_policy", where, false, "ff");
      if (!make_create_policy(n.create_policy))
        c.fail(t.get("create_policy"), "unknown create_policy '" + n.create_policy + "' in " +
                                           where + "; known: " + create_policy_names());
      auto* mounts = t.get("mount");
      if (!mounts) c.fail(&t, where + " needs at least one [[namespace.mount]]");
      auto* marr = mounts->as_array();
      if (!marr || !marr->is_array_of_tables())
        c.fail(mounts, "'mount' in " + where + " must be [[namespace.mount]] tables");
      std::set<std::string> paths;
      for (auto& mnode : *marr) {
        auto& mt = *mnode.as_table();
        c.only_keys(mt, {"path", "backends", "layout", "stripe_size"}, "a mount of " + where);
        MountConfig m;
        std::string raw = c.string(mt, "path", "a mount of " + where, true);
        auto norm = normalize_virtual_path(raw);
        if (!norm)
          c.fail(mt.get("path"), "mount path '" + raw + "' must be an absolute path without '..'");
        m.path = *norm;
        if (!paths.insert(m.path).second)
          c.fail(&mt, "mount path '" + m.path + "' appears twice in " + where);
        auto* bl = mt.get("backends");
        if (!bl || !bl->is_array() || bl->as_array()->empty())
          c.fail(bl ? bl : &mt,
                 "mount '" + m.path + "' of " + where + " needs a non-empty list 'backends'");
        std::set<std::string> used;
        for (auto& b : *bl->as_array()) {
          auto text = b.value<std::string>();
          if (!text) c.fail(&b, "backend names in mount '" + m.path + "' must be strings");
          BranchConfig branch;
          branch.backend = text->substr(0, text->find('='));
          if (text->find('=') != std::string::npos) {
            auto mode = parse_branch_mode(text->substr(text->find('=') + 1));
            if (!mode)
              c.fail(&b,
                     "branch '" + *text + "' of mount '" + m.path + "': mode must be RW, RO or NC");
            branch.mode = *mode;
          }
          if (!backend_names.count(branch.backend))
            c.fail(&b, "mount '" + m.path + "' of " + where + " names unknown backend '" +
                           branch.backend + "'");
          if (!used.insert(branch.backend).second)
            c.fail(&b, "mount '" + m.path + "' of " + where + " names backend '" + branch.backend +
                           "' twice");
          m.branches.push_back(branch);
        }
        std::string layout = c.string(mt, "layout", "mount '" + m.path + "'", false, "union");
        if (layout == "striped") {
          m.layout = LayoutKind::striped;
          m.stripe_size = c.size(mt, "stripe_size", "mount '" + m.path + "'", 1 << 20);
          if (m.stripe_size < 4096 || m.stripe_size % 4096 != 0)
            c.fail(mt.get("stripe_size"),
                   "stripe_size of mount '" + m.path + "' must be a multiple of 4K");
          for (auto& br : m.branches)
            if (br.mode != BranchMode::read_write)
              c.fail(bl, "striped mount '" + m.path + "' takes only read-write backends");
          // Two parts of one file in one directory would be one file: each overwrites the other.
          for (size_t i = 0; i < m.branches.size(); ++i) {
            for (size_t j = i + 1; j < m.branches.size(); ++j) {
              auto* a = find_backend(cfg, m.branches[i].backend);
              auto* b = find_backend(cfg, m.branches[j].backend);
              if (same_files(*a, *b))
                c.fail(bl, "striped mount '" + m.path + "': backends '" + a->name + "' (" +
                               place_of(*a) + ") and '" + b->name + "' (" + place_of(*b) +
                               ") reach the same directory, so their parts of a file would "
                               "overwrite each other; give each backend a directory of its own");
            }
          }
        } else if (layout != "union") {
          c.fail(mt.get("layout"), "layout of mount '" + m.path +
                                       "' must be \"union\" or \"striped\", not '" + layout + "'");
        } else if (mt.get("stripe_size")) {
          c.fail(mt.get("stripe_size"), "stripe_size is only for layout = \"striped\"");
        }
        n.mounts.push_back(std::move(m));
      }
      cfg.namespaces.push_back(std::move(n));
    }
  }
  if (cfg.namespaces.empty() && !root.get("jobs")) c.fail(nullptr, "no [[namespace]] defined");
  if (auto* jobs = root.get("jobs")) cfg.jobs = parse_jobs(c, jobs, cfg);
  return cfg;
}

std::vector<std::string> shared_root_warnings(const GatewayConfig& cfg) {
  struct Use {
    const NamespaceConfig* ns;
    const MountConfig* mount;
  };
  std::vector<Use> uses;
  for (auto& ns : cfg.namespaces)
    for (auto& m : ns.mounts) uses.push_back({&ns, &m});
  // The first pair of backends, one of each mount, that reach the same files.
  auto first_shared =
      [&](const MountConfig& x,
          const MountConfig& y) -> std::pair<const BackendConfig*, const BackendConfig*> {
    for (auto& xb : x.branches)
      for (auto& yb : y.branches) {
        auto* a = find_backend(cfg, xb.backend);
        auto* b = find_backend(cfg, yb.backend);
        if (a && b && same_files(*a, *b)) return {a, b};
      }
    return {nullptr, nullptr};
  };
  std::vector<std::string> out;
  for (size_t i = 0; i < uses.size(); ++i) {
    const auto& striped = uses[i];
    if (striped.mount->layout != LayoutKind::striped) continue;
    for (size_t j = 0; j < uses.size(); ++j) {
      const auto& other = uses[j];
      // Two striped mounts: say it once.
      if (i == j || (other.mount->layout == LayoutKind::striped && j < i)) continue;
      auto [a, b] = first_shared(*striped.mount, *other.mount);
      if (!a) continue;
      out.push_back("striped mount " + striped.ns->name + ":" + striped.mount->path +
                    " and mount " + other.ns->name + ":" + other.mount->path +
                    " reach the same files (" +
                    (a == b ? "both use backend '" + a->name + "' at " + place_of(*a)
                            : "backend '" + a->name + "' at " + place_of(*a) + ", backend '" +
                                  b->name + "' at " + place_of(*b)) +
                    "): a file made through one shows through the other, as a part or whole, "
                    "and a write through one overwrites the other's data; give the striped "
                    "mount directories no other mount uses");
    }
  }
  return out;
}

GatewayConfig load_gateway_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(path + ": cannot read the file");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_gateway_config(ss.str(), path);
}

std::string pool_files_reached_by(const GatewayConfig& cfg, const BackendConfig& b) {
  if (!cfg.jobs) return "";
  for (auto& pool : cfg.jobs->pools)
    for (auto& name : pool.backends) {
      const BackendConfig* pooled = find_backend(cfg, name);
      if (pooled && same_files(b, *pooled))
        return "backend '" + b.name + "' (" + place_of(b) +
               ") reaches the same files as backend '" + name + "' (" + place_of(*pooled) +
               ") of job pool '" + pool.name +
               "': a pool's files must be reachable by no other namespace";
    }
  return "";
}

}  // namespace skein
