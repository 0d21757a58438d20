// One suite, both work-order backends: SQLite (a temporary file) and PostgreSQL (a throwaway
// cluster started by scripts/postgres.sh for this process, a fresh database per test). The
// expectations are written from the store's contract (work_order_store.h), not from its output.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <thread>

#include "base/error.h"
#include "dialog/operations.h"
#include "dialog/work_order_store.h"
#include "test_util.h"

namespace hotline::dialog {
namespace {

using testing::Dec1;
using testing::Time;

std::string Run(const std::string& cmd) {
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    if (pclose(p) != 0) return "";
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

// The cluster for this process: started on first use, stopped at exit.
class Postgres {
 public:
  static Postgres& Get() {
    static Postgres pg;
    return pg;
  }
  ~Postgres() {
    if (!dir_.empty()) {
      Run("bash " + testing::SourcePath("scripts/postgres.sh") + " stop " + dir_ + " 2>&1");
      std::filesystem::remove_all(dir_);
    }
  }
  bool ok() const { return !url_.empty(); }
  // A new, empty database on the cluster.
  std::string NewDatabase() {
    const std::string name = "t" + std::to_string(getpid()) + "_" + std::to_string(++n_);
    Run("psql '" + url_ + "' -qtAc 'CREATE DATABASE " + name + "'");
    return url_.substr(0, url_.rfind('/') + 1) + name;
  }
  void Restart() {
    url_ = Run("bash " + testing::SourcePath("scripts/postgres.sh") + " restart " + dir_);
  }

 private:
  Postgres() {
    char tmpl[] = "/tmp/hotline-pg-test.XXXXXX";
    if (!mkdtemp(tmpl)) return;
    dir_ = tmpl;
    chmod(dir_.c_str(), 0755);  // the cluster's owner (postgres, when run as root) enters it
    url_ = Run("bash " + testing::SourcePath("scripts/postgres.sh") + " start " + dir_);
  }
  std::string dir_, url_;
  int n_ = 0;
};

WorkOrder Order(const std::string& call, const std::string& address,
                const std::string& department = "water") {
  WorkOrder o;
  o.call_id = call;
  o.department = department;
  o.intent = "water_outage";
  o.caller_text = "我家停水了\n" + address;
  o.summary = "市民来电反映：" + address + "停水，请核实处理。";
  o.place_key = address;
  o.unverified = {"time"};
  o.slots = {{"address", address, ""}, {"phone", "13812345678", "13812345678"}};
  return o;
}

class BackendTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "postgres") {
      ASSERT_TRUE(Postgres::Get().ok()) << "scripts/postgres.sh could not start PostgreSQL";
      location_ = Postgres::Get().NewDatabase();
    } else {
      location_ = testing::TempDir(std::string("backend-") +
                                   ::testing::UnitTest::GetInstance()->current_test_info()->name()) +
                  "/orders.sqlite";
    }
  }
  std::unique_ptr<WorkOrderStore> Open() { return WorkOrderStore::Open(location_); }
  std::string location_;
};

