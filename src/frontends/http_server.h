// The HTTP listener under slow and many clients. cpp-httplib's own server gives each connection a
// thread of a fixed pool for as long as the client takes to send its request, with a 5 s timeout
// per read but none per request: 16 clients sending one header byte every 2 s hold 16 threads
// forever and nothing else is answered. Here:
//  - every connection gets a thread at once (the pool grows up to max_connections + a margin), so
//    a slow client holds only its own, and health checks never wait behind it;
//  - the request head must arrive whole within header_timeout (counted from the accept, or for a
//    kept-alive connection from the request's first byte), else 408 and close; the body within
//    body_timeout of the head;
//  - past max_connections, a connection gets 503 with Retry-After at once and is closed;
//  - the listen backlog is `backlog` (httplib's is 5: bursts of connections were reset);
//  - every accepted connection's first request is answered, also while the server stops (httplib
//    closes connections that are still waiting for a thread when it stops).
// With TLS (httplib::SSLServer reads the encrypted stream itself) only the thread per connection,
// the backlog and the read timeouts apply.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace hotline::frontends {

struct HttpLimits {
  int min_threads = 16;  // started at once (server.yaml http_threads)
  int max_connections = 512;
  int backlog = 1024;
  std::chrono::milliseconds header_timeout{5000};
  std::chrono::milliseconds body_timeout{30000};
};

// A TaskQueue that runs each task on an idle thread, or a new one while fewer than max_threads
// exist (threads are kept for reuse); beyond that, tasks wait. shutdown() runs what is queued.
class ConnectionPool final : public httplib::TaskQueue {
 public:
  ConnectionPool(size_t min_threads, size_t max_threads);
  ~ConnectionPool() override;
  void enqueue(std::function<void()> fn) override;
  void shutdown() override;
  size_t threads() const;

 private:
  void Spawn();  // under mu_
  void Work();

  const size_t max_threads_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool shutdown_ = false;
};

// Sets the listening socket's backlog (after bind_to_port, before listening starts).
void SetListenBacklog(int socket, int backlog);

// Plain-HTTP server with the limits above.
class GuardedHttpServer final : public httplib::Server {
 public:
  explicit GuardedHttpServer(HttpLimits limits);
  // The backlog applies to the socket bound by bind_to_port / bind_to_any_port.
  void ApplyBacklog() { SetListenBacklog(int(svr_sock_.load()), limits_.backlog); }
  // Requests whose head has been read and whose response is not yet written.
  int active_requests() const { return active_requests_.load(); }
  // Waits until no request is active or `until` passes; true when none is.
  bool WaitIdle(std::chrono::steady_clock::time_point until) const;
  uint64_t refused_connections() const { return refused_.load(); }
  uint64_t timed_out_heads() const { return timed_out_.load(); }

 private:
  bool process_and_close_socket(socket_t sock) override;
  // stop() closes the listening socket first (is_running() turns false only after every
  // connection has ended).
  bool stopped() const { return svr_sock_.load() == INVALID_SOCKET; }

  const HttpLimits limits_;
  std::atomic<int> connections_{0};
  std::atomic<int> active_requests_{0};
  std::atomic<uint64_t> refused_{0}, timed_out_{0};
};

// TLS server: httplib's own connection handling, with the backlog settable.
class TlsHttpServer final : public httplib::SSLServer {
 public:
  using httplib::SSLServer::SSLServer;
  void ApplyBacklog(int backlog) { SetListenBacklog(int(svr_sock_.load()), backlog); }
};

}  // namespace hotline::frontends
