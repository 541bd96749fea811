// DirectMesh: connecting the mesh, and the poll loop that exchanges one message with every peer.
#include "distributed/gloo/direct_mesh.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

namespace lockstep::dist {

namespace {

std::string lost(int r, const char* how) {
  return lockstep::detail::str_cat("lost connection to rank ", r, " (", how,
                                   "; its process may have died or failed)");
}

// For the handshake's timeout: "; N connection(s) from A, B <what>", listing at most 8 addresses.
void describe_connections(std::string& out, size_t count, const std::vector<std::string>& from, const char* what) {
  if (count == 0) return;
  out += out.empty() ? " (" : "; ";
  out += lockstep::detail::str_cat(count, count == 1 ? " connection" : " connections", " from ");
  for (size_t i = 0; i < from.size() && i < 8; ++i) out += (i ? ", " : "") + from[i];
  if (count > 8) out += lockstep::detail::str_cat(" and ", count - 8, " more");
  out += lockstep::detail::str_cat(" ", what);
}

constexpr const char* kConnectorProof = "lockstep direct_mesh v1 connector";
constexpr const char* kAcceptorProof = "lockstep direct_mesh v1 acceptor";

// What the connector's proof covers after the acceptor's nonce: its own nonce and the rank it claims.
std::vector<uint8_t> nonce_and_rank(const uint8_t* nonce, int32_t rank) {
  std::vector<uint8_t> v(nonce, nonce + JobToken::kNonceBytes);
  v.resize(v.size() + sizeof(rank));
  std::memcpy(v.data() + JobToken::kNonceBytes, &rank, sizeof(rank));
  return v;
}

// The connector's side of the token handshake, on a fresh connection to rank `r`: read the acceptor's
// nonce, send the hello (rank, nonce, proof), check the acceptor's proof.
void prove_to_acceptor(const Socket& s, const JobToken& token, int32_t me, int r, Deadline deadline) {
  const std::string where = lockstep::detail::str_cat("DirectMesh: rank ", r, " at ", s.peer());
  JobToken::Nonce theirs;
  s.recv_all(theirs.data(), theirs.size(), deadline);
  const JobToken::Nonce mine = JobToken::nonce();
  const JobToken::Mac proof = token.prove(kConnectorProof, theirs, nonce_and_rank(mine.data(), me));
  uint8_t hello[sizeof(me) + JobToken::kNonceBytes + JobToken::kMacBytes];
  std::memcpy(hello, &me, sizeof(me));
  std::memcpy(hello + sizeof(me), mine.data(), mine.size());
  std::memcpy(hello + sizeof(me) + mine.size(), proof.data(), proof.size());
  s.send_all(hello, sizeof(hello), deadline);
  JobToken::Mac answer;
  try {
    s.recv_all(answer.data(), answer.size(), deadline);
  } catch (const TimeoutError&) {
    throw;
  } catch (const Error&) {  // the acceptor closed the connection: it did not accept this proof
    throw JobTokenError(where + " refused this process's job token (wrong or missing LOCKSTEP_JOB_TOKEN)");
  }
  if (!token.verify(kAcceptorProof, mine, theirs, answer)) {
    throw JobTokenError(where + " did not prove the job token back (a process of another job listens there)");
  }
}

}  // namespace

std::string interface_address(const std::string& iface) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "";
  std::string v4, v6;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || iface != a->ifa_name) continue;
    char buf[INET6_ADDRSTRLEN] = {};
    if (a->ifa_addr->sa_family == AF_INET && v4.empty()) {
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof(buf));
      v4 = buf;
    } else if (a->ifa_addr->sa_family == AF_INET6 && v6.empty()) {
      const in6_addr& addr = reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr;
      if (IN6_IS_ADDR_LINKLOCAL(&addr)) continue;  // would need a scope id
      ::inet_ntop(AF_INET6, &addr, buf, sizeof(buf));
      v6 = buf;
    }
  }
  ::freeifaddrs(list);
  return v4.empty() ? v6 : v4;
}

DirectMesh::DirectMesh(Store& store, int rank, int size, const std::string& host, std::chrono::milliseconds timeout,
                       const JobToken& token)
    : rank_(rank), size_(size), timeout_(timeout), peers_(size) {
  if (size == 1) return;
  const Deadline deadline = deadline_after(timeout);
  Socket listener = Socket::listen(host, 0);
  store.set("direct_mesh/" + std::to_string(rank), listener.local_address());
  connect_lower(store, token, deadline);
  accept_higher(listener, token, deadline);
}