TEST_P(BackendTest, IdsCountPerShanghaiDayAndOrdersRoundTrip) {
  std::string a, b, c;
  {
    auto store = Open();
    a = store->Create(Order("c1", "解放路1号"), Dec1()).id;
    b = store->Create(Order("c2", "解放路2号"), Dec1()).id;
    // 2026-12-01T16:30Z is already 12-02 00:30 in Asia/Shanghai: a new day, a new sequence.
    c = store->Create(Order("c3", "解放路3号"), Time(1796090400 + 14 * 3600 + 1800)).id;
  }
  EXPECT_EQ(a, "WO20261201-000001");
  EXPECT_EQ(b, "WO20261201-000002");
  EXPECT_EQ(c, "WO20261202-000001");
  auto store = Open();  // reopened: what was committed is there
  auto o = store->Get(b);
  ASSERT_TRUE(o);
  EXPECT_EQ(o->call_id, "c2");
  EXPECT_EQ(o->status, "open");
  EXPECT_EQ(o->created_at, "2026-12-01T02:00:00Z");
  EXPECT_EQ(o->caller_text, "我家停水了\n解放路2号");
  EXPECT_EQ(o->summary, "市民来电反映：解放路2号停水，请核实处理。");
  EXPECT_EQ(o->unverified, std::vector<std::string>{"time"});
  ASSERT_EQ(o->slots.size(), 2u);
  EXPECT_EQ(o->slots[1].normalized, "13812345678");
  // Case, dashes and spaces do not matter; the digits alone find it too.
  EXPECT_EQ(store->Get("wo20261201 000002")->id, b);
  EXPECT_EQ(store->Get("20261201000002")->id, b);
  EXPECT_FALSE(store->Get(""));
  EXPECT_FALSE(store->Get("WO20991231-000001"));
  EXPECT_EQ(store->Create(Order("c4", "x"), Dec1()).id, "WO20261201-000003");
}

TEST_P(BackendTest, UrgingsJoinsAndRepeatReports) {
  auto store = Open();
  const WorkOrder first = store->Create(Order("c1", "解放路1号"), Dec1());
  store->Create(Order("c2", "解放路9号"), Dec1());
  ASSERT_TRUE(store->Urge(first.id, Dec1() + std::chrono::hours(1)));
  auto dup = store->FindDuplicate("water_outage", "解放路1号", Dec1() - std::chrono::hours(72));
  ASSERT_TRUE(dup);
  EXPECT_EQ(dup->id, first.id);
  EXPECT_FALSE(store->FindDuplicate("water_outage", "解放路1号", Dec1() + std::chrono::hours(1)));
  EXPECT_FALSE(store->FindDuplicate("power_outage", "解放路1号", Dec1() - std::chrono::hours(1)));
  EXPECT_FALSE(store->FindDuplicate("water_outage", "", Dec1() - std::chrono::hours(1)));
  auto linked = store->Link(first.id, "c9", Dec1() + std::chrono::hours(2));
  ASSERT_TRUE(linked);
  EXPECT_EQ(linked->linked_calls, std::vector<std::string>{"c9"});
  EXPECT_EQ(linked->urged_at,
            (std::vector<std::string>{"2026-12-01T03:00:00Z", "2026-12-01T04:00:00Z"}));
  EXPECT_EQ(Open()->Get(first.id)->urged_at.size(), 2u);
  EXPECT_FALSE(store->Link("WO20991231-000001", "c9", Dec1()));
  // A closed order is no longer joined by a repeat report.
  ASSERT_TRUE(store->Update(first.id, {"closed", "fixed", "ops"}, Dec1()));
  EXPECT_FALSE(store->FindDuplicate("water_outage", "解放路1号", Dec1() - std::chrono::hours(72)));
}

