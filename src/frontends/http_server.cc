#include "frontends/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

namespace hotline::frontends {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxHeadBytes = 64 * 1024;  // a longer head is refused (431)
// Extra threads beyond max_connections, to answer the connections refused past it.
constexpr size_t kRefusalThreads = 32;

// Waits until `sock` is readable (POLLIN) or writable (POLLOUT); false at `until`.
bool WaitFor(int sock, short events, Clock::time_point until) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{sock, events, 0};
    const int r = ::poll(&p, 1, int(std::min<int64_t>(left.count(), 1 << 30)));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

// A socket stream that reads into its own buffer, each read bounded by the current deadline, so
// the head can be read whole before httplib parses it (from the buffer).
class DeadlineStream final : public httplib::Stream {
 public:
  explicit DeadlineStream(int sock) : sock_(sock) {}

  void set_deadline(Clock::time_point t) { deadline_ = t; }
  bool buffered() const { return pos_ < buf_.size(); }

  // Reads until the buffered bytes hold a whole request head ("\r\n\r\n"), kMaxHeadBytes are
  // buffered, the peer closes or the deadline passes. 1: whole; 0: timed out or closed with bytes
  // read; -1: closed before any byte; -2: too long.
  int ReadHead() {
    size_t scanned = pos_;
    for (;;) {
      const size_t at = buf_.find("\r\n\r\n", scanned >= pos_ + 3 ? scanned - 3 : pos_);
      if (at != std::string::npos) return 1;
      scanned = buf_.size();
      if (buf_.size() - pos_ >= kMaxHeadBytes) return -2;
      const ssize_t n = Fill();
      if (n <= 0) return buffered() ? 0 : -1;
    }
  }

  // Waits for the first byte of the next request until `until`, giving up early when `stop()`.
  bool WaitRequest(Clock::time_point until, const std::function<bool()>& stop) {
    if (buffered()) return true;
    while (Clock::now() < until) {
      if (stop()) return false;
      const auto slice = std::min(until, Clock::now() + std::chrono::milliseconds(50));
      if (WaitFor(sock_, POLLIN, slice)) {
        const Clock::time_point saved = deadline_;
        deadline_ = Clock::now() + std::chrono::milliseconds(50);
        const ssize_t n = Fill();
        deadline_ = saved;
        return n > 0;
      }
    }
    return false;
  }

  bool is_readable() const override { return buffered() || WaitFor(sock_, POLLIN, read_until()); }
  // Writable and the peer still there (as httplib's own stream): a streaming response (the
  // console's events) ends when its client has gone.
  bool is_writable() const override {
    return WaitFor(sock_, POLLOUT, write_deadline()) && PeerAlive();
  }

  ssize_t read(char* ptr, size_t size) override {
    if (!buffered()) {
      buf_.clear();
      pos_ = 0;
      if (Fill() <= 0) return -1;
    }
    const size_t n = std::min(size, buf_.size() - pos_);
    std::memcpy(ptr, buf_.data() + pos_, n);
    pos_ += n;
    return ssize_t(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    return ::send(sock_, ptr, size, MSG_NOSIGNAL);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    Address(::getpeername, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    Address(::getsockname, ip, port);
  }
  socket_t socket() const override { return sock_; }

 private:
  // Each read waits at most httplib's read timeout (5 s), and never past the deadline.
  Clock::time_point read_until() const {
    return std::min(deadline_, Clock::now() + std::chrono::seconds(CPPHTTPLIB_READ_TIMEOUT_SECOND));
  }

  // False once the peer has closed or reset the connection (nothing left to read but EOF).
  bool PeerAlive() const {
    pollfd p{sock_, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return true;
    if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return false;
    char c;
    const ssize_t n = ::recv(sock_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
  }

  // Appends what the socket has (waiting as read_until() says); bytes read, 0 closed, -1 failed.
  ssize_t Fill() {
    if (!WaitFor(sock_, POLLIN, read_until())) return -1;
    char chunk[4096];
    ssize_t n;
    do {
      n = ::recv(sock_, chunk, sizeof chunk, 0);
    } while (n < 0 && errno == EINTR);
    if (n > 0) buf_.append(chunk, size_t(n));
    return n;
  }

  // Writes get 5 s each (httplib's default write timeout).
  static Clock::time_point write_deadline() { return Clock::now() + std::chrono::seconds(5); }

  template <typename F>
  void Address(F getname, std::string& ip, int& port) const {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    ip.clear();
    port = 0;
    if (getname(sock_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return;
    char text[INET6_ADDRSTRLEN] = {};
    if (addr.ss_family == AF_INET) {
      const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
      ::inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
      port = ntohs(a->sin_port);
    } else if (addr.ss_family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
      ::inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
      port = ntohs(a->sin6_port);
    }
    ip = text;
  }

  const int sock_;
  std::string buf_;
  size_t pos_ = 0;
  Clock::time_point deadline_ = Clock::now();
};

// A complete response written straight to the socket (no request could be parsed).
void SendRaw(DeadlineStream& strm, int status, const char* reason, const std::string& code,
             const std::string& message, bool retry_after) {
  const std::string body = "{\"code\":\"" + code + "\",\"message\":\"" + message + "\"}";
  std::string out =
      "HTTP/1.1 " + std::to_string(status) + " " + reason +
      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\nConnection: close\r\n";
  if (retry_after) out += "Retry-After: 1\r\n";
  out += "\r\n" + body;
  size_t off = 0;
  while (off < out.size()) {
    const ssize_t n = strm.write(out.data() + off, out.size() - off);
    if (n <= 0) return;
    off += size_t(n);
  }
}

}  // namespace

ConnectionPool::ConnectionPool(size_t min_threads, size_t max_threads)
    : max_threads_(std::max<size_t>(1, max_threads)) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < std::min(min_threads, max_threads_); ++i) Spawn();
}

ConnectionPool::~ConnectionPool() { shutdown(); }

void ConnectionPool::Spawn() {
  ++idle_;
  threads_.emplace_back([this] { Work(); });
}

void ConnectionPool::enqueue(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  jobs_.push_back(std::move(fn));
  if (idle_ < jobs_.size() && threads_.size() < max_threads_) Spawn();
  cv_.notify_one();
}

void ConnectionPool::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

size_t ConnectionPool::threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return threads_.size();
}

void ConnectionPool::Work() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return !jobs_.empty() || shutdown_; });
    if (jobs_.empty()) return;  // shutting down with nothing left
    std::function<void()> fn = std::move(jobs_.front());
    jobs_.pop_front();
    --idle_;
    lock.unlock();
    fn();
    lock.lock();
    ++idle_;
  }
}

