#include "dialog/work_order_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <random>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "dialog/work_order_store_internal.h"
#include "nlu/normalize/normalize.h"

namespace hotline::dialog {
namespace {

struct StmtDeleter {
  void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using Stmt = std::unique_ptr<sqlite3_stmt, StmtDeleter>;

// Rolls back the open transaction unless Commit() ran: a throw between BEGIN and COMMIT never
// leaves the connection inside a transaction.
class Transaction {
 public:
  explicit Transaction(sqlite3* db) : db_(db) {}
  ~Transaction() {
    if (db_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  bool Commit() {
    const bool ok = sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr) == SQLITE_OK;
    if (ok) db_ = nullptr;
    return ok;
  }

 private:
  sqlite3* db_;
};

std::string ColumnText(sqlite3_stmt* s, int i) {
  const auto* p = sqlite3_column_text(s, i);
  return p ? std::string(reinterpret_cast<const char*>(p)) : std::string();
}

}  // namespace

std::string OrderDay(std::chrono::system_clock::time_point t) {
  const std::time_t secs = std::chrono::system_clock::to_time_t(t) + nlu::kShanghaiUtcOffsetSeconds;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%04d%02d%02d", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday);
  return buf;
}

namespace internal {

std::string SlotsToJson(const std::vector<SlotFill>& slots) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& s : slots)
    a.push_back({{"type", s.type}, {"value", s.value}, {"normalized", s.normalized}});
  return a.dump();
}

std::vector<SlotFill> SlotsFromJson(const std::string& text, const std::string& where) {
  std::vector<SlotFill> out;
  try {
    for (const auto& x : nlohmann::json::parse(text))
      out.push_back({x.at("type").get<std::string>(), x.at("value").get<std::string>(),
                     x.at("normalized").get<std::string>()});
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": slots of an order are not JSON: " + e.what(), Code::kDataLoss);
  }
  return out;
}

std::vector<std::string> StringsFromJson(const std::string& text, const std::string& where) {
  try {
    return nlohmann::json::parse(text).get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": a list column of an order is not JSON: " + e.what(), Code::kDataLoss);
  }
}

std::string FormatOrderId(const std::string& day, long long seq) {
  char id[40];
  std::snprintf(id, sizeof id, "WO%s-%06lld", day.c_str(), seq);
  return id;
}

long long RandomOrderNumber() {
  static std::mutex mu;
  static std::random_device source;  // getrandom(2) on Linux
  std::lock_guard<std::mutex> lock(mu);
  return std::uniform_int_distribution<long long>(1, 999999)(source);
}

}  // namespace internal

bool ValidOrderStatus(const std::string& status) {
  for (const char* s : kOrderStatuses)
    if (status == s) return true;
  return false;
}

namespace {

bool IsRfc3339Utc(const std::string& t) {
  // YYYY-MM-DDTHH:MM:SSZ, the form the stores write (compared as text).
  static const char kShape[] = "dddd-dd-ddTdd:dd:ddZ";
  if (t.size() != sizeof kShape - 1) return false;
  for (size_t i = 0; i < t.size(); ++i) {
    if (kShape[i] == 'd' ? !std::isdigit(static_cast<unsigned char>(t[i])) : t[i] != kShape[i])
      return false;
  }
  return true;
}

}  // namespace

void CheckOrderQuery(const OrderQuery& q) {
  if (!q.status.empty() && !ValidOrderStatus(q.status))
    throw Error("status must be one of open, in_progress, resolved, closed, rejected; got '" +
                    q.status + "'",
                Code::kInvalidArgument);
  for (const auto* t : {&q.created_from, &q.created_to}) {
    if (!t->empty() && !IsRfc3339Utc(*t))
      throw Error("created_from and created_to must be RFC 3339 UTC like 2026-12-01T08:00:00Z",
                  Code::kInvalidArgument);
  }
  if (q.limit < 1 || q.limit > 500)
    throw Error("limit must be 1..500; got " + std::to_string(q.limit), Code::kInvalidArgument);
  if (q.offset < 0) throw Error("offset must not be negative", Code::kInvalidArgument);
  if (q.text.size() > 256) throw Error("text must be at most 256 bytes", Code::kInvalidArgument);
}

