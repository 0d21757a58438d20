#include "frontends/console.h"

#include <httplib.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "base/echo.h"
#include "base/error.h"
#include "base/pii.h"
#include "frontends/security.h"
#include "serving/model_repository.h"

#if HOTLINE_HAVE_DIALOG
#include "dialog/operations.h"
#include "dialog/work_order_store.h"
#include "frontends/dialog_service.h"
#endif

namespace hotline::frontends {

#if HOTLINE_HAVE_DIALOG
namespace {

using json = nlohmann::json;
using Clock = std::chrono::system_clock;

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void SendJson(httplib::Response& res, const json& body, int status = 200) {
  res.status = status;
  res.set_header("Cache-Control", "no-store");
  res.set_content(Dump(body), "application/json");
}

void SendError(httplib::Response& res, const Status& s) {
  SendJson(res, {{"code", CodeName(s.code())}, {"message", s.message()}}, HttpStatus(s.code()));
}

std::string Credential(const httplib::Request& req) {
  if (req.has_header("Authorization")) return req.get_header_value("Authorization");
  return req.get_header_value("X-API-Key");
}

bool PersonalSlot(const std::string& type) {
  return type == "id_number" || type == "phone" || type == "plate_number" || type == "person_name";
}

// First character kept, the rest one '*' each (a name, a plate).
std::string MaskValue(const std::string& v) {
  size_t first = 1;
  while (first < v.size() && (static_cast<unsigned char>(v[first]) & 0xC0) == 0x80) ++first;
  std::string out = v.substr(0, std::min(first, v.size()));
  for (size_t i = first; i < v.size(); ++i) {
    if ((static_cast<unsigned char>(v[i]) & 0xC0) != 0x80) out.push_back('*');
  }
  return out;
}

// A personal slot's value masked: phones and ID numbers as in logs (138****5678), names and
// plates to their first character.
std::string MaskSlotValue(const std::string& type, const std::string& v) {
  if (type == "phone" || type == "id_number") {
    std::string m = MaskPii(v);
    if (m != v) return m;
  }
  return MaskValue(v);
}

// The caller's personal values (by slot, then any phone or ID number left) masked in `text`.
std::string MaskText(std::string text, const std::vector<dialog::SlotFill>& slots) {
  for (const auto& f : slots) {
    if (!PersonalSlot(f.type)) continue;
    for (const std::string* v : {&f.value, &f.normalized}) {
      if (v->empty()) continue;
      const std::string masked = MaskSlotValue(f.type, *v);
      for (size_t at; (at = text.find(*v)) != std::string::npos;)
        text.replace(at, v->size(), masked);
    }
  }
  return MaskPii(text);
}

json SlotsJson(const std::vector<dialog::SlotFill>& slots, bool pii) {
  json out = json::array();
  for (const auto& f : slots) {
    const bool mask = !pii && PersonalSlot(f.type);
    out.push_back({{"type", f.type},
                   {"value", mask  ? MaskSlotValue(f.type, f.value)
                             : pii ? f.value
                                   : MaskPii(f.value)},
                   {"normalized", mask  ? MaskSlotValue(f.type, f.normalized)
                                  : pii ? f.normalized
                                        : MaskPii(f.normalized)}});
  }
  return out;
}

// One event, as every subscriber of its kind sees it: with and without personal values.
struct Event {
  uint64_t seq = 0;
  std::string name;
  std::string full, masked;  // JSON
};

// Calls in progress: their turns so far (the last 30), for a page opened mid-call.
struct LiveCall {
  std::vector<json> full, masked;
  Clock::time_point last;
};

class ConsoleImpl;

// The dialog as the transports see it, with each turn and ended call shown to the console.
class ObservedDialog final : public DialogService {
 public:
  ObservedDialog(std::unique_ptr<DialogService> inner, std::shared_ptr<ConsoleImpl> console)
      : inner_(std::move(inner)), console_(std::move(console)) {}
  void Converse(ConverseCall call, std::function<void(ConverseResult)> done) override;
  void EndCall(const std::string& call_id,
               std::function<void(Status, dialog::CallSummary)> done) override;
  void GetWorkOrder(const std::string& id,
                    std::function<void(Status, dialog::WorkOrder)> done) override {
    inner_->GetWorkOrder(id, std::move(done));
  }
  void ListWorkOrders(dialog::OrderQuery query,
                      std::function<void(Status, std::vector<dialog::WorkOrder>)> done) override {
    inner_->ListWorkOrders(std::move(query), std::move(done));
  }
  void UpdateWorkOrder(std::string id, dialog::OrderUpdate update,
                       std::function<void(Status, dialog::WorkOrder)> done) override;
  void Shutdown() override { inner_->Shutdown(); }