void DirectMesh::connect_lower(Store& store, const JobToken& token, Deadline deadline) {
  const int32_t me = rank_;
  for (int r = 0; r < rank_; ++r) {
    const std::string key = "direct_mesh/" + std::to_string(r);
    store.wait({key}, std::chrono::milliseconds(remaining_ms(deadline)));
    const auto [peer_host, port] =
        split_host_port(store.get_string(key), "DirectMesh: rank " + std::to_string(r) + "'s address");
    peers_[r] = Socket::connect(peer_host, port, deadline);
    if (token.enabled()) {
      prove_to_acceptor(peers_[r], token, me, r, deadline);
    } else {
      peers_[r].send_all(&me, sizeof(me), deadline);
    }
  }
}

namespace {

// The accepting side's connections that have not yet said which rank they are, and the count of those
// closed for a bad hello or token, for the timeout's message.
struct Handshakes {
  static constexpr size_t kTokenHello = sizeof(int32_t) + JobToken::kNonceBytes + JobToken::kMacBytes;
  struct Unnamed {
    Socket socket;
    JobToken::Nonce nonce{};  // sent to it on accept (with a token)
    uint8_t hello[kTokenHello] = {};
    size_t got = 0;  // bytes of the hello received
  };

  Handshakes(const JobToken& token, int rank, Deadline deadline)
      : token(token), rank(rank), deadline(deadline), hello_bytes(token.enabled() ? kTokenHello : sizeof(int32_t)) {}

  // Takes every connection waiting on `listener`; with a token, sends each its nonce.
  void accept_all(const Socket& listener);
  // Reads what unnamed[i] has sent: the rank it claims once its hello is whole (and, with a token,
  // proven). A connection that closes or fails the token is dropped here.
  std::optional<int32_t> read_hello(size_t i);
  // Closes unnamed[i] for a hello that is no rank expected here.
  void reject(size_t i) {
    ++invalid;
    if (invalid_from.size() < 8) invalid_from.push_back(unnamed[i].socket.peer());
    drop(i);
  }
  void drop(size_t i) { unnamed.erase(unnamed.begin() + static_cast<std::ptrdiff_t>(i)); }
  // For the timeout's message: " (N connection(s) from A, B never said ...; ...)", or "".
  std::string strays() const;