TEST_P(BackendTest, OperatorsListSearchAndUpdate) {
  auto store = Open();
  std::vector<std::string> ids;
  for (int i = 0; i < 6; ++i) {
    ids.push_back(store
                      ->Create(Order("c" + std::to_string(i), "人民路" + std::to_string(i) + "号",
                                     i % 2 ? "power" : "water"),
                               Dec1() + std::chrono::minutes(i))
                      .id);
  }
  auto ids_of = [](const std::vector<WorkOrder>& v) {
    std::vector<std::string> out;
    for (const auto& o : v) out.push_back(o.id);
    return out;
  };
  OrderQuery all;
  EXPECT_EQ(ids_of(store->List(all)),
            (std::vector<std::string>{ids[5], ids[4], ids[3], ids[2], ids[1], ids[0]}));
  OrderQuery power;
  power.department = "power";
  EXPECT_EQ(ids_of(store->List(power)), (std::vector<std::string>{ids[5], ids[3], ids[1]}));
  OrderQuery text;
  text.text = "人民路4号";
  EXPECT_EQ(ids_of(store->List(text)), std::vector<std::string>{ids[4]});
  OrderQuery window;
  window.created_from = "2026-12-01T02:02:00Z";
  window.created_to = "2026-12-01T02:03:00Z";
  EXPECT_EQ(ids_of(store->List(window)), (std::vector<std::string>{ids[3], ids[2]}));
  OrderQuery page;
  page.limit = 2;
  page.offset = 1;
  EXPECT_EQ(ids_of(store->List(page)), (std::vector<std::string>{ids[4], ids[3]}));

  auto u = store->Update(ids[2], {"in_progress", "已派水务抢修", "ops-1"},
                         Dec1() + std::chrono::hours(1));
  ASSERT_TRUE(u);
  EXPECT_EQ(u->status, "in_progress");
  EXPECT_EQ(u->updated_at, "2026-12-01T03:00:00Z");
  ASSERT_TRUE(store->Update(ids[2], {"", "现场已查看", "ops-2"}, Dec1() + std::chrono::hours(2)));
  auto back = Open()->Get(ids[2]);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->status, "in_progress");  // a note alone keeps the status
  ASSERT_EQ(back->notes.size(), 2u);
  EXPECT_EQ(back->notes[0].by, "ops-1");
  EXPECT_EQ(back->notes[0].text, "已派水务抢修");
  EXPECT_EQ(back->notes[0].status, "in_progress");
  EXPECT_EQ(back->notes[1].status, "");
  EXPECT_EQ(back->updated_at, "2026-12-01T04:00:00Z");
  OrderQuery open;
  open.status = "in_progress";
  EXPECT_EQ(ids_of(store->List(open)), std::vector<std::string>{ids[2]});

  EXPECT_FALSE(store->Update("WO20991231-000001", {"closed", "", "ops"}, Dec1()));
  auto code = [&](auto fn) {
    try {
      fn();
    } catch (const Error& e) {
      return e.code();
    }
    return Code::kOk;
  };
  EXPECT_EQ(code([&] { store->Update(ids[0], {"done", "", "ops"}, Dec1()); }),
            Code::kInvalidArgument);
  EXPECT_EQ(code([&] { store->Update(ids[0], {"", "", "ops"}, Dec1()); }), Code::kInvalidArgument);
  OrderQuery bad;
  bad.limit = 0;
  EXPECT_EQ(code([&] { store->List(bad); }), Code::kInvalidArgument);
  bad = {};
  bad.created_from = "yesterday";
  EXPECT_EQ(code([&] { store->List(bad); }), Code::kInvalidArgument);
}

TEST_P(BackendTest, ConcurrentWritersFromTwoStoresNeverShareAnId) {
  auto one = Open();
  auto two = Open();
  std::vector<std::string> ids[4];
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      WorkOrderStore& s = t % 2 ? *one : *two;
      for (int i = 0; i < 15; ++i) ids[t].push_back(s.Create(Order("c", "x"), Dec1()).id);
    });
  }
  for (auto& th : threads) th.join();
  std::set<std::string> all;
  for (const auto& v : ids) all.insert(v.begin(), v.end());
  ASSERT_EQ(all.size(), 60u);
  EXPECT_EQ(*all.begin(), "WO20261201-000001");
  EXPECT_EQ(*all.rbegin(), "WO20261201-000060");  // dense: no number skipped
}