 private:
  std::unique_ptr<DialogService> inner_;
  std::shared_ptr<ConsoleImpl> console_;
};

class ConsoleImpl final : public std::enable_shared_from_this<ConsoleImpl> {
 public:
  ConsoleImpl(ConsoleConfig config, dialog::OperationsConfig ops, const nlu::Taxonomy& taxonomy,
              serving::Service* service, serving::MetricsRegistry& metrics, Security* security,
              serving::Logger* logger, std::map<std::string, std::string> precisions)
      : config_(std::move(config)),
        ops_(std::move(ops)),
        taxonomy_(taxonomy),
        service_(service),
        security_(security),
        logger_(logger),
        precisions_(std::move(precisions)),
        hotspots_active_(metrics.AddGauge("hotline_hotspots_active",
                                          "Hotspots active now (orders alike in one place)",
                                          {"rule"})),
        hotspots_raised_(metrics.AddCounter("hotline_hotspots_raised_total",
                                            "Hotspots raised (each place and problem once while "
                                            "it stays active)",
                                            {"rule"})),
        overdue_(metrics.AddGauge("hotline_orders_overdue",
                                  "Open work orders past their handling deadline (SLA)",
                                  {"category"})),
        refresh_errors_(metrics.AddCounter("hotline_console_refresh_errors_total",
                                           "Hotspot or SLA refreshes that failed on the store")),
        streams_gauge_(
            metrics.AddGauge("hotline_console_streams", "Console event streams open now")) {
    for (const auto& r : ops_.hotspots) {
      hotspots_active_.WithLabels({r.name}).Set(0);
      hotspots_raised_.WithLabels({r.name});
    }
    refresh_errors_.WithLabels({});
    streams_gauge_.WithLabels({}).Set(0);
  }

  ~ConsoleImpl() { Stop(); }

  void Start(DialogService* dialog) {
    dialog_ = dialog;
    refresher_ = std::thread([this] { Refresh(); });
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      stop_ = true;
    }
    cv_.notify_all();
    refresh_cv_.notify_all();
    if (refresher_.joinable()) refresher_.join();
  }

  // --- what the dialog reports ---

  void OnTurn(const ConverseCall& call, const ConverseResult& r) {
    if (!r.status.ok()) return;
    const Clock::time_point now = Clock::now();
    auto build = [&](bool pii) {
      const auto& u = r.understanding;
      std::vector<dialog::SlotFill> nlu_slots;
      for (const auto& s : u.slots) nlu_slots.push_back({s.type, s.value, s.normalized});
      const auto& all = r.reply.slots;
      json j = {{"call_id", pii ? call.call_id : serving::RedactPii(call.call_id)},
                {"at", dialog::FormatRfc3339Utc(now)},
                {"text", pii ? call.text : MaskText(call.text, all)},
                {"nlu",
                 {{"intent", u.intent},
                  {"confidence", u.confidence},
                  {"category", u.category},
                  {"slots", SlotsJson(nlu_slots, pii)}}},
                {"action", r.action},
                {"intent", r.reply.intent},
                {"department", r.reply.department},
                {"slots", SlotsJson(all, pii)},
                {"reply", pii ? r.reply.reply : MaskText(r.reply.reply, all)},
                {"acts", r.reply.acts},
                {"done", r.reply.done},
                {"handoff", r.reply.action == dialog::Action::kHandoff},
                {"transfer_to", r.reply.transfer_to},
                {"transfer_category", r.reply.transfer_category},
                {"work_order_id", r.reply.work_order_id},
                {"merged", r.reply.merged}};
      return j;
    };
    json full = build(true), masked = build(false);
    {
      std::lock_guard<std::mutex> lock(mu_);
      LiveCall& live = calls_[call.call_id];
      live.full.push_back(full);
      live.masked.push_back(masked);
      if (live.full.size() > 30) {
        live.full.erase(live.full.begin());
        live.masked.erase(live.masked.begin());
      }
      live.last = now;
      // A call whose end never came is forgotten after the dialog's idle time.
      for (auto it = calls_.begin(); it != calls_.end();) {
        it = now - it->second.last > std::chrono::minutes(15) ? calls_.erase(it) : std::next(it);
      }
    }
    Publish("turn", full, masked);
    if (!r.reply.work_order_id.empty()) Nudge();
  }

  void OnEnd(const std::string& call_id, const Status& st, const dialog::CallSummary& s) {
    if (!st.ok()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      calls_.erase(call_id);
    }
    auto build = [&](bool pii) {
      return json{{"call_id", pii ? call_id : serving::RedactPii(call_id)},
                  {"outcome", s.outcome},
                  {"intent", s.intent},
                  {"department", s.department},
                  {"category", s.category},
                  {"turns", s.turns},
                  {"work_order_id", s.work_order_id}};
    };
    Publish("end", build(true), build(false));
  }

