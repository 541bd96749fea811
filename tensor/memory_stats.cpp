// Memory accounting by label and dtype (memory_stats.h).
#include "tensor/memory_stats.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "common/env.h"

namespace lockstep::memory_stats {

namespace {

using Key = std::tuple<std::string, Dtype, bool>;  // label, dtype, on the CPU

struct Entry {
  size_t bytes;
  size_t key;       // index into Stats::keys
  bool has_op;      // labelled by an op (record), which later ops do not override
  bool is_cpu;
  const char* label;
  Dtype dtype;
};

struct Totals {
  size_t bytes = 0, count = 0;
};

// Everything under one mutex: this is a diagnostic mode, and DataLoader workers allocate too.
struct Stats {
  std::mutex mu;
  std::unordered_map<const Storage*, Entry> live;
  std::map<Key, size_t> index;
  std::set<std::string> names;  // interned scope labels
  std::vector<Key> keys;
  std::vector<Totals> totals, totals_at_peak;
  size_t live_bytes = 0, peak = 0, cached = 0, cached_at_peak = 0, peak_with_cache = 0;

  size_t key_of(const char* label, Dtype dtype, bool is_cpu) {
    Key k{label, dtype, is_cpu};
    auto [it, fresh] = index.emplace(k, keys.size());
    if (fresh) {
      keys.push_back(k);
      totals.emplace_back();
    }
    return it->second;
  }
  // Relabels e; while the live bytes are still at the peak (e is usually the allocation that made
  // it, tagged right after), the peak's totals follow.
  void move(Entry& e, size_t to) {
    totals[e.key].bytes -= e.bytes, --totals[e.key].count;
    e.key = to;
    totals[to].bytes += e.bytes, ++totals[to].count;
    if (live_bytes == peak) totals_at_peak = totals;
  }
  void note_peak() {
    peak_with_cache = std::max(peak_with_cache, live_bytes + cached);
    if (live_bytes <= peak) return;
    peak = live_bytes;
    cached_at_peak = cached;
    totals_at_peak = totals;
  }
};

Stats& stats() {
  static Stats* s = new Stats;  // never destroyed: storages in static storage are freed at exit
  return *s;
}

thread_local std::vector<const char*> scopes;

const char* current_label() { return scopes.empty() ? "other" : scopes.back(); }

// The report at exit, when on.
const bool report_at_exit = [] {
  if (env_int("LOCKSTEP_MEMORY_STATS", 0, 0, 1) != 0)
    std::atexit([] { std::fputs(report().c_str(), stderr); });
  return true;
}();

}  // namespace

namespace detail {

const bool on = env_int("LOCKSTEP_MEMORY_STATS", 0, 0, 1) != 0;

void allocated(const Storage* s, size_t nbytes, bool is_cpu) {
  Stats& st = stats();
  std::lock_guard<std::mutex> lock(st.mu);
  const char* label = current_label();
  Entry e{nbytes, st.key_of(label, kUInt8, is_cpu), false, is_cpu, label, kUInt8};
  st.totals[e.key].bytes += nbytes, ++st.totals[e.key].count;
  st.live[s] = e;
  st.live_bytes += nbytes;
  st.note_peak();
}

void freed(const Storage* s) {
  Stats& st = stats();
  std::lock_guard<std::mutex> lock(st.mu);
  auto it = st.live.find(s);
  if (it == st.live.end()) return;
  st.totals[it->second.key].bytes -= it->second.bytes, --st.totals[it->second.key].count;
  st.live_bytes -= it->second.bytes;
  st.live.erase(it);
}

void set_dtype(const Storage* s, Dtype dtype) {
  Stats& st = stats();
  std::lock_guard<std::mutex> lock(st.mu);
  auto it = st.live.find(s);
  if (it == st.live.end()) return;
  Entry& e = it->second;
  e.dtype = dtype;
  st.move(e, st.key_of(e.label, dtype, e.is_cpu));
}

void set_op(const Storage* s, const std::string& op) {
  Stats& st = stats();
  std::lock_guard<std::mutex> lock(st.mu);
  auto it = st.live.find(s);
  if (it == st.live.end() || it->second.has_op) return;
  Entry& e = it->second;
  e.has_op = true;
  e.label = st.names.insert(op).first->c_str();
  st.move(e, st.key_of(e.label, e.dtype, e.is_cpu));
}

void push_scope(const char* label) { scopes.push_back(label); }
void push_scope(const std::string& label) {
  Stats& st = stats();
  std::lock_guard<std::mutex> lock(st.mu);
  scopes.push_back(st.names.insert(label).first->c_str());
}
void pop_scope() {
  if (!scopes.empty()) scopes.pop_back();
}

}  // namespace detail

void set_cached_bytes(size_t bytes) {
  if (!detail::on) return;
  Stats& st = stats();
  std::lock_guard<std::mutex> lock(st.mu);
  st.cached = bytes;
  st.note_peak();
}

Snapshot snapshot() {
  Stats& st = stats();
  std::lock_guard<std::mutex> lock(st.mu);
  Snapshot out;
  out.live = st.live_bytes;
  out.peak = st.peak;
  out.cached_at_peak = st.cached_at_peak;
  out.peak_with_cache = st.peak_with_cache;
  auto rows = [&](const std::vector<Totals>& totals, std::vector<Row>& out_rows) {
    for (size_t i = 0; i < totals.size(); ++i) {
      if (totals[i].count == 0) continue;
      const auto& [label, dtype, is_cpu] = st.keys[i];
      out_rows.push_back({label, dtype, is_cpu, totals[i].bytes, totals[i].count});
    }
    std::sort(out_rows.begin(), out_rows.end(), [](const Row& a, const Row& b) { return a.bytes > b.bytes; });
  };
  rows(st.totals_at_peak, out.at_peak);
  rows(st.totals, out.now);
  return out;
}

size_t Snapshot::bytes(const char* label, Dtype dtype, bool at_the_peak) const {
  size_t n = 0;
  for (const Row& r : at_the_peak ? at_peak : now)
    if ((!label || r.label == label) && r.dtype == dtype) n += r.bytes;
  return n;
}

void reset_peak() {
  Stats& st = stats();
  std::lock_guard<std::mutex> lock(st.mu);
  st.peak = st.live_bytes;
  st.cached_at_peak = st.cached;
  st.peak_with_cache = st.live_bytes + st.cached;
  st.totals_at_peak = st.totals;
}

std::string report() {
  const Snapshot s = snapshot();
  auto mib = [](size_t b) { return static_cast<double>(b) / (1 << 20); };
  std::ostringstream os;
  char line[160];
  std::snprintf(line, sizeof line,
                "memory_stats: peak live %.1f MiB (+ %.1f MiB in the CPU block cache then); peak live + cached "
                "%.1f MiB; live now %.1f MiB\n",
                mib(s.peak), mib(s.cached_at_peak), mib(s.peak_with_cache), mib(s.live));
  os << line;
  os << "memory_stats: live at the peak, by label and dtype (storages allocated untyped show as uint8):\n";
  for (const Row& r : s.at_peak) {
    std::snprintf(line, sizeof line, "  %10.2f MiB %6zu  %-8s %-4s %s\n", mib(r.bytes), r.count, dtype_name(r.dtype),
                  r.is_cpu ? "cpu" : "cuda", r.label.c_str());
    os << line;
  }
  return os.str();
}

}  // namespace lockstep::memory_stats
