#include "dialog/work_order_store.h"

#include <sqlite3.h>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "nlu/normalize/normalize.h"

namespace hotline::dialog {
namespace {

struct StmtDeleter {
  void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using Stmt = std::unique_ptr<sqlite3_stmt, StmtDeleter>;

std::string ColumnText(sqlite3_stmt* s, int i) {
  const auto* p = sqlite3_column_text(s, i);
  return p ? std::string(reinterpret_cast<const char*>(p)) : std::string();
}

std::string Day(std::chrono::system_clock::time_point t) {
  const std::time_t secs = std::chrono::system_clock::to_time_t(t) + nlu::kShanghaiUtcOffsetSeconds;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%04d%02d%02d", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday);
  return buf;
}

nlohmann::json SlotsToJson(const std::vector<SlotFill>& slots) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& s : slots)
    a.push_back({{"type", s.type}, {"value", s.value}, {"normalized", s.normalized}});
  return a;
}

std::vector<SlotFill> SlotsFromJson(const std::string& text) {
  std::vector<SlotFill> out;
  for (const auto& x : nlohmann::json::parse(text))
    out.push_back({x.at("type").get<std::string>(), x.at("value").get<std::string>(),
                   x.at("normalized").get<std::string>()});
  return out;
}

}  // namespace

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

std::unique_ptr<WorkOrderStore> WorkOrderStore::Open(const std::string& path) {
  std::error_code ec;
  const auto dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  sqlite3* db = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    throw Error("work-order store '" + path + "' cannot be opened: " + msg, Code::kUnavailable);
  }
  std::unique_ptr<WorkOrderStore> store(new WorkOrderStore(path, db));
  sqlite3_busy_timeout(db, 10000);
  // WAL: readers do not block the writer; FULL: the WAL is fsynced at every commit, so a
  // committed order survives power loss too, not only a killed process.
  store->Exec("PRAGMA journal_mode=WAL");
  store->Exec("PRAGMA synchronous=FULL");
  store->Exec(
      "CREATE TABLE IF NOT EXISTS work_orders ("
      " id TEXT PRIMARY KEY, key TEXT NOT NULL UNIQUE, day TEXT NOT NULL, seq INTEGER NOT NULL,"
      " call_id TEXT NOT NULL, department TEXT NOT NULL, intent TEXT NOT NULL,"
      " caller_text TEXT NOT NULL, created_at TEXT NOT NULL, status TEXT NOT NULL,"
      " slots TEXT NOT NULL, UNIQUE(day, seq))");
  store->Exec(
      "CREATE TABLE IF NOT EXISTS urgings ("
      " order_id TEXT NOT NULL REFERENCES work_orders(id), at TEXT NOT NULL)");
  store->Exec("CREATE INDEX IF NOT EXISTS urgings_order ON urgings(order_id)");
  store->Exec(
      "CREATE TABLE IF NOT EXISTS linked_calls ("
      " order_id TEXT NOT NULL REFERENCES work_orders(id), call_id TEXT NOT NULL, at TEXT NOT NULL)");
  store->Exec("CREATE INDEX IF NOT EXISTS linked_calls_order ON linked_calls(order_id)");
  // Columns added after the first layout: a file written by an older build gets them here.
  for (const char* column : {"summary TEXT NOT NULL DEFAULT ''",
                             "unverified TEXT NOT NULL DEFAULT '[]'",
                             "place_key TEXT NOT NULL DEFAULT ''"}) {
    const std::string name = std::string(column).substr(0, std::string(column).find(' '));
    if (!store->HasColumn(name))
      store->Exec(("ALTER TABLE work_orders ADD COLUMN " + std::string(column)).c_str());
  }
  store->Exec(
      "CREATE INDEX IF NOT EXISTS work_orders_place ON work_orders(intent, place_key, created_at)");
  return store;
}

WorkOrderStore::~WorkOrderStore() { sqlite3_close_v2(db_); }

bool WorkOrderStore::HasColumn(const std::string& name) {
  sqlite3_stmt* raw = nullptr;
  sqlite3_prepare_v2(db_, "PRAGMA table_info(work_orders)", -1, &raw, nullptr);
  Stmt q(raw);
  if (!q)
    throw Error("work-order store '" + path_ + "': " + sqlite3_errmsg(db_), Code::kUnavailable);
  while (sqlite3_step(q.get()) == SQLITE_ROW)
    if (ColumnText(q.get(), 1) == name) return true;
  return false;
}

void WorkOrderStore::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    const int code = sqlite3_errcode(db_);
    throw Error(
        "work-order store '" + path_ + "': " + msg,
        code == SQLITE_NOTADB || code == SQLITE_CORRUPT ? Code::kDataLoss : Code::kUnavailable);
  }
}