  const JobToken& token;
  const int rank;
  const Deadline deadline;
  const size_t hello_bytes;
  std::vector<Unnamed> unnamed;
  size_t invalid = 0;                     // connections closed for an invalid hello
  std::vector<std::string> invalid_from;  // the first 8 of them
  size_t refused = 0;                     // connections closed for not proving the token
  std::vector<std::string> refused_from;  // the first 8 of them
};

void Handshakes::accept_all(const Socket& listener) {
  for (Socket s = listener.accept(); s.valid(); s = listener.accept()) {
    Unnamed u{std::move(s)};
    if (token.enabled()) {
      u.nonce = JobToken::nonce();  // fresh per connection: a captured hello proves nothing here
      try {
        u.socket.send_all(u.nonce.data(), u.nonce.size(), deadline);  // 32 bytes into an empty buffer
      } catch (const TimeoutError&) {
        throw;
      } catch (const Error&) {
        continue;  // closed at once: nothing to name
      }
    }
    unnamed.push_back(std::move(u));
  }
}

std::optional<int32_t> Handshakes::read_hello(size_t i) {
  Unnamed& u = unnamed[i];
  const ssize_t n = ::recv(u.socket.fd(), u.hello + u.got, hello_bytes - u.got, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return std::nullopt;
  if (n <= 0) {  // closed or failed before saying who it is
    if (u.got > 0) {
      reject(i);  // part of a hello: not a rank
    } else {
      drop(i);  // nothing to name; the timeout names the rank
    }
    return std::nullopt;
  }
  u.got += static_cast<size_t>(n);
  if (u.got < hello_bytes) return std::nullopt;
  int32_t who;
  std::memcpy(&who, u.hello, sizeof(who));
  if (!token.enabled()) return who;
  // Checked before the rank it claims is even looked at: a peer without the token can neither take a
  // rank's place nor fail the job by claiming one twice.
  const uint8_t* their_nonce = u.hello + sizeof(who);
  const std::span<const uint8_t> proof(their_nonce + JobToken::kNonceBytes, JobToken::kMacBytes);
  if (!token.verify(kConnectorProof, u.nonce, nonce_and_rank(their_nonce, who), proof)) {
    std::fprintf(stderr, "DirectMesh: rank %d refused a connection from %s: wrong or missing job token\n", rank,
                 u.socket.peer().c_str());
    ++refused;
    if (refused_from.size() < 8) refused_from.push_back(u.socket.peer());
    drop(i);
    return std::nullopt;
  }
  const JobToken::Mac answer =
      token.prove(kAcceptorProof, std::span<const uint8_t>(their_nonce, JobToken::kNonceBytes), u.nonce);
  try {
    u.socket.send_all(answer.data(), answer.size(), deadline);
  } catch (const TimeoutError&) {
    throw;
  } catch (const Error&) {
    drop(i);  // gone: the timeout names the rank
    return std::nullopt;
  }
  return who;
}

std::string Handshakes::strays() const {
  std::string out;
  std::vector<std::string> silent;
  for (const Unnamed& u : unnamed) silent.push_back(u.socket.peer());
  describe_connections(out, silent.size(), silent, "never said which rank it is");
  describe_connections(out, invalid, invalid_from, "sent an invalid hello");
  describe_connections(out, refused, refused_from, "did not prove the job token");
  if (!out.empty()) out += ")";
  return out;
}

}  // namespace

// A connection counts once it has said which rank it is; until then it is polled along with the
// listener, so one that stays silent holds up no other rank, and the timeout names the ranks still
// missing. A hello is the connecting rank as 4 bytes (an int32 in this host's byte order); one that
// names no rank this one still expects (a stray client such as a port scanner or an HTTP probe: "GET "
// reads as rank 542393671), or that closes partway through, is closed and listed if the timeout passes.
// A rank that is already connected, claimed again, fails at once: most likely two processes think they
// are that rank (a stray client whose first 4 bytes happen to read as a rank expected here fails it
// too: nothing tells the two apart). With a token the hello is the rank, the connector's nonce and its
// proof (prove_to_acceptor).
void DirectMesh::accept_higher(const Socket& listener, const JobToken& token, Deadline deadline) {
  Handshakes hs(token, rank_, deadline);
  std::vector<pollfd> fds;
  for (int pending = size_ - 1 - rank_; pending > 0;) {
    fds.assign(1, {listener.fd(), POLLIN, 0});
    for (const Handshakes::Unnamed& u : hs.unnamed) fds.push_back({u.socket.fd(), POLLIN, 0});
    const int rc = ::poll(fds.data(), fds.size(), remaining_ms(deadline));
    if (rc < 0 && errno == EINTR) continue;
    LOCKSTEP_CHECK(rc >= 0, "DirectMesh: rank ", rank_, ": poll on its listening socket: ", std::strerror(errno));
    if (rc == 0) {
      std::string missing;
      for (int r = rank_ + 1; r < size_; ++r) {
        if (!peers_[r].valid()) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      throw TimeoutError(lockstep::detail::str_cat("DirectMesh: rank ", rank_, " timed out after ",
                                                   detail::format_seconds(timeout_), " waiting for rank(s) ", missing,
                                                   " to connect", hs.strays()));
    }
    // Hellos first (fds[i + 1] is unnamed[i]), then new connections.
    for (size_t i = hs.unnamed.size(); i-- > 0;) {
      if (!fds[i + 1].revents) continue;
      const std::optional<int32_t> who = hs.read_hello(i);
      if (!who) continue;
      if (*who <= rank_ || *who >= size_) {
        hs.reject(i);
        continue;
      }
      const Socket& s = hs.unnamed[i].socket;
      LOCKSTEP_CHECK(!peers_[*who].valid(), "DirectMesh: rank ", rank_, " got two connections claiming to be rank ",
                     *who, ", from ", peers_[*who].peer(), " and then from ", s.peer(),
                     " (two processes were started as rank ", *who, ", or a stray client's first 4 bytes read as ",
                     *who, ")");
      peers_[*who] = std::move(hs.unnamed[i].socket);
      hs.drop(i);
      --pending;
    }
    if (fds[0].revents) hs.accept_all(listener);
  }
}

void DirectMesh::exchange(const void* send, void* recv, size_t bytes, uint64_t seq) {
  messages_.clear();
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) messages_.push_back({r, send, bytes, static_cast<char*>(recv) + slot(r) * bytes, bytes});
  }
  transfer(messages_, seq);
}

