// The PostgreSQL work-order backend (libpq): several servers on several hosts share orders.
#include <libpq-fe.h>

#include <algorithm>
#include <cctype>
#include <mutex>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "dialog/work_order_store.h"
#include "dialog/work_order_store_internal.h"

namespace hotline::dialog {
namespace {

using internal::FormatOrderId;
using internal::SlotsFromJson;
using internal::SlotsToJson;
using internal::StringsFromJson;

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using Result = std::unique_ptr<PGresult, ResultDeleter>;

// Migration i brings the database from version i to i + 1 (the same steps as SQLite's, in
// PostgreSQL's dialect; ids and times are text in both so the two answer alike).
const std::vector<std::vector<std::string>>& PgMigrations() {
  static const std::vector<std::vector<std::string>> kMigrations = {
      {"CREATE TABLE work_orders ("
       " id TEXT PRIMARY KEY, key TEXT NOT NULL UNIQUE, day TEXT NOT NULL, seq BIGINT NOT NULL,"
       " call_id TEXT NOT NULL, department TEXT NOT NULL, intent TEXT NOT NULL,"
       " caller_text TEXT NOT NULL, created_at TEXT NOT NULL, status TEXT NOT NULL,"
       " slots TEXT NOT NULL, UNIQUE(day, seq))",
       "CREATE TABLE order_days (day TEXT PRIMARY KEY, last_seq BIGINT NOT NULL)",
       "CREATE TABLE urgings (n BIGSERIAL PRIMARY KEY,"
       " order_id TEXT NOT NULL REFERENCES work_orders(id), at TEXT NOT NULL)",
       "CREATE INDEX urgings_order ON urgings(order_id)",
       "CREATE TABLE linked_calls (n BIGSERIAL PRIMARY KEY,"
       " order_id TEXT NOT NULL REFERENCES work_orders(id), call_id TEXT NOT NULL,"
       " at TEXT NOT NULL)",
       "CREATE INDEX linked_calls_order ON linked_calls(order_id)"},
      {"ALTER TABLE work_orders ADD COLUMN summary TEXT NOT NULL DEFAULT ''",
       "ALTER TABLE work_orders ADD COLUMN unverified TEXT NOT NULL DEFAULT '[]'",
       "ALTER TABLE work_orders ADD COLUMN place_key TEXT NOT NULL DEFAULT ''",
       "CREATE INDEX work_orders_place ON work_orders(intent, place_key, created_at)"},
      {"CREATE TABLE order_notes (n BIGSERIAL PRIMARY KEY,"
       " order_id TEXT NOT NULL REFERENCES work_orders(id), at TEXT NOT NULL,"
       " by_client TEXT NOT NULL, text TEXT NOT NULL, status TEXT NOT NULL)",
       "CREATE INDEX order_notes_order ON order_notes(order_id)",
       "CREATE INDEX work_orders_created ON work_orders(created_at)",
       "ALTER TABLE work_orders ADD COLUMN updated_at TEXT NOT NULL DEFAULT ''"},
      {"CREATE TABLE outbox (seq BIGSERIAL PRIMARY KEY,"
       " order_id TEXT NOT NULL REFERENCES work_orders(id), created_at TEXT NOT NULL,"
       " attempts INTEGER NOT NULL DEFAULT 0, next_at BIGINT NOT NULL,"
       " delivered_at TEXT NOT NULL DEFAULT '', last_error TEXT NOT NULL DEFAULT '')",
       "CREATE INDEX outbox_due ON outbox(delivered_at, next_at)"},
  };
  return kMigrations;
}

// Thrown inside a transaction when the connection broke before COMMIT was sent: safe to retry.
struct ConnectionLost {
  std::string message;
};

class PgStore final : public WorkOrderStore {
 public:
  PgStore(std::string url, std::string shown) : WorkOrderStore(std::move(shown)), url_(url) {
    Connect();
  }
  ~PgStore() override {
    if (conn_) PQfinish(conn_);
  }

