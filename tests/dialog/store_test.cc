// The stores: SQLite work orders (durability across reopen and SIGKILL) and the Redis session
// store (a real redis-server through scripts/redis.sh; a call continued on a second manager).
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <set>
#include <thread>

#include "base/error.h"
#include "dialog/manager_internal.h"
#include "dialog/session_store.h"
#include "dialog/work_order_store.h"
#include "test_util.h"

namespace hotline::dialog {
namespace {

using testing::Dec1;
using testing::U;

WorkOrder Order(const std::string& call, const std::string& address) {
  WorkOrder o;
  o.call_id = call;
  o.department = "water";
  o.intent = "water_outage";
  o.caller_text = "我家停水了\n" + address;
  o.slots = {{"address", address, ""}, {"phone", "13812345678", "13812345678"}};
  return o;
}

TEST(WorkOrderStoreTest, OrdersSurviveReopenAndIdsCountPerDay) {
  const std::string path = testing::TempDir("wo-reopen") + "/orders.sqlite";
  std::string a, b, c;
  {
    auto store = WorkOrderStore::Open(path);
    a = store->Create(Order("c1", "解放路1号"), Dec1()).id;
    b = store->Create(Order("c2", "解放路2号"), Dec1()).id;
    // 2026-12-01T16:30Z is already 12-02 00:30 in Asia/Shanghai: a new day, a new sequence.
    c = store->Create(Order("c3", "解放路3号"), testing::Time(1796090400 + 14 * 3600 + 1800)).id;
    ASSERT_TRUE(store->Urge(a, Dec1()));
  }
  EXPECT_EQ(a, "WO20261201-000001");
  EXPECT_EQ(b, "WO20261201-000002");
  EXPECT_EQ(c, "WO20261202-000001");
  auto store = WorkOrderStore::Open(path);
  auto o = store->Get(b);
  ASSERT_TRUE(o);
  EXPECT_EQ(o->call_id, "c2");
  EXPECT_EQ(o->caller_text, "我家停水了\n解放路2号");
  ASSERT_EQ(o->slots.size(), 2u);
  EXPECT_EQ(o->slots[1].normalized, "13812345678");
  EXPECT_EQ(store->Get(a)->urged_at.size(), 1u);
  EXPECT_EQ(store->Create(Order("c4", "x"), Dec1()).id, "WO20261201-000003");
  EXPECT_FALSE(store->Get(""));
  EXPECT_FALSE(store->Urge("WO20991231-000001", Dec1()));
  // WAL mode and synchronous=FULL are what the file was opened with.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, nullptr);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "wal");
  sqlite3_finalize(st);
  sqlite3_close(db);
}

TEST(WorkOrderStoreTest, NotADatabaseIsAClearError) {
  const std::string path = testing::TempDir("wo-garbage") + "/orders.sqlite";
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    for (int i = 0; i < 4096; ++i) std::fputc('x', f);
    std::fclose(f);
  }
  try {
    WorkOrderStore::Open(path);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  try {
    WorkOrderStore::Open("/proc/no-such-dir/orders.sqlite");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kUnavailable);
  }
}

// A child process writes orders and reports each id through a pipe after Create returned
// (= after the reply would have announced it). The parent kills it with SIGKILL mid-stream and
// reopens the file: every reported order must be there, and the file must pass integrity_check.
TEST(WorkOrderStoreTest, SigkillLosesNoAcknowledgedOrder) {
  const std::string path = testing::TempDir("wo-kill") + "/orders.sqlite";
  WorkOrderStore::Open(path);  // schema created before the child starts
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    try {
      auto store = WorkOrderStore::Open(path);
      for (int i = 0; i < 100000; ++i) {
        const std::string n = std::to_string(i);
        std::string id = store->Create(Order("k" + n, "路" + n), Dec1()).id;
        id += '\n';
        if (write(fds[1], id.data(), id.size()) != static_cast<ssize_t>(id.size())) _exit(3);
      }
    } catch (...) {
      _exit(2);
    }
    _exit(0);
  }
  close(fds[1]);
  std::vector<std::string> acknowledged;
  std::string buf;
  char chunk[256];
  while (acknowledged.size() < 40) {
    const ssize_t n = read(fds[0], chunk, sizeof chunk);
    if (n <= 0) break;
    buf.append(chunk, static_cast<size_t>(n));
    for (size_t nl; (nl = buf.find('\n')) != std::string::npos; buf.erase(0, nl + 1))
      acknowledged.push_back(buf.substr(0, nl));
  }
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  // Ids that were in the pipe when the child died were acknowledged too.
  while (true) {
    const ssize_t n = read(fds[0], chunk, sizeof chunk);
    if (n <= 0) break;
    buf.append(chunk, static_cast<size_t>(n));
  }
  for (size_t nl; (nl = buf.find('\n')) != std::string::npos; buf.erase(0, nl + 1))
    acknowledged.push_back(buf.substr(0, nl));
  close(fds[0]);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child ended before it was killed: " << status;
  ASSERT_GE(acknowledged.size(), 40u);

