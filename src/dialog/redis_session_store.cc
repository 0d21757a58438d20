// Redis session store (hiredis). One connection per concurrent turn, pooled. The per-call lock is
// a key set with NX and a millisecond expiry (so a server that dies mid-turn cannot block the call
// for longer than kLockTtl); it is released only by its owner (compare-and-delete script).
#include <hiredis/hiredis.h>

#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "base/error.h"
#include "dialog/work_order_store.h"
#include "dialog/session_store.h"

namespace hotline::dialog {
namespace {

constexpr int kLockTtlMs = 15000;
constexpr auto kLockWait = std::chrono::seconds(20);
constexpr const char* kUnlockScript =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) "
    "else return 0 end";

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;
struct ContextDeleter {
  void operator()(redisContext* c) const { redisFree(c); }
};
using Context = std::unique_ptr<redisContext, ContextDeleter>;

struct RedisUrl {
  std::string host;
  int port = 6379, db = 0;
  std::string user, password;  // AUTH [user] password when the URL carries them
};

RedisUrl ParseUrl(const std::string& url) {
  const std::string prefix = "redis://";
  auto bad = [&](const std::string& why) {
    // The URL is shown without its password.
    return Error("session store URL '" + RedactUrl(url) + "': " + why +
                     " (expected redis://[[user]:password@]host:port[/db])",
                 Code::kInvalidArgument);
  };
  if (url.rfind("rediss://", 0) == 0) {
    throw bad("TLS to Redis (rediss://) is not available with Debian 12's hiredis 0.14; reach a "
              "remote Redis through a TLS tunnel on loopback (deploy/README.md)");
  }
  if (url.rfind(prefix, 0) != 0) throw bad("does not start with redis://");
  std::string rest = url.substr(prefix.size());
  RedisUrl u;
  const auto at = rest.rfind('@');
  if (at != std::string::npos) {
    const std::string userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const auto colon = userinfo.find(':');
    if (colon == std::string::npos) throw bad("credentials must be user:password or :password");
    u.user = userinfo.substr(0, colon);
    u.password = userinfo.substr(colon + 1);
    if (u.password.empty()) throw bad("the password is empty");
  }
  const auto slash = rest.find('/');
  if (slash != std::string::npos) {
    const std::string db = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    if (!db.empty()) {
      if (db.find_first_not_of("0123456789") != std::string::npos || db.size() > 4)
        throw bad("database '" + db + "' is not a number");
      u.db = std::stoi(db);
    }
  }
  const auto colon = rest.rfind(':');
  u.host = rest.substr(0, colon);
  if (colon != std::string::npos) {
    const std::string port = rest.substr(colon + 1);
    if (port.empty() || port.size() > 5 ||
        port.find_first_not_of("0123456789") != std::string::npos)
      throw bad("port '" + port + "' is not a number");
    u.port = std::stoi(port);
  }
  if (u.host.empty()) throw bad("no host");
  return u;
}

class RedisSessionStore : public SessionStore {
 public:
  RedisSessionStore(const std::string& url, std::chrono::seconds idle)
      : url_(RedactUrl(url)), addr_(ParseUrl(url)), idle_(idle) {
    // Connect once now so a wrong URL fails at start, not on the first call.
    Release(Acquire());
  }

  void Transact(const std::string& call_id,
                const std::function<void(std::optional<Session>&)>& fn) override {
    Context c = Acquire();
    const std::string key = "hotline:call:" + call_id;
    const std::string lock_key = "hotline:lock:" + call_id;
    const std::string token = NewToken();
    Lock(c.get(), lock_key, token);
    try {
      std::optional<Session> session;
      Reply got = Command(c.get(), {"GET", key});
      if (got->type == REDIS_REPLY_STRING) {
        nlohmann::json j;
        try {
          j = nlohmann::json::parse(std::string(got->str, got->len));
        } catch (const nlohmann::json::exception& e) {
          throw Error("session of a call in Redis is not JSON: " + std::string(e.what()),
                      Code::kDataLoss);
        }
        session = SessionFromJson(j);
      }
      fn(session);
      if (session) {
        const std::string value = SessionToJson(*session).dump();
        Command(c.get(),
                {"SET", key, value, "EX", std::to_string(std::max<int64_t>(1, idle_.count()))});
      } else {
        Command(c.get(), {"DEL", key});
      }
    } catch (...) {
      Unlock(c.get(), lock_key, token);
      Release(std::move(c));
      throw;
    }
    Unlock(c.get(), lock_key, token);
    Release(std::move(c));
  }

