// The operators' web console: static files under /console/ (web/console: vanilla ES modules, no
// build step) and its JSON API under /v1/console/, over the dialog and the work-order store.
//
//   GET  /console/, /console/{file}   the page (index.html, *.js, *.css) from `dir`
//   GET  /v1/console/session          the caller's client name, roles, whether PII is shown, the
//                                     operations config (SLA hours, hotspot rules)
//   GET  /v1/console/events           text/event-stream: `snapshot` (calls in progress, hotspots)
//                                     then `turn`, `end`, `hotspots` as they happen
//   GET  /v1/console/orders?status=&intent=&department=&text=&sla=&limit=&offset=
//                                     orders with category, district/street and SLA state
//   GET  /v1/console/orders/{id}      one order with its transcript, notes and SLA
//   GET  /v1/console/hotspots         active hotspots and duplicate candidates (并单)
//   GET  /v1/console/trends?bucket=hour|day&by=category|intent
//   GET  /v1/console/health           models (state, precision, memory), event subscribers
//   POST /v1/console/merge            {"into", "from"}: 并单 by an operator (notes on both, `from`
//                                     closed)
// Every /v1/console route needs the role supervise; personal values (names, phones, ID numbers,
// plates) in texts and slots are masked unless the client also has read_orders. With
// authentication off (loopback, the default config) the console opens without a key, as the rest
// of the API does, and shows orders whole.
//
// Hotspots are recomputed from the store every refresh_s (and at once after this server files an
// order), so servers sharing a store agree; metrics: hotline_hotspots_active{rule},
// hotline_hotspots_raised_total{rule}, hotline_orders_overdue{category}.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "nlu/taxonomy.h"
#include "serving/log.h"
#include "serving/metrics.h"
#include "serving/service.h"

namespace httplib {
class Server;
}

namespace hotline::frontends {

class DialogService;
class Security;

// server.yaml's console: section. Present (even empty) turns the console on; it needs dialog:.
struct ConsoleConfig {
  bool enabled = false;
  std::string dir = "web/console";                    // the page's files
  std::string operations = "config/operations.yaml";  // dialog::OperationsConfig
  int max_streams = 8;  // event streams open at once (each holds an HTTP thread); more get 503
};

class Console {
 public:
  // Throws hotline::Error naming the file for a bad operations config or a dir without
  // index.html. `precisions`: each model's precision (as chosen at load) for the health view.
  // `service`, `metrics`, `security` and `logger` (nullable) must outlive it.
  static std::unique_ptr<Console> Create(const ConsoleConfig& config, const nlu::Taxonomy& taxonomy,
                                         serving::Service* service,
                                         serving::MetricsRegistry& metrics, Security* security,
                                         serving::Logger* logger,
                                         std::map<std::string, std::string> precisions);
  virtual ~Console() = default;
  // Wraps the dialog: every turn and ended call is seen by the console, then answered as before.
  // Starts the hotspot refresher over the dialog's store.
  virtual std::unique_ptr<DialogService> Attach(std::unique_ptr<DialogService> dialog) = 0;
  virtual void Install(httplib::Server& server) = 0;
  // Ends the event streams and the refresher (before the HTTP server stops: streams hold threads).
  virtual void Stop() = 0;
};

}  // namespace hotline::frontends
