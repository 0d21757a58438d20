#include <map>
#include <mutex>
#include <string>

#include "base/error.h"
#include "dialog/session_store.h"

namespace hotline::dialog {
namespace {

class MemorySessionStore : public SessionStore {
 public:
  MemorySessionStore(std::chrono::seconds idle, SteadyClock clock, size_t max_sessions)
      : idle_(idle),
        clock_(clock ? std::move(clock) : [] { return std::chrono::steady_clock::now(); }),
        max_sessions_(max_sessions) {}

  void Transact(const std::string& call_id,
                const std::function<void(std::optional<Session>&)>& fn) override {
    std::shared_ptr<Entry> entry;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Sweep(false);
      if (entries_.size() >= max_sessions_ && !entries_.count(call_id)) {
        Sweep(true);  // full: drop what has idled out before refusing
        if (entries_.size() >= max_sessions_) {
          throw Error("the session store holds its maximum of " + std::to_string(max_sessions_) +
                          " live calls (dialog max_sessions); a new call cannot start until "
                          "one ends or idles out",
                      Code::kResourceExhausted);
        }
      }
      auto& slot = entries_[call_id];
      if (!slot) slot = std::make_shared<Entry>();
      entry = slot;
      ++entry->users;
    }
    {
      // Turns of one call are serialised on the entry's mutex; other calls run in parallel.
      std::lock_guard<std::mutex> call_lock(entry->mu);
      const auto now = clock_();
      std::optional<Session> session = entry->session;
      if (session && now - entry->last_used > idle_) session.reset();
      try {
        fn(session);
      } catch (...) {
        Release(call_id, entry);
        throw;
      }
      entry->session = std::move(session);
      entry->last_used = clock_();
    }
    Release(call_id, entry);
  }

 private:
  struct Entry {
    std::mutex mu;  // held while a turn of this call runs
    std::optional<Session> session;
    std::chrono::steady_clock::time_point last_used;
    int users = 0;  // Transact calls holding this entry; guarded by the store's mu_
  };

  void Release(const std::string& call_id, const std::shared_ptr<Entry>& entry) {
    std::lock_guard<std::mutex> lock(mu_);
    --entry->users;
    if (entry->users == 0 && !entry->session) entries_.erase(call_id);
  }

  // Drops idle sessions; called with mu_ held. At most every few seconds (unless `force`), so a
  // busy server does not walk the whole map on every turn.
  void Sweep(bool force) {
    const auto now = clock_();
    if (!force && now - last_sweep_ < std::chrono::seconds(5) &&
        last_sweep_.time_since_epoch().count())
      return;
    last_sweep_ = now;
    for (auto it = entries_.begin(); it != entries_.end();) {
      Entry& e = *it->second;
      // An entry in use is never dropped; its mutex may be held, so last_used is read only for
      // entries nobody holds.
      if (e.users == 0 && (!e.session || now - e.last_used > idle_)) {
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
  }

  const std::chrono::seconds idle_;
  const SteadyClock clock_;
  const size_t max_sessions_;
  std::mutex mu_;  // guards entries_, Entry::users, last_sweep_
  std::map<std::string, std::shared_ptr<Entry>> entries_;
  std::chrono::steady_clock::time_point last_sweep_{};
};

}  // namespace

std::unique_ptr<SessionStore> NewMemorySessionStore(std::chrono::seconds idle_timeout,
                                                    SteadyClock clock, size_t max_sessions) {
  return std::make_unique<MemorySessionStore>(idle_timeout, std::move(clock), max_sessions);
}

}  // namespace hotline::dialog
