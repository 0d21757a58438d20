// Session stores: where a call's dialog state lives between turns.
//   memory: in-process, sessions dropped after an idle timeout (the default);
//   redis:  shared by several servers, so a call begun on one continues on another.
// Both serialise the turns of one call: Transact holds the call's lock while the caller's function
// runs, so two turns of one call never interleave (in Redis across processes too).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "dialog/session.h"

namespace hotline::dialog {

class SessionStore {
 public:
  virtual ~SessionStore() = default;
  // Locks `call_id`, loads its session (nullopt when there is none or it idled out) and calls
  // fn(session). Afterwards a session that has a value is saved (its idle timer restarted) and
  // one reset to nullopt is deleted. Exceptions from fn propagate and leave the stored session as
  // it was. Throws hotline::Error(kUnavailable) when the store cannot be reached.
  virtual void Transact(const std::string& call_id,
                        const std::function<void(std::optional<Session>&)>& fn) = 0;
};

using SteadyClock = std::function<std::chrono::steady_clock::time_point()>;

// In-process store. `clock` defaults to steady_clock::now (tests pass their own).
// At most `max_sessions` calls are held; a turn of a further call throws Error
// (RESOURCE_EXHAUSTED) once idle sessions have been swept and none is free.
std::unique_ptr<SessionStore> NewMemorySessionStore(std::chrono::seconds idle_timeout,
                                                    SteadyClock clock = nullptr,
                                                    size_t max_sessions = 100000);

// "redis://host:port[/db]". Keys: hotline:call:<id> (the session JSON, expiring after the idle
// timeout) and hotline:lock:<id> (the per-call lock, SET NX PX with a random token, released by a
// compare-and-delete script). Throws hotline::Error(kUnavailable) naming the URL when Redis cannot
// be reached, kInvalidArgument when the URL is malformed.
std::unique_ptr<SessionStore> NewRedisSessionStore(const std::string& url,
                                                   std::chrono::seconds idle_timeout);

}  // namespace hotline::dialog