  auto store = WorkOrderStore::Open(path);
  for (const auto& id : acknowledged)
    EXPECT_TRUE(store->Get(id)) << "lost acknowledged order " << id;
  // Ids are dense: the next one follows the last acknowledged (or an unacknowledged commit).
  const std::string next = store->Create(Order("after", "x"), Dec1()).id;
  EXPECT_GT(next, acknowledged.back());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, nullptr);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "ok");
  sqlite3_finalize(st);
  sqlite3_close(db);
}

class RedisStoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { redis_ = new testing::RedisServer(); }
  static void TearDownTestSuite() {
    delete redis_;
    redis_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(redis_->ok()) << "scripts/redis.sh could not start redis-server";
  }
  static testing::RedisServer* redis_;
};
testing::RedisServer* RedisStoreTest::redis_ = nullptr;

TEST_F(RedisStoreTest, SessionRoundTripsThroughRedisWithIdleExpiry) {
  auto a = NewRedisSessionStore(redis_->url(), std::chrono::seconds(600));
  auto b = NewRedisSessionStore(redis_->url(), std::chrono::seconds(600));
  Session written;
  a->Transact("rt-1", [&](std::optional<Session>& s) {
    EXPECT_FALSE(s.has_value());
    s.emplace();
    s->call_id = "rt-1";
    s->main_intent = "wage_arrears";
    s->stage = Stage::kConfirming;
    s->SetSlot({"organization", "鑫源物业公司", ""}, true);
    s->turns = 3;
    written = *s;
  });
  b->Transact("rt-1", [&](std::optional<Session>& s) {
    ASSERT_TRUE(s.has_value());
    EXPECT_EQ(SessionToJson(*s), SessionToJson(written));
  });
  const int ttl = std::stoi(redis_->Cli("ttl hotline:call:rt-1"));
  EXPECT_GT(ttl, 590);
  EXPECT_LE(ttl, 600);
  EXPECT_EQ(redis_->Cli("exists hotline:lock:rt-1"), "0");  // released
  b->Transact("rt-1", [](std::optional<Session>& s) { s.reset(); });
  EXPECT_EQ(redis_->Cli("exists hotline:call:rt-1"), "0");
}

TEST_F(RedisStoreTest, BadUrlsAreClearErrors) {
  try {
    NewRedisSessionStore("redis://127.0.0.1:1/0", std::chrono::seconds(10));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kUnavailable);
    EXPECT_NE(std::string(e.what()).find("redis://127.0.0.1:1/0"), std::string::npos) << e.what();
  }
  for (const char* bad : {"redis://", "redis://host:port", "http://x:1", "redis://h:1/db"}) {
    try {
      NewRedisSessionStore(bad, std::chrono::seconds(10));
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::kInvalidArgument) << bad << ": " << e.what();
    }
  }
}

TEST_F(RedisStoreTest, CallBegunOnOneManagerContinuesOnAnother) {
  DialogConfig config = testing::TestConfig("redis-two");
  config.session_store = redis_->url();
  // Two "servers": separate managers (separate stores, connections and SQLite handles) sharing
  // Redis and the work-order file.
  auto one = DialogManager::Create(config, testing::TheTaxonomy());
  auto two = DialogManager::Create(config, testing::TheTaxonomy());
  TurnReply r = one->Turn("shared-1", "我们小区停水了", U("water_outage", 0.9f), Dec1());
  EXPECT_EQ(r.action, Action::kAskSlot);
  r = two->Turn("shared-1", "天河区荷光路南一巷12号",
                U("provide_info", 0.9f, {{"district", "天河区"}, {"address", "荷光路南一巷12号"}}),
                Dec1());
  EXPECT_EQ(r.action, Action::kConfirm);
  EXPECT_EQ(r.reply,
            "您反映的是天河区荷光路南一巷12号停水的问题，我们将转交自来水公司处理，对吗？");
  r = one->Turn("shared-1", "对", U("affirm", 0.9f), Dec1());
  ASSERT_EQ(r.action, Action::kDispatch);
  const CallSummary s = two->EndCall("shared-1");
  EXPECT_EQ(s.outcome, "dispatch");
  EXPECT_EQ(s.turns, 3);
  EXPECT_EQ(s.work_order_id, r.work_order_id);
  ASSERT_TRUE(one->GetWorkOrder(r.work_order_id));
  EXPECT_THROW(one->EndCall("shared-1"), Error);
}

TEST_F(RedisStoreTest, ConcurrentTurnsOfOneCallOnTwoManagersAreSerialised) {
  DialogConfig config = testing::TestConfig("redis-race");
  config.session_store = redis_->url();
  config.max_turns = 1000;
  auto one = DialogManager::Create(config, testing::TheTaxonomy());
  auto two = DialogManager::Create(config, testing::TheTaxonomy());
  constexpr int kPerThread = 20;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      DialogManager& dm = t % 2 ? *one : *two;
      for (int i = 0; i < kPerThread; ++i) dm.Turn("race-1", "嗯", U("provide_info", 0.9f), Dec1());
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(one->EndCall("race-1").turns, 4 * kPerThread);  // no turn lost to a race
}

}  // namespace
}  // namespace hotline::dialog
