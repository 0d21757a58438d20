#include "frontends/security.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

namespace hotline::frontends {
namespace {

struct RoleEntry {
  const char* name;
  Role role;
};
constexpr RoleEntry kRoles[] = {{"understand", Role::kUnderstand},
                                {"converse", Role::kConverse},
                                {"read_orders", Role::kReadOrders},
                                {"supervise", Role::kSupervise},
                                {"admin", Role::kAdmin}};

std::string Sha256(std::string_view data) {
  unsigned char out[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), out);
  return std::string(reinterpret_cast<const char*>(out), sizeof out);
}

std::string FromHex(const std::string& hex, const std::string& where) {
  if (hex.size() != 64) {
    throw Error(where + ": key_sha256 must be 64 hex digits; got " + std::to_string(hex.size()) +
                " characters");
  }
  std::string out;
  for (size_t i = 0; i < hex.size(); i += 2) {
    int v = 0;
    for (size_t j = i; j < i + 2; ++j) {
      const char c = char(std::tolower(static_cast<unsigned char>(hex[j])));
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) throw Error(where + ": key_sha256 holds a character that is not hex");
      v = v * 16 + d;
    }
    out.push_back(char(v));
  }
  return out;
}

std::string Trimmed(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

template <typename T>
T As(const YAML::Node& n, const std::string& where) {
  try {
    return n.as<T>();
  } catch (const YAML::Exception&) {
    throw Error(where + " has a value of the wrong type");
  }
}

void CheckKeys(const YAML::Node& node, std::initializer_list<const char*> keys,
               const std::string& where) {
  if (!node.IsMap()) throw Error(where + " must be a mapping");
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    if (std::find_if(keys.begin(), keys.end(), [&](const char* k) { return key == k; }) ==
        keys.end()) {
      std::string list;
      for (const char* k : keys) list += (list.empty() ? "" : ", ") + std::string(k);
      throw Error(where + ": unknown key '" + key + "' (expected " + list + ")");
    }
  }
}

ClientConfig ParseClient(const YAML::Node& n, const std::string& where) {
  CheckKeys(n, {"name", "key_sha256", "key_file", "key_env", "roles", "rate_limit"}, where);
  ClientConfig c;
  if (!n["name"]) throw Error(where + ": a client needs a name");
  c.name = As<std::string>(n["name"], where + ".name");
  const std::string at = where + " (" + c.name + ")";
  int sources = 0;
  if (n["key_sha256"]) {
    ++sources;
    c.key_sha256 = FromHex(As<std::string>(n["key_sha256"], at), at);
  }
  if (n["key_file"]) {
    ++sources;
    const std::string path = As<std::string>(n["key_file"], at + ".key_file");
    std::ifstream in(path);
    if (!in) throw Error(at + ": cannot read key_file " + path, Code::kNotFound);
    std::string key((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    key = Trimmed(key);
    if (key.size() < 16) throw Error(at + ": the key in " + path + " is shorter than 16 bytes");
    c.key_sha256 = Sha256(key);
  }
  if (n["key_env"]) {
    ++sources;
    const std::string var = As<std::string>(n["key_env"], at + ".key_env");
    const char* v = std::getenv(var.c_str());
    if (!v || std::string(v).size() < 16) {
      throw Error(at + ": the environment variable " + var + " is unset or shorter than 16 bytes");
    }
    c.key_sha256 = Sha256(v);
  }
  if (sources != 1) throw Error(at + ": give exactly one of key_sha256, key_file, key_env");
  if (!n["roles"] || !n["roles"].IsSequence() || n["roles"].size() == 0) {
    throw Error(at + ": roles must be a non-empty list (understand, converse, read_orders, "
                     "supervise, admin)");
  }
  for (const auto& r : n["roles"]) {
    const std::string name = As<std::string>(r, at + ".roles");
    const auto* e = std::find_if(std::begin(kRoles), std::end(kRoles),
                                 [&](const RoleEntry& x) { return name == x.name; });
    if (e == std::end(kRoles)) {
      throw Error(at + ": unknown role '" + name +
                  "' (expected understand, converse, read_orders, supervise, admin)");
    }
    c.roles |= uint32_t(e->role);
  }
  if (const YAML::Node rl = n["rate_limit"]) {
    CheckKeys(rl, {"per_second", "burst"}, at + ".rate_limit");
    c.rate_per_s = rl["per_second"] ? As<double>(rl["per_second"], at + ".rate_limit") : 0;
    c.burst = rl["burst"] ? As<double>(rl["burst"], at + ".rate_limit") : c.rate_per_s;
    if (!(c.rate_per_s > 0) || !(c.burst >= 1)) {
      throw Error(at + ": rate_limit needs per_second > 0 and burst >= 1");
    }
  }
  return c;
}

// The key out of "Bearer KEY" (any case of "bearer") or a bare x-api-key value.
std::string_view KeyOf(std::string_view credential) {
  constexpr std::string_view kBearer = "bearer ";
  if (credential.size() > kBearer.size()) {
    bool bearer = true;
    for (size_t i = 0; i < kBearer.size(); ++i)
      bearer = bearer && std::tolower(static_cast<unsigned char>(credential[i])) == kBearer[i];
    if (bearer) credential.remove_prefix(kBearer.size());
  }
  while (!credential.empty() && credential.front() == ' ') credential.remove_prefix(1);
  while (!credential.empty() && credential.back() == ' ') credential.remove_suffix(1);
  return credential;
}

}  // namespace

std::string_view RoleName(Role r) {
  for (const auto& e : kRoles)
    if (e.role == r) return e.name;
  return "any";
}

std::string Sha256Hex(std::string_view data) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : Sha256(data)) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