  void OnOrderChanged() { Nudge(); }

  // --- HTTP ---

  void Install(httplib::Server& server) {
    auto self = shared_from_this();
    server.Get(R"(/console/([^/]*))", [self](const httplib::Request& req, httplib::Response& res) {
      self->ServeFile(req.matches[1].str(), res);
    });
    auto route = [self](auto handler) {
      return [self, handler](const httplib::Request& req, httplib::Response& res) {
        bool pii = false;
        std::string client;
        if (!self->Allowed(req, res, &pii, &client)) return;
        try {
          (self.get()->*handler)(req, res, pii, client);
        } catch (const Error& e) {
          SendError(res, Status::FromError(e));
        } catch (const std::exception& e) {
          SendError(res, Status(Code::kInternal, serving::RedactPii(e.what())));
        }
      };
    };
    server.Get("/v1/console/session", route(&ConsoleImpl::HandleSession));
    server.Get("/v1/console/events", route(&ConsoleImpl::HandleEvents));
    server.Get("/v1/console/orders", route(&ConsoleImpl::HandleOrders));
    server.Get(R"(/v1/console/orders/([^/]+))", route(&ConsoleImpl::HandleOrder));
    server.Get("/v1/console/hotspots", route(&ConsoleImpl::HandleHotspots));
    server.Get("/v1/console/trends", route(&ConsoleImpl::HandleTrends));
    server.Get("/v1/console/health", route(&ConsoleImpl::HandleHealth));
    server.Post("/v1/console/merge", route(&ConsoleImpl::HandleMerge));
  }

 private:
  // supervise for every route; read_orders (or admin) for personal values in clear.
  bool Allowed(const httplib::Request& req, httplib::Response& res, bool* pii,
               std::string* client) {
    if (!security_ || !security_->auth_enabled()) {
      *pii = true;
      *client = "anonymous";
      return true;
    }
    const std::string cred = Credential(req);
    const uint32_t roles = security_->RolesOf(cred);
    *client = security_->ClientName(cred);
    const uint32_t admin = uint32_t(Role::kAdmin);
    if (client->empty()) {
      res.set_header("WWW-Authenticate", "Bearer");
      SendError(res, Status(Code::kUnauthenticated, "the console needs an API key"));
      return false;
    }
    if (!(roles & (uint32_t(Role::kSupervise) | admin))) {
      SendError(res, Status(Code::kPermissionDenied,
                            "client '" + *client + "' lacks the role supervise"));
      return false;
    }
    *pii = (roles & (uint32_t(Role::kReadOrders) | admin)) != 0;
    return true;
  }

  void ServeFile(const std::string& name_in, httplib::Response& res) {
    const std::string name = name_in.empty() ? "index.html" : name_in;
    const bool safe =
        name.size() <= 64 && name[0] != '.' && std::all_of(name.begin(), name.end(), [](char c) {
          return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
                 c == '.';
        });
    static const std::map<std::string, std::string> kTypes = {
        {"html", "text/html; charset=utf-8"},
        {"js", "text/javascript; charset=utf-8"},
        {"css", "text/css; charset=utf-8"},
        {"svg", "image/svg+xml"},
        {"png", "image/png"},
        {"ico", "image/x-icon"}};
    const size_t dot = name.rfind('.');
    const auto type = dot == std::string::npos ? kTypes.end() : kTypes.find(name.substr(dot + 1));
    std::ifstream in(config_.dir + "/" + name, std::ios::binary);
    if (!safe || type == kTypes.end() || !in) {
      return SendError(res,
                       Status(Code::kNotFound, "no console file '" + EchoInput(name, 64) + "'"));
    }
    std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    res.set_header("Cache-Control", "no-cache");
    // The page loads only its own scripts and styles, and talks only to this server.
    res.set_header("Content-Security-Policy",
                   "default-src 'self'; img-src 'self' data:; style-src 'self'; "
                   "connect-src 'self'; frame-ancestors 'none'");
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_content(body, type->second.c_str());
  }

  void HandleSession(const httplib::Request&, httplib::Response& res, bool pii,
                     const std::string& client) {
    json rules = json::array();
    for (const auto& r : ops_.hotspots) {
      rules.push_back({{"name", r.name},
                       {"scope", r.scope},
                       {"group", r.group},
                       {"min_orders", r.min_orders},
                       {"window_minutes", r.window.count() / 60}});
    }
    json categories = json::object();
    for (const auto& [id, name] : taxonomy_.categories) categories[id] = name;
    json intents = json::object();
    for (const auto& i : taxonomy_.intents)
      intents[i.id] = {{"zh", i.zh}, {"category", i.category}};
    SendJson(res, {{"client", client},
                   {"pii", pii},
                   {"auth", security_ && security_->auth_enabled()},
                   {"hotspot_rules", rules},
                   {"sla",
                    {{"default_hours", ops_.sla.default_hours},
                     {"categories", ops_.sla.category_hours},
                     {"intents", ops_.sla.intent_hours},
                     {"due_soon_fraction", ops_.sla.due_soon_fraction}}},
                   {"categories", categories},
                   {"intents", intents},
                   {"statuses", std::vector<std::string>(std::begin(dialog::kOrderStatuses),
                                                         std::end(dialog::kOrderStatuses))}});
  }