TEST_P(BackendTest, MigrationsAreVersionedAndRefuseANewerSchema) {
  {
    auto store = Open();
    EXPECT_EQ(store->SchemaVersion(), LatestWorkOrderSchema());
    EXPECT_GE(LatestWorkOrderSchema(), 4);
  }
  EXPECT_EQ(Open()->SchemaVersion(), LatestWorkOrderSchema());  // reopening applies nothing
  // A schema from a newer build: refused with a clear error, not misread.
  if (GetParam() == "postgres") {
    const std::string cmd = "psql '" + location_ +
                            "' -qtAc 'INSERT INTO schema_migrations (version) VALUES (99)'";
    ASSERT_EQ(std::system((cmd + " >/dev/null 2>&1").c_str()), 0) << cmd;
  } else {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(location_.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "INSERT INTO schema_migrations (version, what, applied_at)"
                           " VALUES (99, 'from the future', '2030-01-01T00:00:00Z')",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  try {
    Open();
    FAIL() << "a store at schema 99 opened";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kFailedPrecondition);
    EXPECT_NE(std::string(e.what()).find("schema version 99"), std::string::npos) << e.what();
  }
}

TEST_P(BackendTest, OutboxQueuesWithTheOrderAndLeasesEntriesOnce) {
  auto store = Open();
  store->Create(Order("before", "x"), Dec1());  // outbox off: not queued
  store->EnableOutbox();
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(store->Create(Order("c", "x"), Dec1()).id);
  EXPECT_EQ(store->OutboxPending(), 3);
  const auto now = std::chrono::system_clock::now();
  const auto lease = std::chrono::seconds(30);
  auto first = store->ClaimOutbox(2, now, lease);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].order_id, ids[0]);
  EXPECT_EQ(first[1].order_id, ids[1]);
  EXPECT_EQ(first[0].attempts, 0);
  // Leased: a second claimer (another server on the same store) gets only the third.
  auto other = Open();
  auto second = other->ClaimOutbox(10, now, lease);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].order_id, ids[2]);
  EXPECT_TRUE(store->ClaimOutbox(10, now, lease).empty());
  store->OutboxDelivered(first[0].seq, now);
  store->OutboxFailed(first[1].seq, now - std::chrono::seconds(1), "HTTP 500");
  EXPECT_EQ(store->OutboxPending(), 2);
  auto retry = store->ClaimOutbox(10, now, lease);
  ASSERT_EQ(retry.size(), 1u);
  EXPECT_EQ(retry[0].order_id, ids[1]);
  EXPECT_EQ(retry[0].attempts, 1);
  // A lease that ran out (its deliverer died) is claimed again.
  auto later = other->ClaimOutbox(10, now + std::chrono::seconds(31), lease);
  ASSERT_EQ(later.size(), 2u);
  EXPECT_EQ(later[0].order_id, ids[1]);
  EXPECT_EQ(later[1].order_id, ids[2]);
}

TEST_P(BackendTest, RandomIdsKeepTheFormButCannotBeCounted) {
  auto store = Open();
  store->UseRandomIds();
  auto other = Open();  // a second server on the same store
  other->UseRandomIds();
  std::vector<std::string> ids;
  for (int i = 0; i < 60; ++i)
    ids.push_back((i % 2 ? *other : *store).Create(Order("c", "x"), Dec1()).id);
  std::set<std::string> unique(ids.begin(), ids.end());
  EXPECT_EQ(unique.size(), ids.size());
  int in_a_row = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_EQ(ids[i].size(), 17u) << ids[i];
    EXPECT_EQ(ids[i].substr(0, 11), "WO20261201-") << ids[i];
    EXPECT_EQ(ids[i].find_first_not_of("0123456789", 11), std::string::npos) << ids[i];
    if (i > 0 && std::stoll(ids[i].substr(11)) == std::stoll(ids[i - 1].substr(11)) + 1)
      ++in_a_row;
    // Found by id and by its digits alone, as callers read them out.
    EXPECT_EQ(store->Get(ids[i].substr(2, 8) + ids[i].substr(11))->id, ids[i]);
  }
  // Counting on from one id finds the next almost never (1 in a million per pair).
  EXPECT_LE(in_a_row, 1);
  EXPECT_FALSE(store->Get("WO20261201-000001") && store->Get("WO20261201-000002") &&
               store->Get("WO20261201-000003"));
}