void DirectMesh::transfer(std::span<const Message> messages, uint64_t seq) {
  const Deadline deadline = deadline_after(timeout_);
  std::vector<Progress>& peers = progress_;
  peers.clear();
  seen_.assign(size_, 0);
  for (const Message& m : messages) {
    LOCKSTEP_CHECK(m.peer >= 0 && m.peer < size_ && m.peer != rank_, "DirectMesh: no connection to rank ", m.peer);
    // Two messages to one peer would interleave on its connection.
    LOCKSTEP_CHECK(!seen_[m.peer]++, "DirectMesh: two messages for rank ", m.peer, " in one transfer");
    LOCKSTEP_CHECK((m.send || !m.send_bytes) && (m.recv || !m.recv_bytes), "DirectMesh: a null buffer of ",
                   m.send ? m.recv_bytes : m.send_bytes, " bytes for rank ", m.peer);
    peers.push_back({m.peer, peers_[m.peer].fd(), Header{seq, m.send_bytes}, static_cast<const char*>(m.send),
                     m.sends ? sizeof(Header) + m.send_bytes : 0, static_cast<char*>(m.recv),
                     m.receives ? sizeof(Header) + m.recv_bytes : 0, m.recv_bytes});
  }
  std::vector<pollfd>& fds = fds_;
  fds.resize(peers.size());

  // Moves as much as the sockets take now; returns whether anything is left to do.
  auto progress = [&] {
    bool busy = false;
    for (Progress& t : peers) {
      while (t.sent < t.send_total) {
        iovec iov[2];
        int n = 0;
        if (t.sent < sizeof(Header)) iov[n++] = {reinterpret_cast<char*>(&t.out) + t.sent, sizeof(Header) - t.sent};
        const size_t done = t.sent > sizeof(Header) ? t.sent - sizeof(Header) : 0;
        if (t.send_total - sizeof(Header) > done) {
          iov[n++] = {const_cast<char*>(t.send) + done, t.send_total - sizeof(Header) - done};
        }
        msghdr msg{};
        msg.msg_iov = iov;
        msg.msg_iovlen = n;
        const ssize_t rc = ::sendmsg(t.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (rc > 0) {
          t.sent += static_cast<size_t>(rc);
        } else if (rc < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
          break;
        } else if (rc < 0 && errno != EINTR) {
          throw PeerError(lost(t.rank, errno == EPIPE        ? "broken pipe"
                                       : errno == ECONNRESET ? "connection reset by peer"
                                                             : "send failed"));
        }
      }
      while (t.received < t.recv_total) {
        char* dst = t.received < sizeof(Header) ? reinterpret_cast<char*>(&t.in) + t.received
                                                : t.recv + (t.received - sizeof(Header));
        const size_t want = t.received < sizeof(Header) ? sizeof(Header) - t.received : t.recv_total - t.received;
        const ssize_t rc = ::recv(t.fd, dst, want, MSG_DONTWAIT);
        if (rc > 0) {
          t.received += static_cast<size_t>(rc);
          if (t.received == sizeof(Header) && (t.in.seq != seq || t.in.bytes != t.expected)) {
            throw PeerError(lockstep::detail::str_cat(
                "rank ", t.rank, " sent a message of collective #", t.in.seq, " (", t.in.bytes, " bytes) while rank ",
                rank_, " expected one of collective #", seq, " (", t.expected,
                " bytes): the ranks issued different collectives (LOCKSTEP_DISTRIBUTED_DEBUG=DETAIL names them)"));
          }
        } else if (rc == 0) {
          throw PeerError(lost(t.rank, "peer closed the connection"));
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
          break;
        } else if (errno != EINTR) {
          throw PeerError(lost(t.rank, errno == ECONNRESET ? "connection reset by peer" : "receive failed"));
        }
      }
      busy = busy || t.sent < t.send_total || t.received < t.recv_total;
    }
    return busy;
  };

  while (progress()) {
    size_t n = 0;
    for (const Progress& t : peers) {
      const short events =
          static_cast<short>((t.sent < t.send_total ? POLLOUT : 0) | (t.received < t.recv_total ? POLLIN : 0));
      if (events) fds[n++] = {t.fd, events, 0};
    }
    const int rc = ::poll(fds.data(), n, remaining_ms(deadline));
    if (rc < 0 && errno != EINTR) throw PeerError(lockstep::detail::str_cat("poll: ", std::strerror(errno)));
    if (rc == 0) {
      std::string waiting;
      for (const Progress& t : peers) {
        if (t.received < t.recv_total || t.sent < t.send_total) {
          waiting += (waiting.empty() ? "" : ", ") + std::to_string(t.rank);
        }
      }
      throw PeerError(lockstep::detail::str_cat(
          "timed out after ", detail::format_seconds(timeout_), " waiting for rank",
          waiting.find(',') == std::string::npos ? " " : "s ", waiting,
          " (one may be hung, dead, or not calling this collective; LOCKSTEP_DISTRIBUTED_DEBUG=DETAIL names it)"));
    }
  }
}

}  // namespace lockstep::dist