  // text/event-stream: a snapshot, then each event as it is published. A quiet stream gets a
  // comment every 2 s: it keeps proxies from closing it, and a write is what finds a client that
  // left (its slot and thread are freed within ~4 s).
  void HandleEvents(const httplib::Request&, httplib::Response& res, bool pii, const std::string&) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (streams_ >= config_.max_streams) {
        return SendError(res,
                         Status(Code::kUnavailable, "too many console event streams open (" +
                                                        std::to_string(config_.max_streams) + ")"));
      }
      ++streams_;
      streams_gauge_.WithLabels({}).Set(streams_);
    }
    auto self = shared_from_this();
    auto last = std::make_shared<uint64_t>(0);
    auto first = std::make_shared<bool>(true);
    auto quiet_since =
        std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
    res.set_header("Cache-Control", "no-store");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [self, pii, last, first, quiet_since](size_t, httplib::DataSink& sink) {
          std::string out;
          bool stopping = false;
          {
            std::unique_lock<std::mutex> lock(self->mu_);
            if (*first) {
              *first = false;
              json calls = json::array();
              for (const auto& [id, c] : self->calls_) {
                for (const json& turn : pii ? c.full : c.masked) calls.push_back(turn);
              }
              *last = self->seq_;
              out =
                  "retry: 1000\nevent: snapshot\ndata: " +
                  Dump(
                      {{"seq", self->seq_}, {"calls", calls}, {"hotspots", self->hotspots_json_}}) +
                  "\n\n";
            } else {
              // Short waits: a stopping server or a gone client is noticed within 0.5 s.
              self->cv_.wait_for(lock, std::chrono::milliseconds(500),
                                 [&] { return self->stop_ || self->seq_ > *last; });
              stopping = self->stop_;
              for (const Event& e : self->events_) {
                if (e.seq <= *last) continue;
                out += "id: " + std::to_string(e.seq) + "\nevent: " + e.name +
                       "\ndata: " + (pii ? e.full : e.masked) + "\n\n";
                *last = e.seq;
              }
              if (self->seq_ > *last) *last = self->seq_;  // older than the ring holds
            }
          }
          if (stopping) {  // a clean end of the chunked stream, written outside the lock
            sink.done();
            return true;
          }
          if (out.empty()) {
            const auto now = std::chrono::steady_clock::now();
            if (now - *quiet_since < std::chrono::seconds(2)) return sink.is_writable();
            out = ": keep-alive\n\n";
          }
          *quiet_since = std::chrono::steady_clock::now();
          return sink.write(out.data(), out.size());
        },
        [self](bool) {
          std::lock_guard<std::mutex> lock(self->mu_);
          --self->streams_;
          self->streams_gauge_.WithLabels({}).Set(self->streams_);
        });
  }

  json OrderJson(const dialog::WorkOrder& o, bool pii, Clock::time_point now, bool detail) {
    const dialog::OrderPlace place = dialog::PlaceOf(o);
    const nlu::IntentInfo* info = taxonomy_.FindIntent(o.intent);
    json sla;
    try {
      const dialog::SlaStatus s = dialog::EvaluateSla(o, ops_.sla, taxonomy_, now);
      sla = {{"hours", s.hours},
             {"deadline", s.deadline},
             {"state", s.state},
             {"seconds_left", s.seconds_left}};
    } catch (const Error& e) {
      sla = {{"state", "unknown"}, {"error", e.what()}};
    }
    json j = {
        {"id", o.id},
        {"call_id", pii ? o.call_id : serving::RedactPii(o.call_id)},
        {"intent", o.intent},
        {"intent_name", info ? info->zh : ""},
        {"category", info ? info->category : ""},
        {"category_name", info ? taxonomy_.CategoryName(info->category) : ""},
        {"department", o.department},
        {"department_name",
         taxonomy_.departments.count(o.department) ? taxonomy_.departments.at(o.department) : ""},
        {"status", o.status},
        {"created_at", o.created_at},
        {"updated_at", o.updated_at},
        {"district", place.district},
        {"street", place.street},
        {"urgings", o.urged_at.size()},
        {"linked_calls", o.linked_calls.size()},
        {"slots", SlotsJson(o.slots, pii)},
        {"summary", pii ? o.summary : MaskText(o.summary, o.slots)},
        {"sla", sla}};
    if (detail) {
      json transcript = json::array();
      const std::string text = pii ? o.caller_text : MaskText(o.caller_text, o.slots);
      for (size_t at = 0; at <= text.size();) {
        const size_t nl = std::min(text.find('\n', at), text.size());
        transcript.push_back(text.substr(at, nl - at));
        at = nl + 1;
      }
      json notes = json::array();
      for (const auto& n : o.notes) {
        notes.push_back({{"at", n.at},
                         {"by", n.by},
                         {"status", n.status},
                         {"text", pii ? n.text : MaskText(n.text, o.slots)}});
      }
      j["transcript"] = transcript;
      j["notes"] = notes;
      j["urged_at"] = o.urged_at;
      j["unverified"] = o.unverified;
      json linked = json::array();
      for (const auto& c : o.linked_calls) linked.push_back(pii ? c : serving::RedactPii(c));
      j["linked_call_ids"] = linked;
    }
    return j;
  }

  // Lists every order matching `q` page by page, up to `cap` (newest first).
  std::vector<dialog::WorkOrder> ListAll(dialog::OrderQuery q, size_t cap) {
    std::vector<dialog::WorkOrder> out;
    q.limit = 500;
    for (q.offset = 0;; q.offset += q.limit) {
      std::vector<dialog::WorkOrder> page;
      const Status s = dialog_->ListWorkOrdersSync(q, &page);
      if (!s.ok()) throw Error(s.message(), s.code());
      const size_t n = page.size();
      for (auto& o : page) out.push_back(std::move(o));
      if (n < size_t(q.limit) || out.size() >= cap) break;
    }
    if (out.size() > cap) out.resize(cap);
    return out;
  }

  static std::string Param(const httplib::Request& req, const char* name) {
    return req.has_param(name) ? req.get_param_value(name) : "";
  }

  static int IntParam(const httplib::Request& req, const char* name, int fallback) {
    if (!req.has_param(name)) return fallback;
    const std::string v = req.get_param_value(name);
    size_t used = 0;
    int n = 0;
    try {
      n = std::stoi(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != v.size()) {
      throw Error(std::string(name) + " must be a whole number; got '" + EchoInput(v, 32) + "'");
    }
    return n;
  }

  static void CheckParams(const httplib::Request& req, std::initializer_list<const char*> known) {
    for (const auto& [name, value] : req.params) {
      if (std::none_of(known.begin(), known.end(), [&](const char* k) { return name == k; })) {
        std::string list;
        for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
        throw Error("unknown query parameter '" + EchoInput(name, 32) + "' (expected " + list +
                    ")");
      }
    }
  }

  void HandleOrders(const httplib::Request& req, httplib::Response& res, bool pii,
                    const std::string& client) {
    CheckParams(req, {"status", "intent", "department", "text", "created_from", "created_to", "sla",
                      "limit", "offset"});
    dialog::OrderQuery q;
    q.status = Param(req, "status");
    q.intent = Param(req, "intent");
    q.department = Param(req, "department");
    q.text = Param(req, "text");
    q.created_from = Param(req, "created_from");
    q.created_to = Param(req, "created_to");
    const std::string sla = Param(req, "sla");
    if (!sla.empty() && sla != "overdue" && sla != "due_soon" && sla != "on_time" && sla != "met" &&
        sla != "missed") {
      throw Error("sla must be overdue, due_soon, on_time, met or missed; got '" +
                  EchoInput(sla, 32) + "'");
    }
    const int limit = IntParam(req, "limit", 100), offset = IntParam(req, "offset", 0);
    if (limit < 1 || limit > 500) throw Error("limit must be 1..500");
    if (offset < 0) throw Error("offset must be 0 or more");
    const auto now = Clock::now();
    json orders = json::array();
    if (sla.empty()) {
      q.limit = limit;
      q.offset = offset;
      std::vector<dialog::WorkOrder> page;
      const Status s = dialog_->ListWorkOrdersSync(q, &page);
      if (!s.ok()) return SendError(res, s);
      for (const auto& o : page) orders.push_back(OrderJson(o, pii, now, false));
    } else {
      // The SLA state is computed, not stored: filter the newest 5000 matching orders.
      int skipped = 0;
      for (const auto& o : ListAll(q, 5000)) {
        json j = OrderJson(o, pii, now, false);
        if (j["sla"]["state"] != sla) continue;
        if (skipped++ < offset) continue;
        orders.push_back(std::move(j));
        if (int(orders.size()) >= limit) break;
      }
    }
    if (security_)
      security_->Audit(client, "http", "console_list", "", Code::kOk,
                       std::to_string(orders.size()) + " orders");
    SendJson(res, {{"orders", orders}, {"now", dialog::FormatRfc3339Utc(now)}});
  }

  void HandleOrder(const httplib::Request& req, httplib::Response& res, bool pii,
                   const std::string& client) {
    const std::string id = req.matches[1].str();
    dialog::WorkOrder order;
    const Status s = dialog_->GetWorkOrderSync(id, &order);
    if (security_)
      security_->Audit(client, "http", "console_read", s.ok() ? order.id : id, s.code());
    if (!s.ok()) return SendError(res, s);
    SendJson(res, OrderJson(order, pii, Clock::now(), true));
  }

  void HandleHotspots(const httplib::Request& req, httplib::Response& res, bool,
                      const std::string&) {
    CheckParams(req, {});
    const auto now = Clock::now();
    dialog::OrderQuery q;
    q.created_from = dialog::FormatRfc3339Utc(now - std::chrono::hours(ops_.duplicate_window_h));
    json dups = json::array();
    for (const auto& g :
         dialog::FindDuplicateCandidates(ListAll(q, 20000), ops_.duplicate_window_h)) {
      const nlu::IntentInfo* info = taxonomy_.FindIntent(g.intent);
      dups.push_back({{"intent", g.intent},
                      {"intent_name", info ? info->zh : ""},
                      {"district", g.district},
                      {"street", g.street},
                      {"number", g.number},
                      {"order_ids", g.order_ids}});
    }
    std::lock_guard<std::mutex> lock(mu_);
    SendJson(res,
             {{"hotspots", hotspots_json_}, {"computed_at", hotspots_at_}, {"duplicates", dups}});
  }

  void HandleTrends(const httplib::Request& req, httplib::Response& res, bool, const std::string&) {
    CheckParams(req, {"bucket", "by", "buckets"});
    const std::string bucket = req.has_param("bucket") ? Param(req, "bucket") : "hour";
    const std::string by = req.has_param("by") ? Param(req, "by") : "category";
    const int buckets = IntParam(req, "buckets", bucket == "day" ? 14 : 48);
    const auto now = Clock::now();
    // Checked before the store is read (ComputeTrend checks again).
    dialog::ComputeTrend({}, bucket, buckets, by, taxonomy_, now);
    dialog::OrderQuery q;
    q.created_from = dialog::FormatRfc3339Utc(
        now - std::chrono::hours((bucket == "day" ? 24 : 1) * int64_t(buckets + 1)));
    const dialog::Trend t =
        dialog::ComputeTrend(ListAll(q, 50000), bucket, buckets, by, taxonomy_, now);
    json names = json::object();
    for (const auto& [key, counts] : t.series) {
      const nlu::IntentInfo* info = taxonomy_.FindIntent(key);
      names[key] = by == "intent" ? (info ? info->zh : key) : taxonomy_.CategoryName(key);
    }
    SendJson(res, {{"bucket", t.bucket},
                   {"by", by},
                   {"starts", t.starts},
                   {"series", t.series},
                   {"names", names}});
  }

  void HandleHealth(const httplib::Request&, httplib::Response& res, bool, const std::string&) {
    json models = json::array();
    for (const serving::ModelStatus& m : service_->ListModels()) {
      auto p = precisions_.find(m.name);
      models.push_back({{"name", m.name},
                        {"version", m.version},
                        {"state", serving::ModelStateName(m.state)},
                        {"kind", m.kind},
                        {"memory_bytes", m.memory_bytes},
                        {"precision", p == precisions_.end() ? "" : p->second}});
    }
    std::lock_guard<std::mutex> lock(mu_);
    SendJson(res, {{"models", models},
                   {"ready", service_->ready()},
                   {"streams", streams_},
                   {"hotspots_computed_at", hotspots_at_},
                   {"refresh_error", refresh_error_}});
  }

  // 并单 by an operator: `from` is closed with a note naming `into`, which gets a note too.
  void HandleMerge(const httplib::Request& req, httplib::Response& res, bool pii,
                   const std::string& client) {
    json body;
    try {
      body = json::parse(req.body);
    } catch (const json::exception&) {
      throw Error("the body is not valid JSON");
    }
    if (!body.is_object() || !body.contains("into") || !body.contains("from") ||
        !body["into"].is_string() || !body["from"].is_string()) {
      throw Error("the body must be {\"into\": ORDER_ID, \"from\": ORDER_ID}");
    }
    const std::string into = body["into"], from = body["from"];
    dialog::WorkOrder a, b;
    Status s = dialog_->GetWorkOrderSync(into, &a);
    if (s.ok()) s = dialog_->GetWorkOrderSync(from, &b);
    if (!s.ok()) return SendError(res, s);
    if (a.id == b.id) throw Error("an order cannot be merged into itself");
    if (!(b.status == "open" || b.status == "in_progress")) {
      return SendError(res, Status(Code::kFailedPrecondition,
                                   "order " + b.id + " is " + b.status + ", not open"));
    }
    dialog::WorkOrder out;
    s = dialog_->UpdateWorkOrderSync(b.id, {"closed", "并单：并入 " + a.id, client}, &out);
    if (s.ok())
      s = dialog_->UpdateWorkOrderSync(a.id, {"", "并单：" + b.id + " 并入本单", client}, &out);
    if (security_) security_->Audit(client, "http", "merge", b.id, s.code(), "into " + a.id);
    if (!s.ok()) return SendError(res, s);
    Nudge();
    SendJson(res, OrderJson(out, pii, Clock::now(), false));
  }

  // --- events and the refresher ---

  void Publish(const std::string& name, const json& full, const json& masked) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      Event e{++seq_, name, Dump(full), Dump(masked)};
      events_.push_back(std::move(e));
      while (events_.size() > 512) events_.pop_front();
    }
    cv_.notify_all();
  }

  void Nudge() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      nudged_ = true;
    }
    refresh_cv_.notify_all();
  }

  // Recomputes hotspots from the store every refresh_s (at once when nudged), publishes them when
  // they change; the overdue counts every 15 s, or within ~2 s of an order's change.
  void Refresh() {
    std::chrono::seconds widest{0};
    for (const auto& r : ops_.hotspots) widest = std::max(widest, r.window);
    auto last_sla = std::chrono::steady_clock::time_point{};
    bool sla_dirty = false;  // an order changed since the last overdue count
    std::set<std::string> active;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        refresh_cv_.wait_for(lock, std::chrono::duration<double>(ops_.refresh_s),
                             [this] { return stop_ || nudged_; });
        if (stop_) return;
        sla_dirty = sla_dirty || nudged_;
        nudged_ = false;
      }
      std::string error;
      try {
        const auto now = Clock::now();
        dialog::OrderQuery q;
        q.created_from = dialog::FormatRfc3339Utc(now - widest);
        const auto found = dialog::FindHotspots(ListAll(q, 50000), ops_.hotspots, taxonomy_, now);
        std::set<std::string> keys;
        std::map<std::string, int> per_rule;
        json list = json::array();
        for (const auto& h : found) {
          keys.insert(h.key);
          ++per_rule[h.rule];
          if (!active.count(h.key)) {
            hotspots_raised_.WithLabels({h.rule}).Inc();
            if (logger_) {
              logger_->Warn("hotspot", {{"rule", h.rule},
                                        {"group", h.group},
                                        {"district", h.district},
                                        {"street", h.street},
                                        {"orders", h.count}});
            }
          }
          list.push_back({{"key", h.key},
                          {"rule", h.rule},
                          {"group", h.group},
                          {"group_name", h.group_name},
                          {"district", h.district},
                          {"street", h.street},
                          {"count", h.count},
                          {"first_at", h.first_at},
                          {"last_at", h.last_at},
                          {"order_ids", h.order_ids}});
        }
        for (const auto& r : ops_.hotspots)
          hotspots_active_.WithLabels({r.name}).Set(per_rule[r.name]);
        bool changed;
        {
          std::lock_guard<std::mutex> lock(mu_);
          changed = list != hotspots_json_;
          hotspots_json_ = list;
          hotspots_at_ = dialog::FormatRfc3339Utc(now);
        }
        active = std::move(keys);
        if (changed) Publish("hotspots", {{"hotspots", list}}, {{"hotspots", list}});
        // Overdue counts: every 15 s, and after an order's change (at most every 2 s).
        const auto since_sla = std::chrono::steady_clock::now() - last_sla;
        if (since_sla > std::chrono::seconds(15) ||
            (sla_dirty && since_sla > std::chrono::seconds(2))) {
          sla_dirty = false;
          last_sla = std::chrono::steady_clock::now();
          std::map<std::string, int> overdue;
          for (const auto& c : taxonomy_.categories) overdue[c.first] = 0;
          for (const char* status : {"open", "in_progress"}) {
            dialog::OrderQuery oq;
            oq.status = status;
            for (const auto& o : ListAll(oq, 100000)) {
              if (dialog::EvaluateSla(o, ops_.sla, taxonomy_, now).state != "overdue") continue;
              const nlu::IntentInfo* info = taxonomy_.FindIntent(o.intent);
              ++overdue[info && !info->category.empty() ? info->category : "unknown"];
            }
          }
          for (const auto& [cat, n] : overdue) overdue_.WithLabels({cat}).Set(n);
        }
      } catch (const std::exception& e) {
        error = serving::RedactPii(e.what());
        refresh_errors_.WithLabels({}).Inc();
        if (logger_) logger_->Warn("console_refresh", {{"error", error}});
      }
      std::lock_guard<std::mutex> lock(mu_);
      refresh_error_ = error;
    }
  }

  friend class ObservedDialog;

  const ConsoleConfig config_;
  const dialog::OperationsConfig ops_;
  const nlu::Taxonomy taxonomy_;
  serving::Service* const service_;
  Security* const security_;
  serving::Logger* const logger_;
  const std::map<std::string, std::string> precisions_;
  serving::Family<serving::Gauge>& hotspots_active_;
  serving::Family<serving::Counter>& hotspots_raised_;
  serving::Family<serving::Gauge>& overdue_;
  serving::Family<serving::Counter>& refresh_errors_;
  serving::Family<serving::Gauge>& streams_gauge_;
  DialogService* dialog_ = nullptr;

  std::mutex mu_;
  std::condition_variable cv_;          // new events, stop
  std::condition_variable refresh_cv_;  // nudges, stop
  bool stop_ = false, nudged_ = false;
  uint64_t seq_ = 0;
  std::deque<Event> events_;
  std::map<std::string, LiveCall> calls_;
  json hotspots_json_ = json::array();
  std::string hotspots_at_, refresh_error_;
  int streams_ = 0;
  std::thread refresher_;
};