SecurityConfig SecurityConfig::Parse(const YAML::Node& node, const std::string& file) {
  SecurityConfig c;
  if (!node || node.IsNull()) return c;
  const std::string where = file + ": security";
  CheckKeys(node, {"insecure", "reflection", "tls", "clients", "audit_log"}, where);
  if (node["insecure"]) c.insecure = As<bool>(node["insecure"], where + ".insecure");
  if (node["reflection"]) c.reflection = As<bool>(node["reflection"], where + ".reflection");
  if (node["audit_log"]) c.audit_log = As<std::string>(node["audit_log"], where + ".audit_log");
  if (const YAML::Node t = node["tls"]) {
    CheckKeys(t, {"cert", "key", "ca", "client_auth"}, where + ".tls");
    if (t["cert"]) c.tls.cert = As<std::string>(t["cert"], where + ".tls.cert");
    if (t["key"]) c.tls.key = As<std::string>(t["key"], where + ".tls.key");
    if (t["ca"]) c.tls.ca = As<std::string>(t["ca"], where + ".tls.ca");
    std::string auth = "none";
    if (t["client_auth"]) auth = As<std::string>(t["client_auth"], where + ".tls.client_auth");
    if (auth != "none" && auth != "require") {
      throw Error(where + ".tls.client_auth must be none or require; got '" + auth + "'");
    }
    c.tls.require_client_cert = auth == "require";
    if (c.tls.cert.empty() != c.tls.key.empty()) {
      throw Error(where + ".tls needs both cert and key");
    }
    if (c.tls.require_client_cert && c.tls.ca.empty()) {
      throw Error(where + ".tls.client_auth: require needs ca (the CA client certificates chain to)");
    }
    for (const std::string* f : {&c.tls.cert, &c.tls.key, &c.tls.ca}) {
      if (!f->empty() && !std::filesystem::exists(*f)) {
        throw Error(where + ".tls: no such file " + *f, Code::kNotFound);
      }
    }
  }
  if (const YAML::Node cl = node["clients"]) {
    if (!cl.IsSequence()) throw Error(where + ".clients must be a list");
    for (size_t i = 0; i < cl.size(); ++i) {
      c.clients.push_back(ParseClient(cl[i], where + ".clients[" + std::to_string(i) + "]"));
      for (size_t j = 0; j + 1 < c.clients.size(); ++j) {
        if (c.clients[j].name == c.clients.back().name)
          throw Error(where + ".clients: the name '" + c.clients[j].name + "' appears twice");
        if (c.clients[j].key_sha256 == c.clients.back().key_sha256)
          throw Error(where + ".clients: " + c.clients[j].name + " and " +
                      c.clients.back().name + " have the same key");
      }
    }
  }
  return c;
}

bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  in_addr a{};
  if (inet_pton(AF_INET, host.c_str(), &a) == 1) return (ntohl(a.s_addr) >> 24) == 127;
  return false;
}

void CheckExposure(const std::string& host, const SecurityConfig& c) {
  if (c.reflection && c.auth_enabled()) {
    throw Error("security.reflection cannot be on together with clients: reflection answers "
                "without a key",
                Code::kFailedPrecondition);
  }
  if (IsLoopbackHost(host) || c.insecure) return;
  if (!c.tls.enabled() || !c.auth_enabled()) {
    throw Error("host " + host + " is not a loopback address, and the config has " +
                    std::string(!c.tls.enabled() ? "no TLS (security.tls)" : "") +
                    (!c.tls.enabled() && !c.auth_enabled() ? " and " : "") +
                    (!c.auth_enabled() ? "no clients (security.clients)" : "") +
                    ": refusing to serve work orders in clear to the network. Configure both, "
                    "or set security.insecure: true to accept the risk",
                Code::kFailedPrecondition);
  }
}

