// The work-order webhook's settings (server.yaml dialog.webhook; delivered by the dialog service).
#pragma once

#include <string>

namespace hotline::frontends {

// server.yaml dialog.webhook: new orders are pushed to the city's work-order system. Each order
// is queued in the store's outbox in the transaction that stores it and POSTed (the WorkOrder as
// JSON, header Idempotency-Key: the order id) until the system answers 2xx; failures are retried
// with exponential back-off, across restarts and by any server sharing the store.
struct WebhookConfig {
  std::string url;  // http(s)://host[:port]/path; empty: no webhook
  double timeout_s = 5;
  double retry_min_s = 1, retry_max_s = 300;
  double poll_s = 0.5;    // how often an idle deliverer looks for due entries
  std::string ca;         // PEM CA for an https URL (default: the system's)
  std::string token_env;  // environment variable holding a bearer token for the system
};

}  // namespace hotline::frontends