void ObservedDialog::Converse(ConverseCall call, std::function<void(ConverseResult)> done) {
  auto shown = std::make_shared<ConverseCall>();
  shown->call_id = call.call_id;
  shown->text = call.text;
  auto console = console_;
  inner_->Converse(std::move(call), [console, shown, done = std::move(done)](ConverseResult r) {
    console->OnTurn(*shown, r);
    done(std::move(r));
  });
}

void ObservedDialog::EndCall(const std::string& call_id,
                             std::function<void(Status, dialog::CallSummary)> done) {
  auto console = console_;
  inner_->EndCall(call_id,
                  [console, call_id, done = std::move(done)](Status s, dialog::CallSummary c) {
                    console->OnEnd(call_id, s, c);
                    done(std::move(s), std::move(c));
                  });
}

void ObservedDialog::UpdateWorkOrder(std::string id, dialog::OrderUpdate update,
                                     std::function<void(Status, dialog::WorkOrder)> done) {
  auto console = console_;
  inner_->UpdateWorkOrder(std::move(id), std::move(update),
                          [console, done = std::move(done)](Status s, dialog::WorkOrder o) {
                            if (s.ok()) console->OnOrderChanged();
                            done(std::move(s), std::move(o));
                          });
}

class ConsoleHandle final : public Console {
 public:
  explicit ConsoleHandle(std::shared_ptr<ConsoleImpl> impl) : impl_(std::move(impl)) {}
  ~ConsoleHandle() override { impl_->Stop(); }
  std::unique_ptr<DialogService> Attach(std::unique_ptr<DialogService> dialog) override {
    DialogService* inner = dialog.get();
    auto wrapped = std::make_unique<ObservedDialog>(std::move(dialog), impl_);
    impl_->Start(inner);
    return wrapped;
  }
  void Install(httplib::Server& server) override { impl_->Install(server); }
  void Stop() override { impl_->Stop(); }