void SetListenBacklog(int socket, int backlog) {
  if (socket >= 0) ::listen(socket, std::max(1, backlog));  // again: the kernel takes the new size
}

GuardedHttpServer::GuardedHttpServer(HttpLimits limits) : limits_(limits) {
  const size_t max_threads = size_t(std::max(1, limits_.max_connections)) + kRefusalThreads;
  const size_t min_threads = size_t(std::max(1, limits_.min_threads));
  new_task_queue = [min_threads, max_threads] {
    return new ConnectionPool(min_threads, max_threads);
  };
}

bool GuardedHttpServer::WaitIdle(Clock::time_point until) const {
  while (active_requests_.load() > 0) {
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

bool GuardedHttpServer::process_and_close_socket(socket_t sock) {
  const Clock::time_point accepted = Clock::now();
  DeadlineStream strm{int(sock)};
  const int open = connections_.fetch_add(1) + 1;
  if (open > limits_.max_connections) {
    refused_.fetch_add(1);
    SendRaw(strm, 503, "Service Unavailable", "UNAVAILABLE",
            "the server holds its maximum of " + std::to_string(limits_.max_connections) +
                " connections; retry later",
            true);
  } else {
    const auto keep_alive = std::chrono::seconds(keep_alive_timeout_sec_);
    for (size_t n = 0; n < std::max<size_t>(1, keep_alive_max_count_); ++n) {
      // The first request is always read and answered (also while stopping); a kept-alive
      // connection waits for the next one only while the server runs.
      Clock::time_point head_deadline = accepted + limits_.header_timeout;
      if (n > 0) {
        if (!strm.WaitRequest(Clock::now() + keep_alive, [this] { return stopped(); })) break;
        head_deadline = Clock::now() + limits_.header_timeout;
      }
      strm.set_deadline(head_deadline);
      const int head = strm.ReadHead();
      if (head == -1) break;  // closed (or silent) before sending anything
      if (head == 0) {
        timed_out_.fetch_add(1);
        SendRaw(strm, 408, "Request Timeout", "DEADLINE_EXCEEDED",
                "the request head did not arrive within " +
                    std::to_string(limits_.header_timeout.count()) + " ms",
                false);
        break;
      }
      if (head == -2) {
        SendRaw(strm, 431, "Request Header Fields Too Large", "INVALID_ARGUMENT",
                "the request head is over " + std::to_string(kMaxHeadBytes) + " bytes", false);
        break;
      }
      strm.set_deadline(Clock::now() + limits_.body_timeout);
      const bool last = n + 1 >= keep_alive_max_count_ || stopped();
      bool closed = false;
      active_requests_.fetch_add(1);
      const bool ok = process_request(strm, last, closed, nullptr);
      active_requests_.fetch_sub(1);
      if (!ok || closed || last) break;
    }
  }
  connections_.fetch_sub(1);
  ::shutdown(int(sock), SHUT_RDWR);
  ::close(int(sock));
  return true;
}

}  // namespace hotline::frontends