void CheckOrderUpdate(const OrderUpdate& u) {
  if (u.status.empty() && u.note.empty())
    throw Error("an update needs a status, a note or both", Code::kInvalidArgument);
  if (!u.status.empty() && !ValidOrderStatus(u.status))
    throw Error("status must be one of open, in_progress, resolved, closed, rejected; got '" +
                    u.status + "'",
                Code::kInvalidArgument);
  if (u.note.size() > 4096)
    throw Error("a note has at most 4096 bytes; got " + std::to_string(u.note.size()),
                Code::kInvalidArgument);
}

std::string RedactUrl(const std::string& url) {
  // scheme://user:password@host...: the password goes.
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return url;
  const size_t at = url.find('@', scheme + 3);
  if (at == std::string::npos) return url;
  const size_t colon = url.find(':', scheme + 3);
  if (colon == std::string::npos || colon > at) return url;
  return url.substr(0, colon + 1) + "***" + url.substr(at);
}

std::unique_ptr<WorkOrderStore> WorkOrderStore::Open(const std::string& location) {
  if (location.rfind("postgresql://", 0) == 0 || location.rfind("postgres://", 0) == 0)
    return OpenPostgresWorkOrderStore(location);
  return OpenSqliteWorkOrderStore(location);
}

std::string FormatRfc3339Utc(std::chrono::system_clock::time_point t) {
  const std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string OrderKey(const std::string& id) {
  std::string key;
  for (unsigned char c : id)
    if (std::isalnum(c)) key.push_back(static_cast<char>(std::toupper(c)));
  return key;
}

namespace {

using internal::FormatOrderId;
using internal::SlotsFromJson;
using internal::SlotsToJson;
using internal::StringsFromJson;

// Each entry brings a store from version i to i + 1. Steps use IF NOT EXISTS (and column checks)
// so files written before versioning, which already hold part of the layout, upgrade too.
struct SqliteMigration {
  const char* what;
  std::vector<std::string> sql;
  std::vector<std::string> add_columns;  // "name TYPE ..." added to work_orders when missing
};

const std::vector<SqliteMigration>& SqliteMigrations() {
  static const std::vector<SqliteMigration> kMigrations = {
      {"orders, urgings, joined calls",
       {"CREATE TABLE IF NOT EXISTS work_orders ("
        " id TEXT PRIMARY KEY, key TEXT NOT NULL UNIQUE, day TEXT NOT NULL, seq INTEGER NOT NULL,"
        " call_id TEXT NOT NULL, department TEXT NOT NULL, intent TEXT NOT NULL,"
        " caller_text TEXT NOT NULL, created_at TEXT NOT NULL, status TEXT NOT NULL,"
        " slots TEXT NOT NULL, UNIQUE(day, seq))",
        "CREATE TABLE IF NOT EXISTS urgings ("
        " order_id TEXT NOT NULL REFERENCES work_orders(id), at TEXT NOT NULL)",
        "CREATE INDEX IF NOT EXISTS urgings_order ON urgings(order_id)",
        "CREATE TABLE IF NOT EXISTS linked_calls ("
        " order_id TEXT NOT NULL REFERENCES work_orders(id), call_id TEXT NOT NULL,"
        " at TEXT NOT NULL)",
        "CREATE INDEX IF NOT EXISTS linked_calls_order ON linked_calls(order_id)"},
       {}},
      {"handler paragraph, unverified slots, place key",
       {"CREATE INDEX IF NOT EXISTS work_orders_place ON work_orders(intent, place_key, created_at)"},
       {"summary TEXT NOT NULL DEFAULT ''", "unverified TEXT NOT NULL DEFAULT '[]'",
        "place_key TEXT NOT NULL DEFAULT ''"}},
      {"operators' notes and status changes",
       {"CREATE TABLE IF NOT EXISTS order_notes ("
        " order_id TEXT NOT NULL REFERENCES work_orders(id), at TEXT NOT NULL,"
        " by_client TEXT NOT NULL, text TEXT NOT NULL, status TEXT NOT NULL)",
        "CREATE INDEX IF NOT EXISTS order_notes_order ON order_notes(order_id)",
        "CREATE INDEX IF NOT EXISTS work_orders_created ON work_orders(created_at)"},
       {"updated_at TEXT NOT NULL DEFAULT ''"}},
      {"webhook outbox",
       {"CREATE TABLE IF NOT EXISTS outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
        " order_id TEXT NOT NULL REFERENCES work_orders(id), created_at TEXT NOT NULL,"
        " attempts INTEGER NOT NULL DEFAULT 0, next_at INTEGER NOT NULL,"
        " delivered_at TEXT NOT NULL DEFAULT '', last_error TEXT NOT NULL DEFAULT '')",
        "CREATE INDEX IF NOT EXISTS outbox_due ON outbox(delivered_at, next_at)"},
       {}},
  };
  return kMigrations;
}

class SqliteStore final : public WorkOrderStore {
 public:
  SqliteStore(std::string path, sqlite3* db) : WorkOrderStore(std::move(path)), db_(db) {}
  ~SqliteStore() override { sqlite3_close_v2(db_); }

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
  std::optional<WorkOrder> GetLocked(const std::string& key);
  std::optional<WorkOrder> GetLocked(const std::string& key, bool digits_alone);
  void Exec(const std::string& sql);
  bool HasColumn(const std::string& name);
  int VersionLocked();
  Stmt Prepare(const char* sql);
  // Throws kUnavailable with SQLite's message (an open Transaction rolls back as it unwinds).
  [[noreturn]] void Fail(const std::string& what);

  sqlite3* db_;
  std::mutex mu_;  // one statement at a time on db_
};

Stmt SqliteStore::Prepare(const char* sql) {
  sqlite3_stmt* raw = nullptr;
  sqlite3_prepare_v2(db_, sql, -1, &raw, nullptr);
  if (!raw)
    throw Error("work-order store '" + path_ + "': " + sqlite3_errmsg(db_), Code::kUnavailable);
  return Stmt(raw);
}

void SqliteStore::Fail(const std::string& what) {
  const std::string msg = sqlite3_errmsg(db_);
  throw Error("work-order store '" + path_ + "': " + what + ": " + msg, Code::kUnavailable);
}

bool SqliteStore::HasColumn(const std::string& name) {
  Stmt q = Prepare("PRAGMA table_info(work_orders)");
  while (sqlite3_step(q.get()) == SQLITE_ROW)
    if (ColumnText(q.get(), 1) == name) return true;
  return false;
}

void SqliteStore::Exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    const int code = sqlite3_errcode(db_);
    throw Error(
        "work-order store '" + path_ + "': " + msg,
        code == SQLITE_NOTADB || code == SQLITE_CORRUPT ? Code::kDataLoss : Code::kUnavailable);
  }
}