 private:
  Reply Command(redisContext* c, const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    auto* raw = static_cast<redisReply*>(
        redisCommandArgv(c, static_cast<int>(args.size()), argv.data(), lens.data()));
    if (!raw) {
      throw Error("session store " + url_ + ": " + args[0] +
                      " failed: " + (c->err ? std::string(c->errstr) : "no reply"),
                  Code::kUnavailable);
    }
    Reply r(raw);
    if (r->type == REDIS_REPLY_ERROR) {
      throw Error("session store " + url_ + ": " + args[0] + ": " + std::string(r->str, r->len),
                  Code::kUnavailable);
    }
    return r;
  }

  void Lock(redisContext* c, const std::string& lock_key, const std::string& token) {
    const auto deadline = std::chrono::steady_clock::now() + kLockWait;
    auto pause = std::chrono::microseconds(200);
    while (true) {
      Reply r = Command(c, {"SET", lock_key, token, "NX", "PX", std::to_string(kLockTtlMs)});
      if (r->type == REDIS_REPLY_STATUS) return;  // "OK"; NX failure is a nil reply
      if (std::chrono::steady_clock::now() > deadline) {
        throw Error("session store " + url_ + ": a turn of this call has held its lock for over " +
                        std::to_string(kLockWait.count()) + " s",
                    Code::kUnavailable);
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(5000));
    }
  }

  void Unlock(redisContext* c, const std::string& lock_key, const std::string& token) {
    try {
      Command(c, {"EVAL", kUnlockScript, "1", lock_key, token});
    } catch (const Error&) {
      // The lock expires on its own; the turn itself succeeded.
    }
  }

  std::string NewToken() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::to_string(rng_()) + "-" + std::to_string(rng_());
  }

  Context Acquire() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!pool_.empty()) {
        Context c = std::move(pool_.back());
        pool_.pop_back();
        return c;
      }
    }
    timeval tv{2, 0};
    Context c(redisConnectWithTimeout(addr_.host.c_str(), addr_.port, tv));
    if (!c || c->err) {
      throw Error("session store " + url_ + " is unavailable: " +
                      (c ? std::string(c->errstr) : "cannot allocate a context"),
                  Code::kUnavailable);
    }
    timeval op{5, 0};
    redisSetTimeout(c.get(), op);
    if (!addr_.password.empty()) {
      if (addr_.user.empty()) {
        Command(c.get(), {"AUTH", addr_.password});
      } else {
        Command(c.get(), {"AUTH", addr_.user, addr_.password});
      }
    }
    if (addr_.db != 0) Command(c.get(), {"SELECT", std::to_string(addr_.db)});
    return c;
  }

  void Release(Context c) {
    if (!c || c->err) return;  // a broken connection is dropped, the next turn reconnects
    std::lock_guard<std::mutex> lock(mu_);
    if (pool_.size() < 32) pool_.push_back(std::move(c));
  }

  const std::string url_;
  const RedisUrl addr_;
  const std::chrono::seconds idle_;
  std::mutex mu_;  // guards pool_ and rng_
  std::vector<Context> pool_;
  std::mt19937_64 rng_{std::random_device{}()};
};

}  // namespace

std::unique_ptr<SessionStore> NewRedisSessionStore(const std::string& url,
                                                   std::chrono::seconds idle_timeout) {
  return std::make_unique<RedisSessionStore>(url, idle_timeout);
}

}  // namespace hotline::dialog