TEST_P(BackendTest, HotspotsDuplicatesAndSlaOverListedOrders) {
  // The console reads each backend through List only: the same view from both.
  auto store = Open();
  std::vector<std::string> ids;
  for (int i = 0; i < 10; ++i) {
    ids.push_back(
        store->Create(Order("h" + std::to_string(i), "天河区人民路" + std::to_string(i % 9) + "号"),
                      Dec1() + std::chrono::minutes(10 * i))
            .id);
  }
  const auto now = Dec1() + std::chrono::minutes(100);
  OrderQuery window;
  window.created_from = FormatRfc3339Utc(now - std::chrono::hours(2));
  const std::vector<WorkOrder> listed = store->List(window);
  ASSERT_EQ(listed.size(), 10u);
  const auto hot = FindHotspots(listed, {HotspotRule{"street_2h"}}, testing::TheTaxonomy(), now);
  ASSERT_EQ(hot.size(), 1u);
  EXPECT_EQ(hot[0].street, "人民路");
  EXPECT_EQ(hot[0].district, "天河区");
  EXPECT_EQ(hot[0].order_ids.front(), ids[9]);
  // 人民路0号 twice (orders 0 and 9): one 并单 candidate; once resolved, none.
  auto dups = FindDuplicateCandidates(listed, 72);
  ASSERT_EQ(dups.size(), 1u);
  EXPECT_EQ(dups[0].order_ids, (std::vector<std::string>{ids[0], ids[9]}));
  ASSERT_TRUE(store->Update(ids[9], {"resolved", "修好了", "ops"}, now));
  EXPECT_TRUE(FindDuplicateCandidates(store->List(window), 72).empty());
  // SLA from the stored note: resolved 10 min after it was filed, within water_outage's 12 h.
  SlaConfig sla;
  sla.intent_hours["water_outage"] = 12;
  const SlaStatus s = EvaluateSla(*store->Get(ids[9]), sla, testing::TheTaxonomy(), now);
  EXPECT_EQ(s.state, "met");
  EXPECT_DOUBLE_EQ(s.seconds_left, 12 * 3600 - 10 * 60);
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& info) { return info.param; });

TEST(SqliteBackendTest, FileIsCreatedOwnerOnly) {
  const std::string path = testing::TempDir("backend-mode") + "/orders.sqlite";
  auto store = WorkOrderStore::Open(path);
  store->Create(Order("c1", "x"), Dec1());
  for (const std::string& f : {path, path + "-wal"}) {
    struct stat st {};
    ASSERT_EQ(stat(f.c_str(), &st), 0) << f;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << f;
  }
}

TEST(PostgresBackendTest, RestartLosesNoAcknowledgedOrderAndTheStoreReconnects) {
  ASSERT_TRUE(Postgres::Get().ok());
  const std::string url = Postgres::Get().NewDatabase();
  auto store = WorkOrderStore::Open(url);
  std::vector<std::string> acknowledged;
  for (int i = 0; i < 5; ++i) acknowledged.push_back(store->Create(Order("a", "x"), Dec1()).id);
  Postgres::Get().Restart();  // immediate stop: as a crash, then up again
  ASSERT_TRUE(Postgres::Get().ok());
  // The next call meets the dead connection before COMMIT, reconnects and succeeds.
  acknowledged.push_back(store->Create(Order("b", "x"), Dec1()).id);
  for (int i = 0; i < 3; ++i) acknowledged.push_back(store->Create(Order("c", "x"), Dec1()).id);
  auto fresh = WorkOrderStore::Open(url);
  for (const auto& id : acknowledged) EXPECT_TRUE(fresh->Get(id)) << "lost " << id;
  EXPECT_EQ(acknowledged.back(), "WO20261201-000009");
}

TEST(PostgresBackendTest, UnreachableServerIsAClearErrorWithoutThePassword) {
  try {
    WorkOrderStore::Open("postgresql://hotline:s3cretpw@127.0.0.1:1/hotline?connect_timeout=5");
    FAIL() << "opened a store on port 1";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kUnavailable);
    const std::string what = e.what();
    EXPECT_EQ(what.find("s3cretpw"), std::string::npos) << what;
    EXPECT_NE(what.find("127.0.0.1"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace hotline::dialog