int SqliteStore::VersionLocked() {
  Stmt q = Prepare("SELECT COALESCE(MAX(version), 0) FROM schema_migrations");
  if (sqlite3_step(q.get()) != SQLITE_ROW) Fail("reading the schema version");
  return int(sqlite3_column_int(q.get(), 0));
}

int SqliteStore::SchemaVersion() {
  std::lock_guard<std::mutex> lock(mu_);
  return VersionLocked();
}

void SqliteStore::Migrate() {
  std::lock_guard<std::mutex> lock(mu_);
  Exec("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY,"
       " what TEXT NOT NULL, applied_at TEXT NOT NULL)");
  const auto& all = SqliteMigrations();
  for (int v = 1; v <= int(all.size()); ++v) {
    Exec("BEGIN IMMEDIATE");  // another process may be migrating the same file
    int have = 0;
    try {
      have = VersionLocked();
    } catch (...) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
    if (have > int(all.size())) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      throw Error("work-order store '" + path_ + "' is at schema version " +
                      std::to_string(have) + "; this build knows up to " +
                      std::to_string(all.size()) + ": upgrade the server",
                  Code::kFailedPrecondition);
    }
    if (have >= v) {
      Exec("COMMIT");
      continue;
    }
    try {
      const SqliteMigration& m = all[size_t(v - 1)];
      for (const std::string& column : m.add_columns) {
        const std::string name = column.substr(0, column.find(' '));
        if (!HasColumn(name)) Exec("ALTER TABLE work_orders ADD COLUMN " + column);
      }
      for (const std::string& sql : m.sql) Exec(sql);
      Stmt ins = Prepare("INSERT INTO schema_migrations (version, what, applied_at) VALUES (?,?,?)");
      const std::string at = FormatRfc3339Utc(std::chrono::system_clock::now());
      sqlite3_bind_int(ins.get(), 1, v);
      sqlite3_bind_text(ins.get(), 2, m.what, -1, SQLITE_TRANSIENT);
      sqlite3_bind_text(ins.get(), 3, at.c_str(), -1, SQLITE_TRANSIENT);
      if (sqlite3_step(ins.get()) != SQLITE_DONE) Fail("recording migration");
      Exec("COMMIT");
    } catch (...) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
  }
}

