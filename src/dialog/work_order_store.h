// Work orders: one interface, two backends.
//
//   SQLite (the embedded default; a file path): WAL journal, synchronous=FULL, so an order is on
//   disk when Create returns; the reply that announces it is sent only afterwards. A process
//   killed at any point loses no order Create returned. Several processes on one host may share
//   the file (BEGIN IMMEDIATE serialises id allocation). The file is created 0600.
//   PostgreSQL ("postgresql://user@host:port/db" or "postgres://..."; libpq): for several
//   servers on several hosts. Each call is one transaction committed before it returns (the
//   server's synchronous_commit decides durability; on by default). A lost connection is
//   re-established on the next call; the call that met the failure is retried once when it had
//   not reached COMMIT, else it fails UNAVAILABLE.
//
// Both keep a versioned schema (table schema_migrations): Open applies the migrations a store
// lacks, in order, each in a transaction, so older files and databases are upgraded in place and
// several servers starting together apply each one once.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dialog/dialog.h"

namespace hotline::dialog {

// The statuses an operator may set, in their usual order.
inline constexpr const char* kOrderStatuses[] = {"open", "in_progress", "resolved", "closed",
                                                 "rejected"};
bool ValidOrderStatus(const std::string& status);

// The operators' search. Empty fields match everything; `text` is a substring of the caller's
// words or the handler's paragraph. Newest first.
struct OrderQuery {
  std::string status, department, intent, text;
  std::string created_from, created_to;  // RFC 3339 UTC, inclusive
  int limit = 50;                        // 1..500
  int offset = 0;
};

// An order waiting in the outbox for delivery to the city's work-order system.
struct OutboxItem {
  int64_t seq = 0;  // the outbox entry
  std::string order_id;
  int attempts = 0;  // deliveries tried so far
};

// An operator's change: a new status and/or a note; one of them at least.
struct OrderUpdate {
  std::string status;  // "" keeps it
  std::string note;
  std::string by;  // the client making it
};

class WorkOrderStore {
 public:
  // A PostgreSQL URL or a SQLite path (created with its folder when missing). Throws
  // hotline::Error(kUnavailable) naming the path (a URL without its password) when it cannot be
  // opened, kDataLoss when it is not a work-order database, kFailedPrecondition when its schema
  // is newer than this build's.
  static std::unique_ptr<WorkOrderStore> Open(const std::string& location);
  virtual ~WorkOrderStore() = default;

  // Assigns the id ("WO" + the day in Asia/Shanghai + "-" + a 6-digit sequence per day,
  // e.g. WO20261201-000123, or a random free number: UseRandomIds), commits, and returns the stored order. order.id/status/created_at
  // are set here (created_at from `now`).
  virtual WorkOrder Create(WorkOrder order, std::chrono::system_clock::time_point now) = 0;
  // Looks an order up by id; letters are case-insensitive and dashes, spaces and underscores are
  // ignored (the order_id normaliser drops the dash: WO20261201000123); the digits alone find it.
  virtual std::optional<WorkOrder> Get(const std::string& id) = 0;
  // Records an urging; returns the updated order, nullopt when there is no such order.
  virtual std::optional<WorkOrder> Urge(const std::string& id,
                                        std::chrono::system_clock::time_point now) = 0;
  // The newest open order of this intent with this place_key created at or after `since`
  // (a repeat report of the same problem at the same place); nullopt when none or key is "".
  virtual std::optional<WorkOrder> FindDuplicate(const std::string& intent,
                                                 const std::string& place_key,
                                                 std::chrono::system_clock::time_point since) = 0;
  // Joins a later call to an order (并单): the call is listed on it and counts as an urging.
  // Returns the updated order, nullopt when there is no such order.
  virtual std::optional<WorkOrder> Link(const std::string& id, const std::string& call_id,
                                        std::chrono::system_clock::time_point now) = 0;
  // The operators' API. Throws hotline::Error(kInvalidArgument) for a bad query or update.
  virtual std::vector<WorkOrder> List(const OrderQuery& query) = 0;
  // Applies a status change and/or note; the updated order, nullopt when there is no such order.
  virtual std::optional<WorkOrder> Update(const std::string& id, const OrderUpdate& update,
                                          std::chrono::system_clock::time_point now) = 0;
  // The schema version the store is at (the highest migration applied).
  virtual int SchemaVersion() = 0;

  // Ids with a random 6-digit number instead of the day's sequence. They keep the form callers
  // read out (WO20261201-483920), but cannot be found by counting. Call before the first Create.
  void UseRandomIds() { random_ids_ = true; }

  // The outbox (webhook delivery). Once enabled, Create queues each new order in the same
  // transaction that stores it, so an order is never stored without its delivery pending.
  void EnableOutbox() { outbox_ = true; }
  // Up to `limit` entries due at `now`, oldest first, each leased until now + `lease` (no other
  // server claims them meanwhile; an entry whose deliverer died is claimed again after it).
  virtual std::vector<OutboxItem> ClaimOutbox(int limit, std::chrono::system_clock::time_point now,
                                              std::chrono::seconds lease) = 0;
  virtual void OutboxDelivered(int64_t seq, std::chrono::system_clock::time_point now) = 0;
  // Counts an attempt and sets when to try again.
  virtual void OutboxFailed(int64_t seq, std::chrono::system_clock::time_point retry_at,
                            const std::string& error) = 0;
  // Entries not yet delivered.
  virtual int64_t OutboxPending() = 0;

  // The file path, or the URL without its password.
  const std::string& path() const { return path_; }

 protected:
  explicit WorkOrderStore(std::string path) : path_(std::move(path)) {}
  const std::string path_;
  bool outbox_ = false;
  bool random_ids_ = false;
};

// The backends, for tests that name one (Open picks by the location's form).
std::unique_ptr<WorkOrderStore> OpenSqliteWorkOrderStore(const std::string& path);
std::unique_ptr<WorkOrderStore> OpenPostgresWorkOrderStore(const std::string& url);
// The number of migrations this build knows (every backend has as many).
int LatestWorkOrderSchema();
// Checks a query and an update before a backend sees them (kInvalidArgument naming the field).
void CheckOrderQuery(const OrderQuery& q);
void CheckOrderUpdate(const OrderUpdate& u);
// A URL with any password replaced by "***" (for errors and logs).
std::string RedactUrl(const std::string& url);

// RFC 3339 UTC with seconds: 2026-12-01T10:00:00Z.
std::string FormatRfc3339Utc(std::chrono::system_clock::time_point t);
// Upper case letters and digits only: the lookup key of an order id.
std::string OrderKey(const std::string& id);
// The day in Asia/Shanghai as YYYYMMDD (an order id's date).
std::string OrderDay(std::chrono::system_clock::time_point t);

}  // namespace hotline::dialog