WorkOrder WorkOrderStore::Create(WorkOrder order, std::chrono::system_clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string day = Day(now);
  order.created_at = FormatRfc3339Utc(now);
  order.status = "open";
  order.urged_at.clear();
  auto fail = [&](const std::string& what) {
    const std::string msg = sqlite3_errmsg(db_);
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return Error("work-order store '" + path_ + "': " + what + ": " + msg, Code::kUnavailable);
  };
  // IMMEDIATE takes the write lock first, so two processes never pick the same sequence number.
  Exec("BEGIN IMMEDIATE");
  sqlite3_stmt* raw = nullptr;
  sqlite3_prepare_v2(db_, "SELECT COALESCE(MAX(seq), 0) + 1 FROM work_orders WHERE day = ?", -1,
                     &raw, nullptr);
  Stmt next(raw);
  if (!next) throw fail("prepare");
  sqlite3_bind_text(next.get(), 1, day.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(next.get()) != SQLITE_ROW) throw fail("next sequence");
  const int64_t seq = sqlite3_column_int64(next.get(), 0);
  char id[40];
  std::snprintf(id, sizeof id, "WO%s-%06lld", day.c_str(), static_cast<long long>(seq));
  order.id = id;
  sqlite3_prepare_v2(db_,
                     "INSERT INTO work_orders (id, key, day, seq, call_id, department, intent,"
                     " caller_text, created_at, status, slots, summary, unverified, place_key)"
                     " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                     -1, &raw, nullptr);
  Stmt ins(raw);
  if (!ins) throw fail("prepare insert");
  const std::string key = OrderKey(order.id), slots = SlotsToJson(order.slots).dump();
  const std::string unverified = nlohmann::json(order.unverified).dump();
  order.linked_calls.clear();
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
  if (sqlite3_step(ins.get()) != SQLITE_DONE) throw fail("insert");
  ins.reset();
  next.reset();
  if (sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) throw fail("commit");
  return order;
}

std::optional<WorkOrder> WorkOrderStore::GetLocked(const std::string& key) {
  sqlite3_stmt* raw = nullptr;
  sqlite3_prepare_v2(
      db_,
      "SELECT id, call_id, department, intent, caller_text, created_at, status, slots, summary,"
      " unverified, place_key FROM work_orders WHERE key = ?",
      -1, &raw, nullptr);
  Stmt q(raw);
  if (!q)
    throw Error("work-order store '" + path_ + "': " + sqlite3_errmsg(db_), Code::kUnavailable);
  sqlite3_bind_text(q.get(), 1, key.c_str(), -1, SQLITE_TRANSIENT);
  const int rc = sqlite3_step(q.get());
  if (rc == SQLITE_DONE) return std::nullopt;
  if (rc != SQLITE_ROW)
    throw Error("work-order store '" + path_ + "': " + sqlite3_errmsg(db_), Code::kUnavailable);
  WorkOrder o;
  o.id = ColumnText(q.get(), 0);
  o.call_id = ColumnText(q.get(), 1);
  o.department = ColumnText(q.get(), 2);
  o.intent = ColumnText(q.get(), 3);
  o.caller_text = ColumnText(q.get(), 4);
  o.created_at = ColumnText(q.get(), 5);
  o.status = ColumnText(q.get(), 6);
  try {
    o.slots = SlotsFromJson(ColumnText(q.get(), 7));
    o.unverified = nlohmann::json::parse(ColumnText(q.get(), 9)).get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    throw Error("work-order store '" + path_ + "': slots of an order are not JSON: " + e.what(),
                Code::kDataLoss);
  }
  o.summary = ColumnText(q.get(), 8);
  o.place_key = ColumnText(q.get(), 10);
  q.reset();
  sqlite3_prepare_v2(db_, "SELECT at FROM urgings WHERE order_id = ? ORDER BY rowid", -1, &raw,
                     nullptr);
  Stmt u(raw);
  sqlite3_bind_text(u.get(), 1, o.id.c_str(), -1, SQLITE_TRANSIENT);
  while (sqlite3_step(u.get()) == SQLITE_ROW) o.urged_at.push_back(ColumnText(u.get(), 0));
  u.reset();
  sqlite3_prepare_v2(db_, "SELECT call_id FROM linked_calls WHERE order_id = ? ORDER BY rowid", -1,
                     &raw, nullptr);
  Stmt l(raw);
  sqlite3_bind_text(l.get(), 1, o.id.c_str(), -1, SQLITE_TRANSIENT);
  while (sqlite3_step(l.get()) == SQLITE_ROW) o.linked_calls.push_back(ColumnText(l.get(), 0));
  return o;
}

std::optional<WorkOrder> WorkOrderStore::GetLocked(const std::string& key, bool digits_alone) {
  auto order = GetLocked(key);
  // A caller may read out only the digits ("20261201000123"): our ids all start with WO.
  if (!order && digits_alone && std::isdigit(static_cast<unsigned char>(key[0])))
    order = GetLocked("WO" + key);
  return order;
}

std::optional<WorkOrder> WorkOrderStore::Get(const std::string& id) {
  const std::string key = OrderKey(id);
  if (key.empty()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  return GetLocked(key, true);
}

std::optional<WorkOrder> WorkOrderStore::Urge(const std::string& id,
                                              std::chrono::system_clock::time_point now) {
  const std::string key = OrderKey(id);
  if (key.empty()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  auto order = GetLocked(key, true);
  if (!order) return std::nullopt;
  sqlite3_stmt* raw = nullptr;
  sqlite3_prepare_v2(db_, "INSERT INTO urgings (order_id, at) VALUES (?, ?)", -1, &raw, nullptr);
  Stmt ins(raw);
  const std::string at = FormatRfc3339Utc(now);
  sqlite3_bind_text(ins.get(), 1, order->id.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(ins.get(), 2, at.c_str(), -1, SQLITE_TRANSIENT);
  if (!ins || sqlite3_step(ins.get()) != SQLITE_DONE)
    throw Error("work-order store '" + path_ + "': recording an urging: " + sqlite3_errmsg(db_),
                Code::kUnavailable);
  order->urged_at.push_back(at);
  return order;
}

std::optional<WorkOrder> WorkOrderStore::FindDuplicate(
    const std::string& intent, const std::string& place_key,
    std::chrono::system_clock::time_point since) {
  if (place_key.empty()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  sqlite3_stmt* raw = nullptr;
  sqlite3_prepare_v2(db_,
                     "SELECT key FROM work_orders WHERE intent = ? AND place_key = ? AND"
                     " status = 'open' AND created_at >= ? ORDER BY created_at DESC, seq DESC"
                     " LIMIT 1",
                     -1, &raw, nullptr);
  Stmt q(raw);
  if (!q)
    throw Error("work-order store '" + path_ + "': " + sqlite3_errmsg(db_), Code::kUnavailable);
  const std::string from = FormatRfc3339Utc(since);
  sqlite3_bind_text(q.get(), 1, intent.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(q.get(), 2, place_key.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(q.get(), 3, from.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(q.get()) != SQLITE_ROW) return std::nullopt;
  const std::string key = ColumnText(q.get(), 0);
  q.reset();
  return GetLocked(key);
}

std::optional<WorkOrder> WorkOrderStore::Link(const std::string& id, const std::string& call_id,
                                              std::chrono::system_clock::time_point now) {
  const std::string key = OrderKey(id);
  if (key.empty()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  auto order = GetLocked(key, true);
  if (!order) return std::nullopt;
  const std::string at = FormatRfc3339Utc(now);
  Exec("BEGIN IMMEDIATE");
  for (const char* sql : {"INSERT INTO linked_calls (order_id, call_id, at) VALUES (?, ?, ?)",
                          "INSERT INTO urgings (order_id, at) VALUES (?, ?)"}) {
    sqlite3_stmt* raw = nullptr;
    sqlite3_prepare_v2(db_, sql, -1, &raw, nullptr);
    Stmt ins(raw);
    const bool link = std::string(sql).find("linked_calls") != std::string::npos;
    sqlite3_bind_text(ins.get(), 1, order->id.c_str(), -1, SQLITE_TRANSIENT);
    if (link) {
      sqlite3_bind_text(ins.get(), 2, call_id.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_text(ins.get(), 3, at.c_str(), -1, SQLITE_TRANSIENT);
    } else {
      sqlite3_bind_text(ins.get(), 2, at.c_str(), -1, SQLITE_TRANSIENT);
    }
    if (!ins || sqlite3_step(ins.get()) != SQLITE_DONE) {
      const std::string msg = sqlite3_errmsg(db_);
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      throw Error("work-order store '" + path_ + "': joining a call to an order: " + msg,
                  Code::kUnavailable);
    }
  }
  if (sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) {
    const std::string msg = sqlite3_errmsg(db_);
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw Error("work-order store '" + path_ + "': commit: " + msg, Code::kUnavailable);
  }
  order->linked_calls.push_back(call_id);
  order->urged_at.push_back(at);
  return order;
}

}  // namespace hotline::dialog