WorkOrder SqliteStore::Create(WorkOrder order, std::chrono::system_clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string day = OrderDay(now);
  order.created_at = FormatRfc3339Utc(now);
  order.status = "open";
  order.urged_at.clear();
  order.linked_calls.clear();
  order.notes.clear();
  order.updated_at.clear();
  // IMMEDIATE takes the write lock first, so two processes never pick the same sequence number.
  Exec("BEGIN IMMEDIATE");
  Transaction tx(db_);
  int64_t seq = 0;
  Stmt next;
  if (random_ids_) {
    next = Prepare("SELECT 1 FROM work_orders WHERE day = ? AND seq = ?");
    for (int tries = 0; seq == 0; ++tries) {
      if (tries == internal::kRandomIdTries)
        throw Error("work-order store '" + path_ + "': no free random order number for " + day,
                    Code::kResourceExhausted);
      const int64_t candidate = internal::RandomOrderNumber();
      sqlite3_reset(next.get());
      sqlite3_bind_text(next.get(), 1, day.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_int64(next.get(), 2, candidate);
      const int rc = sqlite3_step(next.get());
      if (rc == SQLITE_DONE) seq = candidate;  // not taken
      else if (rc != SQLITE_ROW) Fail("choosing an order number");
    }
  } else {
    next = Prepare("SELECT COALESCE(MAX(seq), 0) + 1 FROM work_orders WHERE day = ?");
    sqlite3_bind_text(next.get(), 1, day.c_str(), -1, SQLITE_TRANSIENT);
    if (sqlite3_step(next.get()) != SQLITE_ROW) Fail("next sequence");
    seq = sqlite3_column_int64(next.get(), 0);
  }
  order.id = FormatOrderId(day, static_cast<long long>(seq));
  Stmt ins = Prepare(
      "INSERT INTO work_orders (id, key, day, seq, call_id, department, intent,"
      " caller_text, created_at, status, slots, summary, unverified, place_key)"
      " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  const std::string key = OrderKey(order.id), slots = SlotsToJson(order.slots);
  const std::string unverified = nlohmann::json(order.unverified).dump();
  const std::string* texts[] = {&order.id, &key, &day};
  for (int i = 0; i < 3; ++i)
    sqlite3_bind_text(ins.get(), i + 1, texts[i]->c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(ins.get(), 4, seq);
  const std::string* rest[] = {
      &order.call_id,    &order.department, &order.intent, &order.caller_text,
      &order.created_at, &order.status,     &slots,        &order.summary,
      &unverified,       &order.place_key};
  for (int i = 0; i < 10; ++i)
    sqlite3_bind_text(ins.get(), i + 5, rest[i]->c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(ins.get()) != SQLITE_DONE) Fail("insert");
  ins.reset();
  next.reset();
  if (outbox_) {
    Stmt q = Prepare("INSERT INTO outbox (order_id, created_at, next_at) VALUES (?, ?, 0)");
    sqlite3_bind_text(q.get(), 1, order.id.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(q.get(), 2, order.created_at.c_str(), -1, SQLITE_TRANSIENT);
    if (sqlite3_step(q.get()) != SQLITE_DONE) Fail("queueing the order for delivery");
  }
  if (!tx.Commit()) Fail("commit");
  return order;
}

std::optional<WorkOrder> SqliteStore::GetLocked(const std::string& key) {
  Stmt q = Prepare(
      "SELECT id, call_id, department, intent, caller_text, created_at, status, slots, summary,"
      " unverified, place_key, updated_at FROM work_orders WHERE key = ?");
  sqlite3_bind_text(q.get(), 1, key.c_str(), -1, SQLITE_TRANSIENT);
  const int rc = sqlite3_step(q.get());
  if (rc == SQLITE_DONE) return std::nullopt;
  if (rc != SQLITE_ROW) Fail("reading an order");
  WorkOrder o;
  o.id = ColumnText(q.get(), 0);
  o.call_id = ColumnText(q.get(), 1);
  o.department = ColumnText(q.get(), 2);
  o.intent = ColumnText(q.get(), 3);
  o.caller_text = ColumnText(q.get(), 4);
  o.created_at = ColumnText(q.get(), 5);
  o.status = ColumnText(q.get(), 6);
  o.slots = SlotsFromJson(ColumnText(q.get(), 7), "work-order store '" + path_ + "'");
  o.summary = ColumnText(q.get(), 8);
  o.unverified = StringsFromJson(ColumnText(q.get(), 9), "work-order store '" + path_ + "'");
  o.place_key = ColumnText(q.get(), 10);
  o.updated_at = ColumnText(q.get(), 11);
  q.reset();
  Stmt u = Prepare("SELECT at FROM urgings WHERE order_id = ? ORDER BY rowid");
  sqlite3_bind_text(u.get(), 1, o.id.c_str(), -1, SQLITE_TRANSIENT);
  while (sqlite3_step(u.get()) == SQLITE_ROW) o.urged_at.push_back(ColumnText(u.get(), 0));
  Stmt l = Prepare("SELECT call_id FROM linked_calls WHERE order_id = ? ORDER BY rowid");
  sqlite3_bind_text(l.get(), 1, o.id.c_str(), -1, SQLITE_TRANSIENT);
  while (sqlite3_step(l.get()) == SQLITE_ROW) o.linked_calls.push_back(ColumnText(l.get(), 0));
  Stmt n = Prepare("SELECT at, by_client, text, status FROM order_notes WHERE order_id = ?"
                   " ORDER BY rowid");
  sqlite3_bind_text(n.get(), 1, o.id.c_str(), -1, SQLITE_TRANSIENT);
  while (sqlite3_step(n.get()) == SQLITE_ROW) {
    o.notes.push_back({ColumnText(n.get(), 0), ColumnText(n.get(), 1), ColumnText(n.get(), 2),
                       ColumnText(n.get(), 3)});
  }
  return o;
}

std::optional<WorkOrder> SqliteStore::GetLocked(const std::string& key, bool digits_alone) {
  auto order = GetLocked(key);
  // A caller may read out only the digits ("20261201000123"): our ids all start with WO.
  if (!order && digits_alone && std::isdigit(static_cast<unsigned char>(key[0])))
    order = GetLocked("WO" + key);
  return order;
}

std::optional<WorkOrder> SqliteStore::Get(const std::string& id) {
  const std::string key = OrderKey(id);
  if (key.empty()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  return GetLocked(key, true);
}

std::optional<WorkOrder> SqliteStore::Urge(const std::string& id,
                                           std::chrono::system_clock::time_point now) {
  const std::string key = OrderKey(id);
  if (key.empty()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  auto order = GetLocked(key, true);
  if (!order) return std::nullopt;
  Stmt ins = Prepare("INSERT INTO urgings (order_id, at) VALUES (?, ?)");
  const std::string at = FormatRfc3339Utc(now);
  sqlite3_bind_text(ins.get(), 1, order->id.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(ins.get(), 2, at.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(ins.get()) != SQLITE_DONE) Fail("recording an urging");
  order->urged_at.push_back(at);
  return order;
}

std::optional<WorkOrder> SqliteStore::FindDuplicate(const std::string& intent,
                                                    const std::string& place_key,
                                                    std::chrono::system_clock::time_point since) {
  if (place_key.empty()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  Stmt q = Prepare((std::string("SELECT key FROM work_orders WHERE intent = ? AND place_key = ?"
                                " AND status IN ") +
                    internal::kJoinableStatuses +
                    " AND created_at >= ? ORDER BY created_at DESC, seq DESC LIMIT 1")
                       .c_str());
  const std::string from = FormatRfc3339Utc(since);
  sqlite3_bind_text(q.get(), 1, intent.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(q.get(), 2, place_key.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(q.get(), 3, from.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(q.get()) != SQLITE_ROW) return std::nullopt;
  const std::string key = ColumnText(q.get(), 0);
  q.reset();
  return GetLocked(key);
}

std::optional<WorkOrder> SqliteStore::Link(const std::string& id, const std::string& call_id,
                                           std::chrono::system_clock::time_point now) {
  const std::string key = OrderKey(id);
  if (key.empty()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  auto order = GetLocked(key, true);
  if (!order) return std::nullopt;
  const std::string at = FormatRfc3339Utc(now);
  Exec("BEGIN IMMEDIATE");
  Transaction tx(db_);
  {
    Stmt link = Prepare("INSERT INTO linked_calls (order_id, call_id, at) VALUES (?, ?, ?)");
    sqlite3_bind_text(link.get(), 1, order->id.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(link.get(), 2, call_id.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(link.get(), 3, at.c_str(), -1, SQLITE_TRANSIENT);
    if (sqlite3_step(link.get()) != SQLITE_DONE) Fail("joining a call to an order");
    Stmt urge = Prepare("INSERT INTO urgings (order_id, at) VALUES (?, ?)");
    sqlite3_bind_text(urge.get(), 1, order->id.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(urge.get(), 2, at.c_str(), -1, SQLITE_TRANSIENT);
    if (sqlite3_step(urge.get()) != SQLITE_DONE) Fail("joining a call to an order");
  }
  if (!tx.Commit()) Fail("commit");
  order->linked_calls.push_back(call_id);
  order->urged_at.push_back(at);
  return order;
}

std::vector<WorkOrder> SqliteStore::List(const OrderQuery& query) {
  CheckOrderQuery(query);
  std::lock_guard<std::mutex> lock(mu_);
  Stmt q = Prepare(
      "SELECT key FROM work_orders WHERE (?1 = '' OR status = ?1) AND (?2 = '' OR department = ?2)"
      " AND (?3 = '' OR intent = ?3)"
      " AND (?4 = '' OR instr(caller_text, ?4) > 0 OR instr(summary, ?4) > 0)"
      " AND (?5 = '' OR created_at >= ?5) AND (?6 = '' OR created_at <= ?6)"
      " ORDER BY created_at DESC, id DESC LIMIT ?7 OFFSET ?8");
  const std::string* texts[] = {&query.status, &query.department,   &query.intent,
                                &query.text,   &query.created_from, &query.created_to};
  for (int i = 0; i < 6; ++i)
    sqlite3_bind_text(q.get(), i + 1, texts[i]->c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(q.get(), 7, query.limit);
  sqlite3_bind_int(q.get(), 8, query.offset);
  std::vector<std::string> keys;
  int rc;
  while ((rc = sqlite3_step(q.get())) == SQLITE_ROW) keys.push_back(ColumnText(q.get(), 0));
  if (rc != SQLITE_DONE) Fail("listing orders");
  q.reset();
  std::vector<WorkOrder> out;
  for (const std::string& key : keys)
    if (auto o = GetLocked(key)) out.push_back(std::move(*o));
  return out;
}

std::optional<WorkOrder> SqliteStore::Update(const std::string& id, const OrderUpdate& update,
                                             std::chrono::system_clock::time_point now) {
  CheckOrderUpdate(update);
  const std::string key = OrderKey(id);
  if (key.empty()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  const std::string at = FormatRfc3339Utc(now);
  Exec("BEGIN IMMEDIATE");
  Transaction tx(db_);
  std::optional<WorkOrder> order = GetLocked(key, true);
  if (!order) return std::nullopt;  // rolled back by tx
  {
    Stmt up = Prepare(
        "UPDATE work_orders SET status = CASE WHEN ?1 = '' THEN status ELSE ?1 END,"
        " updated_at = ?2 WHERE id = ?3");
    sqlite3_bind_text(up.get(), 1, update.status.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(up.get(), 2, at.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(up.get(), 3, order->id.c_str(), -1, SQLITE_TRANSIENT);
    if (sqlite3_step(up.get()) != SQLITE_DONE) Fail("updating an order");
    Stmt note = Prepare(
        "INSERT INTO order_notes (order_id, at, by_client, text, status) VALUES (?,?,?,?,?)");
    const std::string* v[] = {&order->id, &at, &update.by, &update.note, &update.status};
    for (int i = 0; i < 5; ++i)
      sqlite3_bind_text(note.get(), i + 1, v[i]->c_str(), -1, SQLITE_TRANSIENT);
    if (sqlite3_step(note.get()) != SQLITE_DONE) Fail("recording a note");
  }
  if (!tx.Commit()) Fail("commit");
  if (!update.status.empty()) order->status = update.status;
  order->updated_at = at;
  order->notes.push_back({at, update.by, update.note, update.status});
  return order;
}

int64_t UnixMillis(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

std::vector<OutboxItem> SqliteStore::ClaimOutbox(int limit,
                                                 std::chrono::system_clock::time_point now,
                                                 std::chrono::seconds lease) {
  std::lock_guard<std::mutex> lock(mu_);
  Exec("BEGIN IMMEDIATE");  // claims by several processes on one file never overlap
  Transaction tx(db_);
  std::vector<OutboxItem> out;
  {
    Stmt q = Prepare("SELECT seq, order_id, attempts FROM outbox WHERE delivered_at = '' AND"
                     " next_at <= ? ORDER BY seq LIMIT ?");
    sqlite3_bind_int64(q.get(), 1, UnixMillis(now));
    sqlite3_bind_int(q.get(), 2, limit);
    int rc;
    while ((rc = sqlite3_step(q.get())) == SQLITE_ROW)
      out.push_back({sqlite3_column_int64(q.get(), 0), ColumnText(q.get(), 1),
                     sqlite3_column_int(q.get(), 2)});
    if (rc != SQLITE_DONE) Fail("reading the outbox");
    Stmt up = Prepare("UPDATE outbox SET next_at = ? WHERE seq = ?");
    for (const OutboxItem& item : out) {
      sqlite3_reset(up.get());
      sqlite3_bind_int64(up.get(), 1, UnixMillis(now + lease));
      sqlite3_bind_int64(up.get(), 2, item.seq);
      if (sqlite3_step(up.get()) != SQLITE_DONE) Fail("leasing an outbox entry");
    }
  }
  if (!tx.Commit()) Fail("commit");
  return out;
}

void SqliteStore::OutboxDelivered(int64_t seq, std::chrono::system_clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt q = Prepare("UPDATE outbox SET delivered_at = ?, attempts = attempts + 1 WHERE seq = ?");
  const std::string at = FormatRfc3339Utc(now);
  sqlite3_bind_text(q.get(), 1, at.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(q.get(), 2, seq);
  if (sqlite3_step(q.get()) != SQLITE_DONE) Fail("marking a delivery");
}

void SqliteStore::OutboxFailed(int64_t seq, std::chrono::system_clock::time_point retry_at,
                               const std::string& error) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt q = Prepare(
      "UPDATE outbox SET attempts = attempts + 1, next_at = ?, last_error = ? WHERE seq = ?");
  sqlite3_bind_int64(q.get(), 1, UnixMillis(retry_at));
  sqlite3_bind_text(q.get(), 2, error.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(q.get(), 3, seq);
  if (sqlite3_step(q.get()) != SQLITE_DONE) Fail("recording a failed delivery");
}

int64_t SqliteStore::OutboxPending() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt q = Prepare("SELECT COUNT(*) FROM outbox WHERE delivered_at = ''");
  if (sqlite3_step(q.get()) != SQLITE_ROW) Fail("counting the outbox");
  return sqlite3_column_int64(q.get(), 0);
}

}  // namespace

int LatestWorkOrderSchema() { return int(SqliteMigrations().size()); }

std::unique_ptr<WorkOrderStore> OpenSqliteWorkOrderStore(const std::string& path) {
  std::error_code ec;
  const auto dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  // Orders hold callers' ID and phone numbers: the file is created readable by its owner only
  // (SQLite gives its -wal and -shm files the database file's mode).
  if (!std::filesystem::exists(path, ec)) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) ::close(fd);  // a failure (no folder, no permission) surfaces in sqlite3_open
  }
  sqlite3* db = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    throw Error("work-order store '" + path + "' cannot be opened: " + msg, Code::kUnavailable);
  }
  auto store = std::make_unique<SqliteStore>(path, db);
  sqlite3_busy_timeout(db, 10000);
  char* err = nullptr;
  // WAL: readers do not block the writer; FULL: the WAL is fsynced at every commit, so a
  // committed order survives power loss too, not only a killed process.
  for (const char* pragma : {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL"}) {
    if (sqlite3_exec(db, pragma, nullptr, nullptr, &err) != SQLITE_OK) {
      const std::string msg = err ? err : "unknown error";
      sqlite3_free(err);
      const int code = sqlite3_errcode(db);
      throw Error(
          "work-order store '" + path + "': " + msg,
          code == SQLITE_NOTADB || code == SQLITE_CORRUPT ? Code::kDataLoss : Code::kUnavailable);
    }
  }
  store->Migrate();
  return store;
}

}  // namespace hotline::dialog
