// Work orders in SQLite: WAL journal, synchronous=FULL, so an order is on disk when Create
// returns; the reply that announces it is sent only afterwards. A process killed at any point
// loses no order Create returned, and the file opens cleanly afterwards (SQLite replays the WAL).
// Several processes may share one file (BEGIN IMMEDIATE serialises id allocation; busy timeout).
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "dialog/dialog.h"

struct sqlite3;

namespace hotline::dialog {

class WorkOrderStore {
 public:
  // Creates the file (and its folder) when missing. Throws hotline::Error(kUnavailable) naming the
  // path when it cannot be opened, or kDataLoss when it is not a work-order database.
  static std::unique_ptr<WorkOrderStore> Open(const std::string& path);
  ~WorkOrderStore();

  // Assigns the id ("WO" + the day in Asia/Shanghai + "-" + a 6-digit sequence per day,
  // e.g. WO20261201-000123), commits, and returns the stored order. order.id/status/created_at
  // are set here (created_at from `now`).
  WorkOrder Create(WorkOrder order, std::chrono::system_clock::time_point now);
  // Looks an order up by id; letters are case-insensitive and dashes, spaces and underscores are
  // ignored (the order_id normaliser drops the dash: WO20261201000123).
  std::optional<WorkOrder> Get(const std::string& id);
  // Records an urging; returns the updated order, nullopt when there is no such order.
  std::optional<WorkOrder> Urge(const std::string& id, std::chrono::system_clock::time_point now);
  // The newest open order of this intent with this place_key created at or after `since`
  // (a repeat report of the same problem at the same place); nullopt when none or key is "".
  std::optional<WorkOrder> FindDuplicate(const std::string& intent, const std::string& place_key,
                                         std::chrono::system_clock::time_point since);
  // Joins a later call to an order (并单): the call is listed on it and counts as an urging.
  // Returns the updated order, nullopt when there is no such order.
  std::optional<WorkOrder> Link(const std::string& id, const std::string& call_id,
                                std::chrono::system_clock::time_point now);

  const std::string& path() const { return path_; }

 private:
  WorkOrderStore(std::string path, sqlite3* db) : path_(std::move(path)), db_(db) {}
  std::optional<WorkOrder> GetLocked(const std::string& key);
  std::optional<WorkOrder> GetLocked(const std::string& key, bool digits_alone);
  void Exec(const char* sql);
  bool HasColumn(const std::string& name);

  const std::string path_;
  sqlite3* db_;
  std::mutex mu_;  // one statement at a time on db_
};

// RFC 3339 UTC with seconds: 2026-12-01T10:00:00Z.
std::string FormatRfc3339Utc(std::chrono::system_clock::time_point t);
// Upper case letters and digits only: the lookup key of an order id.
std::string OrderKey(const std::string& id);

}  // namespace hotline::dialog