  void Migrate();
  WorkOrder Create(WorkOrder order, std::chrono::system_clock::time_point now) override;
  std::optional<WorkOrder> Get(const std::string& id) override;
  std::optional<WorkOrder> Urge(const std::string& id,
                                std::chrono::system_clock::time_point now) override;
  std::optional<WorkOrder> FindDuplicate(const std::string& intent, const std::string& place_key,
                                         std::chrono::system_clock::time_point since) override;
  std::optional<WorkOrder> Link(const std::string& id, const std::string& call_id,
                                std::chrono::system_clock::time_point now) override;
  std::vector<WorkOrder> List(const OrderQuery& query) override;
  std::optional<WorkOrder> Update(const std::string& id, const OrderUpdate& update,
                                  std::chrono::system_clock::time_point now) override;
  int SchemaVersion() override;
  std::vector<OutboxItem> ClaimOutbox(int limit, std::chrono::system_clock::time_point now,
                                      std::chrono::seconds lease) override;
  void OutboxDelivered(int64_t seq, std::chrono::system_clock::time_point now) override;
  void OutboxFailed(int64_t seq, std::chrono::system_clock::time_point retry_at,
                    const std::string& error) override;
  int64_t OutboxPending() override;

 private:
  void Connect();
  // Runs `sql` with text parameters; throws ConnectionLost or hotline::Error on failure.
  Result Exec(const std::string& sql, const std::vector<std::string>& params = {});
  // Runs `body` in a transaction (BEGIN ... COMMIT), reconnecting and retrying it once when the
  // connection was lost before COMMIT went out.
  template <typename F>
  auto Transaction(const char* what, F body) -> decltype(body());
  std::optional<WorkOrder> Load(const std::string& key);
  std::optional<WorkOrder> Find(const std::string& key);  // with the digits-alone rule
  int VersionLocked();
  std::string Where() const { return "work-order store '" + path_ + "'"; }