 private:
  std::shared_ptr<ConsoleImpl> impl_;
};

}  // namespace

std::unique_ptr<Console> Console::Create(const ConsoleConfig& config, const nlu::Taxonomy& taxonomy,
                                         serving::Service* service,
                                         serving::MetricsRegistry& metrics, Security* security,
                                         serving::Logger* logger,
                                         std::map<std::string, std::string> precisions) {
  if (!std::filesystem::exists(config.dir + "/index.html")) {
    throw Error("console.dir: no index.html in " + config.dir, Code::kNotFound);
  }
  if (config.max_streams < 1 || config.max_streams > 64) {
    throw Error("console.max_streams must be 1..64; got " + std::to_string(config.max_streams));
  }
  dialog::OperationsConfig ops = dialog::OperationsConfig::Load(config.operations, taxonomy);
  auto impl = std::make_shared<ConsoleImpl>(config, std::move(ops), taxonomy, service, metrics,
                                            security, logger, std::move(precisions));
  return std::make_unique<ConsoleHandle>(std::move(impl));
}

#else

std::unique_ptr<Console> Console::Create(const ConsoleConfig&, const nlu::Taxonomy&,
                                         serving::Service*, serving::MetricsRegistry&, Security*,
                                         serving::Logger*, std::map<std::string, std::string>) {
  throw Error("the console needs the dialog layer, which this build lacks", Code::kUnimplemented);
}

#endif  // HOTLINE_HAVE_DIALOG

}  // namespace hotline::frontends