Security::Security(SecurityConfig config, serving::Logger* logger)
    : config_(std::move(config)), logger_(logger) {
  if (config_.audit_log.empty()) return;
  const auto dir = std::filesystem::path(config_.audit_log).parent_path();
  std::error_code ec;
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  audit_fd_ = ::open(config_.audit_log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (audit_fd_ < 0) {
    throw Error("cannot open the audit log " + config_.audit_log + ": " + std::strerror(errno),
                Code::kUnavailable);
  }
}

Security::~Security() {
  if (audit_fd_ >= 0) ::close(audit_fd_);
}

const ClientConfig* Security::Identify(std::string_view key) const {
  // Every client's digest is compared, whatever matched before: the time taken does not depend
  // on which client (if any) the key belongs to, nor on how much of a digest matched.
  const std::string digest = Sha256(key);
  const ClientConfig* found = nullptr;
  for (const ClientConfig& c : config_.clients) {
    const bool same = CRYPTO_memcmp(digest.data(), c.key_sha256.data(), digest.size()) == 0;
    found = same ? &c : found;
  }
  return found;
}

bool Security::Take(const ClientConfig& c) {
  if (c.rate_per_s <= 0) return true;
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  auto [it, fresh] = buckets_.try_emplace(c.name);
  Bucket& b = it->second;
  if (fresh) {
    b.tokens = c.burst;
  } else {
    b.tokens = std::min(c.burst, b.tokens + std::chrono::duration<double>(now - b.last).count() *
                                                c.rate_per_s);
  }
  b.last = now;
  if (b.tokens < 1) return false;
  b.tokens -= 1;
  return true;
}

AuthDecision Security::Check(std::string_view credential, Role need) {
  if (!auth_enabled()) return {Status(), "anonymous"};
  const std::string_view key = KeyOf(credential);
  const ClientConfig* c = key.empty() ? nullptr : Identify(key);
  if (!c) {
    return {Status(Code::kUnauthenticated,
                   key.empty() ? "this server needs an API key: send 'authorization: Bearer KEY' "
                                 "or 'x-api-key: KEY'"
                               : "the API key is not valid"),
            ""};
  }
  const bool allowed = need == Role::kNone || (c->roles & uint32_t(need)) != 0 ||
                       (c->roles & uint32_t(Role::kAdmin)) != 0;
  if (!allowed) {
    return {Status(Code::kPermissionDenied, "client '" + c->name + "' lacks the role " +
                                                std::string(RoleName(need))),
            c->name};
  }
  if (!Take(*c)) {
    return {Status(Code::kResourceExhausted,
                   "client '" + c->name + "' is over its rate limit of " +
                       std::to_string(int(c->rate_per_s)) + " calls a second"),
            c->name};
  }
  return {Status(), c->name};
}

std::string Security::ClientName(std::string_view credential) const {
  if (!auth_enabled()) return "anonymous";
  const std::string_view key = KeyOf(credential);
  const ClientConfig* c = key.empty() ? nullptr : Identify(key);
  return c ? c->name : std::string();
}

uint32_t Security::RolesOf(std::string_view credential) const {
  if (!auth_enabled()) return ~uint32_t(0);
  const std::string_view key = KeyOf(credential);
  const ClientConfig* c = key.empty() ? nullptr : Identify(key);
  return c ? c->roles : 0;
}

void Security::Audit(const std::string& client, std::string_view transport,
                     std::string_view action, const std::string& order_id, Code code,
                     const std::string& detail) {
  if (audit_fd_ < 0) return;
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()) %
                  1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char ts[40];
  std::snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, int(ms.count()));
  nlohmann::json line = {{"ts", ts},
                         {"client", client},
                         {"transport", transport},
                         {"action", action},
                         {"order_id", order_id},
                         {"code", CodeName(code)}};
  if (!detail.empty()) line["detail"] = detail;
  const std::string text =
      line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::lock_guard<std::mutex> lock(audit_mu_);
  // One write per line with O_APPEND: lines from several processes never interleave.
  if (::write(audit_fd_, text.data(), text.size()) != ssize_t(text.size()) && logger_) {
    logger_->Error("audit_write_failed", {{"file", config_.audit_log}, {"action", action}});
  }
}

}  // namespace hotline::frontends
