// Who may call the server, and over what: server.yaml's security: section.
//
//   security:
//     insecure: false       # true: allow a non-loopback host without TLS and authentication
//     reflection: false     # gRPC server reflection (refused together with clients)
//     tls: {cert: server.pem, key: server.key, ca: ca.pem, client_auth: require}  # or none
//     audit_log: var/audit.jsonl   # work-order reads and writes, one JSON object a line (0600)
//     clients:
//       - name: asr-gateway
//         key_sha256: 5e88...        # or key_file: path, or key_env: VARIABLE
//         roles: [understand, converse]
//         rate_limit: {per_second: 50, burst: 100}   # optional; none: unlimited
//
// With clients listed, authentication is on: every gRPC method (hotline.v1 and KServe v2) and
// every HTTP route answers UNAUTHENTICATED / 401 without a valid key, PERMISSION_DENIED / 403 for
// a role the client lacks, and RESOURCE_EXHAUSTED / 429 over its rate. The key goes in
// `authorization: Bearer KEY` or `x-api-key: KEY`. Only liveness and readiness (grpc.health.v1,
// /healthz, /readyz, /v2/health/*) stay open, for the orchestrator's probes.
// Keys are held as SHA-256 digests and compared in constant time against every client.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "serving/log.h"

namespace YAML {
class Node;
}

namespace hotline::frontends {

enum class Role : uint32_t {
  kNone = 0,  // any authenticated client
  kUnderstand = 1,
  kConverse = 2,
  kReadOrders = 4,
  kSupervise = 8,  // list, search and update work orders; metrics
  kAdmin = 16,     // load and unload models; implies every other role
};
std::string_view RoleName(Role r);

struct ClientConfig {
  std::string name;
  std::string key_sha256;  // 32 bytes, binary
  uint32_t roles = 0;
  double rate_per_s = 0;  // 0: unlimited
  double burst = 0;
};

struct TlsConfig {
  std::string cert, key;  // PEM files; both or neither
  std::string ca;         // PEM: the CA client certificates must chain to (mTLS)
  bool require_client_cert = false;
  bool enabled() const { return !cert.empty(); }
};

struct SecurityConfig {
  bool insecure = false;
  bool reflection = false;
  TlsConfig tls;
  std::vector<ClientConfig> clients;
  std::string audit_log;
  bool auth_enabled() const { return !clients.empty(); }
  // Reads the security: mapping; throws hotline::Error naming `file` and the key.
  static SecurityConfig Parse(const YAML::Node& node, const std::string& file);
};

// True for 127.0.0.0/8, ::1 and "localhost".
bool IsLoopbackHost(const std::string& host);
// Throws hotline::Error(kFailedPrecondition) when `host` is not loopback and the config lacks TLS
// or authentication without saying `insecure: true`; or when reflection is on with clients.
void CheckExposure(const std::string& host, const SecurityConfig& config);

// The result of checking one call.
struct AuthDecision {
  Status status;       // OK, UNAUTHENTICATED, PERMISSION_DENIED or RESOURCE_EXHAUSTED
  std::string client;  // the client's name; "anonymous" when authentication is off
};

// Thread-safe. Also writes the audit log.
class Security {
 public:
  // `logger` (nullable) hears of audit lines that could not be written.
  explicit Security(SecurityConfig config, serving::Logger* logger = nullptr);
  ~Security();
  Security(const Security&) = delete;
  Security& operator=(const Security&) = delete;
  bool auth_enabled() const { return config_.auth_enabled(); }
  const SecurityConfig& config() const { return config_; }

  // `credential`: the value of an authorization header ("Bearer KEY") or of x-api-key.
  AuthDecision Check(std::string_view credential, Role need);
  // The client a credential names, without charging its rate limit ("anonymous" with
  // authentication off, "" for no valid key): for audit lines after Check passed.
  std::string ClientName(std::string_view credential) const;
  // The roles (Role bits) of the client a credential names, without charging its rate limit; 0
  // for no valid key, every bit with authentication off.
  uint32_t RolesOf(std::string_view credential) const;

  // One line of the audit log: {"ts","client","transport","action","order_id","code"}. A no-op
  // without audit_log. `order_id` may be empty (list, search).
  void Audit(const std::string& client, std::string_view transport, std::string_view action,
             const std::string& order_id, Code code, const std::string& detail = "");

 private:
  struct Bucket {
    double tokens = 0;
    std::chrono::steady_clock::time_point last;
  };
  const ClientConfig* Identify(std::string_view key) const;
  bool Take(const ClientConfig& c);

  const SecurityConfig config_;
  serving::Logger* const logger_;
  std::mutex mu_;
  std::map<std::string, Bucket> buckets_;
  std::mutex audit_mu_;
  int audit_fd_ = -1;
};

// Hex of SHA-256 (for configs and tests).
std::string Sha256Hex(std::string_view data);

}  // namespace hotline::frontends