  const std::string url_;
  PGconn* conn_ = nullptr;
  std::mutex mu_;  // one transaction at a time on conn_
};

void PgStore::Connect() {
  if (conn_) PQfinish(conn_);
  conn_ = PQconnectdb(url_.c_str());
  if (PQstatus(conn_) != CONNECTION_OK) {
    std::string msg = PQerrorMessage(conn_);
    while (!msg.empty() && std::isspace(static_cast<unsigned char>(msg.back()))) msg.pop_back();
    PQfinish(conn_);
    conn_ = nullptr;
    throw Error(Where() + " cannot be reached: " + msg, Code::kUnavailable);
  }
  // Notices (e.g. "relation already exists, skipping") are not for the server's stderr.
  PQsetNoticeProcessor(conn_, [](void*, const char*) {}, nullptr);
}

Result PgStore::Exec(const std::string& sql, const std::vector<std::string>& params) {
  if (!conn_ || PQstatus(conn_) != CONNECTION_OK) throw ConnectionLost{"not connected"};
  std::vector<const char*> values;
  for (const auto& p : params) values.push_back(p.c_str());
  Result r(PQexecParams(conn_, sql.c_str(), int(values.size()), nullptr, values.data(), nullptr,
                        nullptr, 0));
  const ExecStatusType st = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return r;
  std::string msg = r ? PQresultErrorMessage(r.get()) : PQerrorMessage(conn_);
  while (!msg.empty() && std::isspace(static_cast<unsigned char>(msg.back()))) msg.pop_back();
  if (PQstatus(conn_) != CONNECTION_OK) throw ConnectionLost{msg};
  const char* state = r ? PQresultErrorField(r.get(), PG_DIAG_SQLSTATE) : nullptr;
  // 40001 serialization failure, 40P01 deadlock: retryable, but reported as UNAVAILABLE here.
  throw Error(Where() + ": " + msg + (state ? std::string(" (SQLSTATE ") + state + ")" : ""),
              Code::kUnavailable);
}

template <typename F>
auto PgStore::Transaction(const char* what, F body) -> decltype(body()) {
  for (int attempt = 0;; ++attempt) {
    bool committing = false;
    try {
      if (!conn_ || PQstatus(conn_) != CONNECTION_OK) Connect();
      Exec("BEGIN");
      try {
        auto out = body();
        committing = true;
        Exec("COMMIT");
        return out;
      } catch (const Error&) {
        if (conn_ && PQstatus(conn_) == CONNECTION_OK) {
          PQclear(PQexec(conn_, "ROLLBACK"));
        }
        throw;
      }
    } catch (const ConnectionLost& lost) {
      // The server went away (restart, failover). Before COMMIT nothing was written: once more
      // on a new connection. At COMMIT the outcome is unknown: the caller hears UNAVAILABLE.
      if (committing || attempt > 0) {
        throw Error(Where() + ": " + what + ": the connection was lost" +
                        (committing ? " during COMMIT (the outcome is unknown)" : "") + ": " +
                        lost.message,
                    Code::kUnavailable);
      }
      Connect();
    }
  }
}

int PgStore::VersionLocked() {
  Result r = Exec("SELECT COALESCE(MAX(version), 0) FROM schema_migrations");
  return std::atoi(PQgetvalue(r.get(), 0, 0));
}

int PgStore::SchemaVersion() {
  std::lock_guard<std::mutex> lock(mu_);
  return Transaction("reading the schema version", [&] { return VersionLocked(); });
}

void PgStore::Migrate() {
  std::lock_guard<std::mutex> lock(mu_);
  const auto& all = PgMigrations();
  Transaction("migrating", [&] {
    // One server migrates at a time; the others wait here, then find nothing left to do.
    Exec("SELECT pg_advisory_xact_lock(7240160012345)");
    Exec("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY,"
         " applied_at TIMESTAMPTZ NOT NULL DEFAULT now())");
    const int have = VersionLocked();
    if (have > int(all.size())) {
      throw Error(Where() + " is at schema version " + std::to_string(have) +
                      "; this build knows up to " + std::to_string(all.size()) +
                      ": upgrade the server",
                  Code::kFailedPrecondition);
    }
    for (int v = have + 1; v <= int(all.size()); ++v) {
      for (const std::string& sql : all[size_t(v - 1)]) Exec(sql);
      Exec("INSERT INTO schema_migrations (version) VALUES ($1)", {std::to_string(v)});
    }
    return 0;
  });
}

std::optional<WorkOrder> PgStore::Load(const std::string& key) {
  Result r = Exec(
      "SELECT id, call_id, department, intent, caller_text, created_at, status, slots, summary,"
      " unverified, place_key, updated_at FROM work_orders WHERE key = $1",
      {key});
  if (PQntuples(r.get()) == 0) return std::nullopt;
  auto col = [&](int i) { return std::string(PQgetvalue(r.get(), 0, i)); };
  WorkOrder o;
  o.id = col(0);
  o.call_id = col(1);
  o.department = col(2);
  o.intent = col(3);
  o.caller_text = col(4);
  o.created_at = col(5);
  o.status = col(6);
  o.slots = SlotsFromJson(col(7), Where());
  o.summary = col(8);
  o.unverified = StringsFromJson(col(9), Where());
  o.place_key = col(10);
  o.updated_at = col(11);
  Result u = Exec("SELECT at FROM urgings WHERE order_id = $1 ORDER BY n", {o.id});
  for (int i = 0; i < PQntuples(u.get()); ++i) o.urged_at.push_back(PQgetvalue(u.get(), i, 0));
  Result l = Exec("SELECT call_id FROM linked_calls WHERE order_id = $1 ORDER BY n", {o.id});
  for (int i = 0; i < PQntuples(l.get()); ++i) o.linked_calls.push_back(PQgetvalue(l.get(), i, 0));
  Result n = Exec(
      "SELECT at, by_client, text, status FROM order_notes WHERE order_id = $1 ORDER BY n", {o.id});
  for (int i = 0; i < PQntuples(n.get()); ++i) {
    o.notes.push_back({PQgetvalue(n.get(), i, 0), PQgetvalue(n.get(), i, 1),
                       PQgetvalue(n.get(), i, 2), PQgetvalue(n.get(), i, 3)});
  }
  return o;
}

std::optional<WorkOrder> PgStore::Find(const std::string& key) {
  auto order = Load(key);
  // A caller may read out only the digits ("20261201000123"): our ids all start with WO.
  if (!order && std::isdigit(static_cast<unsigned char>(key[0]))) order = Load("WO" + key);
  return order;
}

WorkOrder PgStore::Create(WorkOrder order, std::chrono::system_clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string day = OrderDay(now);
  order.created_at = FormatRfc3339Utc(now);
  order.status = "open";
  order.urged_at.clear();
  order.linked_calls.clear();
  order.notes.clear();
  order.updated_at.clear();
  return Transaction("creating an order", [&] {
    WorkOrder o = order;
    auto insert = [&](const std::string& n, bool skip_taken) {
      o.id = FormatOrderId(day, std::atoll(n.c_str()));
      Result r = Exec(
          std::string("INSERT INTO work_orders (id, key, day, seq, call_id, department, intent,"
                      " caller_text, created_at, status, slots, summary, unverified, place_key)"
                      " VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14)") +
              (skip_taken ? " ON CONFLICT DO NOTHING" : "") + " RETURNING id",
          {o.id, OrderKey(o.id), day, n, o.call_id, o.department, o.intent, o.caller_text,
           o.created_at, o.status, SlotsToJson(o.slots), o.summary,
           nlohmann::json(o.unverified).dump(), o.place_key});
      return PQntuples(r.get()) == 1;
    };
    if (random_ids_) {
      // A taken number (by this or another server) inserts nothing: draw again.
      for (int tries = 0;; ++tries) {
        if (tries == internal::kRandomIdTries)
          throw Error(Where() + ": no free random order number for " + day,
                      Code::kResourceExhausted);
        if (insert(std::to_string(internal::RandomOrderNumber()), true)) break;
      }
    } else {
      // The day's counter row is locked until COMMIT: servers never pick the same number.
      Result seq = Exec(
          "INSERT INTO order_days (day, last_seq) VALUES ($1, 1) ON CONFLICT (day) DO UPDATE"
          " SET last_seq = order_days.last_seq + 1 RETURNING last_seq",
          {day});
      insert(PQgetvalue(seq.get(), 0, 0), false);
    }
    if (outbox_) {
      Exec("INSERT INTO outbox (order_id, created_at, next_at) VALUES ($1, $2, 0)",
           {o.id, o.created_at});
    }
    return o;
  });
}

std::optional<WorkOrder> PgStore::Get(const std::string& id) {
  const std::string key = OrderKey(id);
  if (key.empty()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  return Transaction("reading an order", [&] { return Find(key); });
}

std::optional<WorkOrder> PgStore::Urge(const std::string& id,
                                       std::chrono::system_clock::time_point now) {
  const std::string key = OrderKey(id);
  if (key.empty()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  const std::string at = FormatRfc3339Utc(now);
  return Transaction("recording an urging", [&]() -> std::optional<WorkOrder> {
    auto order = Find(key);
    if (!order) return std::nullopt;
    Exec("INSERT INTO urgings (order_id, at) VALUES ($1, $2)", {order->id, at});
    order->urged_at.push_back(at);
    return order;
  });
}

std::optional<WorkOrder> PgStore::FindDuplicate(const std::string& intent,
                                                const std::string& place_key,
                                                std::chrono::system_clock::time_point since) {
  if (place_key.empty()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  return Transaction("finding a repeat report", [&]() -> std::optional<WorkOrder> {
    Result r = Exec(std::string("SELECT key FROM work_orders WHERE intent = $1 AND place_key = $2"
                                " AND status IN ") +
                        internal::kJoinableStatuses +
                        " AND created_at >= $3 ORDER BY created_at DESC, seq DESC LIMIT 1",
                    {intent, place_key, FormatRfc3339Utc(since)});
    if (PQntuples(r.get()) == 0) return std::nullopt;
    return Load(PQgetvalue(r.get(), 0, 0));
  });
}

std::optional<WorkOrder> PgStore::Link(const std::string& id, const std::string& call_id,
                                       std::chrono::system_clock::time_point now) {
  const std::string key = OrderKey(id);
  if (key.empty()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  const std::string at = FormatRfc3339Utc(now);
  return Transaction("joining a call to an order", [&]() -> std::optional<WorkOrder> {
    auto order = Find(key);
    if (!order) return std::nullopt;
    Exec("INSERT INTO linked_calls (order_id, call_id, at) VALUES ($1, $2, $3)",
         {order->id, call_id, at});
    Exec("INSERT INTO urgings (order_id, at) VALUES ($1, $2)", {order->id, at});
    order->linked_calls.push_back(call_id);
    order->urged_at.push_back(at);
    return order;
  });
}

std::vector<WorkOrder> PgStore::List(const OrderQuery& q) {
  CheckOrderQuery(q);
  std::lock_guard<std::mutex> lock(mu_);
  return Transaction("listing orders", [&] {
    Result r = Exec(
        "SELECT key FROM work_orders WHERE ($1 = '' OR status = $1) AND ($2 = '' OR department = $2)"
        " AND ($3 = '' OR intent = $3)"
        " AND ($4 = '' OR strpos(caller_text, $4) > 0 OR strpos(summary, $4) > 0)"
        " AND ($5 = '' OR created_at >= $5) AND ($6 = '' OR created_at <= $6)"
        " ORDER BY created_at DESC, id DESC LIMIT $7::int OFFSET $8::int",
        {q.status, q.department, q.intent, q.text, q.created_from, q.created_to,
         std::to_string(q.limit), std::to_string(q.offset)});
    std::vector<WorkOrder> out;
    for (int i = 0; i < PQntuples(r.get()); ++i)
      if (auto o = Load(PQgetvalue(r.get(), i, 0))) out.push_back(std::move(*o));
    return out;
  });
}

std::optional<WorkOrder> PgStore::Update(const std::string& id, const OrderUpdate& update,
                                         std::chrono::system_clock::time_point now) {
  CheckOrderUpdate(update);
  const std::string key = OrderKey(id);
  if (key.empty()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  const std::string at = FormatRfc3339Utc(now);
  return Transaction("updating an order", [&]() -> std::optional<WorkOrder> {
    auto order = Find(key);
    if (!order) return std::nullopt;
    // FOR UPDATE: two operators changing one order are applied one after the other.
    Exec("SELECT 1 FROM work_orders WHERE id = $1 FOR UPDATE", {order->id});
    Exec("UPDATE work_orders SET status = CASE WHEN $1 = '' THEN status ELSE $1 END,"
         " updated_at = $2 WHERE id = $3",
         {update.status, at, order->id});
    Exec("INSERT INTO order_notes (order_id, at, by_client, text, status) VALUES ($1,$2,$3,$4,$5)",
         {order->id, at, update.by, update.note, update.status});
    if (!update.status.empty()) order->status = update.status;
    order->updated_at = at;
    order->notes.push_back({at, update.by, update.note, update.status});
    return order;
  });
}

std::string Millis(std::chrono::system_clock::time_point t) {
  return std::to_string(
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count());
}

std::vector<OutboxItem> PgStore::ClaimOutbox(int limit, std::chrono::system_clock::time_point now,
                                             std::chrono::seconds lease) {
  std::lock_guard<std::mutex> lock(mu_);
  return Transaction("claiming outbox entries", [&] {
    // SKIP LOCKED: servers claiming together take different entries.
    Result r = Exec(
        "UPDATE outbox SET next_at = $1 WHERE seq IN (SELECT seq FROM outbox WHERE"
        " delivered_at = '' AND next_at <= $2 ORDER BY seq LIMIT $3::int FOR UPDATE SKIP LOCKED)"
        " RETURNING seq, order_id, attempts",
        {Millis(now + lease), Millis(now), std::to_string(limit)});
    std::vector<OutboxItem> out;
    for (int i = 0; i < PQntuples(r.get()); ++i) {
      out.push_back({std::atoll(PQgetvalue(r.get(), i, 0)), PQgetvalue(r.get(), i, 1),
                     std::atoi(PQgetvalue(r.get(), i, 2))});
    }
    std::sort(out.begin(), out.end(),
              [](const OutboxItem& a, const OutboxItem& b) { return a.seq < b.seq; });
    return out;
  });
}

void PgStore::OutboxDelivered(int64_t seq, std::chrono::system_clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  Transaction("marking a delivery", [&] {
    Exec("UPDATE outbox SET delivered_at = $1, attempts = attempts + 1 WHERE seq = $2",
         {FormatRfc3339Utc(now), std::to_string(seq)});
    return 0;
  });
}

void PgStore::OutboxFailed(int64_t seq, std::chrono::system_clock::time_point retry_at,
                           const std::string& error) {
  std::lock_guard<std::mutex> lock(mu_);
  Transaction("recording a failed delivery", [&] {
    Exec("UPDATE outbox SET attempts = attempts + 1, next_at = $1, last_error = $2 WHERE seq = $3",
         {Millis(retry_at), error, std::to_string(seq)});
    return 0;
  });
}

int64_t PgStore::OutboxPending() {
  std::lock_guard<std::mutex> lock(mu_);
  return Transaction("counting the outbox", [&] {
    Result r = Exec("SELECT COUNT(*) FROM outbox WHERE delivered_at = ''");
    return int64_t(std::atoll(PQgetvalue(r.get(), 0, 0)));
  });
}

}  // namespace

std::unique_ptr<WorkOrderStore> OpenPostgresWorkOrderStore(const std::string& url) {
  auto store = std::make_unique<PgStore>(url, RedactUrl(url));
  store->Migrate();
  return store;
}

}  // namespace hotline::dialog
