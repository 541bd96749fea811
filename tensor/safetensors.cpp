// safetensors reader and atomic writer.
#include "tensor/safetensors.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "tensor/ops.h"

namespace lockstep {

namespace {

// Each dtype and its name in the safetensors header.
constexpr std::pair<Dtype, const char*> kDtypeNames[] = {
    {kFloat32, "F32"}, {kFloat64, "F64"}, {kInt64, "I64"}, {kBool, "BOOL"},
    {kUInt8, "U8"}, {kBFloat16, "BF16"}, {kFloat16, "F16"}, {kInt8, "I8"}, {kInt16, "I16"}, {kInt32, "I32"},
};

const char* st_dtype(Dtype d) {
  for (const auto& [dtype, name] : kDtypeNames)
    if (dtype == d) return name;
  fail("save_safetensors: dtype ", d, " has no safetensors name");
}

bool parse_dtype(const std::string& s, Dtype& d) {
  for (const auto& [dtype, name] : kDtypeNames)
    if (s == name) {
      d = dtype;
      return true;
    }
  return false;
}

// Seconds since the epoch when process `pid` started (/proc/PID/stat's start time after boot, plus the
// boot time in /proc/stat); -1 when unknown.
double process_start_time(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return -1;
  const size_t close = line.rfind(')');  // the command name, in parentheses, may hold spaces
  if (close == std::string::npos) return -1;
  std::istringstream fields(line.substr(close + 2));
  std::string field;
  for (int i = 3; i < 22 && fields >> field; ++i) {
  }
  unsigned long long start_ticks = 0;
  if (!(fields >> start_ticks)) return -1;  // field 22: start time, in clock ticks after boot
  std::ifstream proc_stat("/proc/stat");
  long long boot = -1;
  while (std::getline(proc_stat, line)) {
    if (line.rfind("btime ", 0) == 0) boot = std::atoll(line.c_str() + 6);
  }
  const long ticks = ::sysconf(_SC_CLK_TCK);
  if (boot < 0 || ticks <= 0) return -1;
  return static_cast<double>(boot) + static_cast<double>(start_ticks) / static_cast<double>(ticks);
}

// Whether the process of this host that wrote a temporary file `PATH.tmp.HOST.PID` (last modified at
// `mtime`) may still be writing it: a process with that pid exists and started before the file was
// last written (a process started later took a dead writer's pid).
bool writer_may_be_alive(pid_t pid, const struct timespec& mtime) {
  if (::kill(pid, 0) != 0 && errno != EPERM) return false;
  const double started = process_start_time(pid);
  const double written = static_cast<double>(mtime.tv_sec) + static_cast<double>(mtime.tv_nsec) * 1e-9;
  return started < 0 || started <= written + 2;  // the boot time has whole seconds only
}

// This host's name as it appears in temporary file names: gethostname(), with any character other
// than letters, digits, '-', '_' and '.' replaced by '_' (it becomes part of a file name).
const std::string& host_tag() {
  static const std::string tag = [] {
    char buf[256] = {};
    if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return std::string("unknown-host");
    std::string s(buf);
    for (char& c : s) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
    }
    return s;
  }();
  return tag;
}

// The pid in `s` when it is 1 to 9 digits; 0 otherwise.
pid_t parse_pid(const std::string& s) {
  if (s.empty() || s.size() > 9 || !std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); })) {
    return 0;
  }
  return static_cast<pid_t>(std::stol(s));
}

// Removes the temporary files that saves of `path` on this host, killed before their rename, left
// behind: `path`.tmp.HOST.PID with this host's name, and `path`.tmp.PID (the name older versions
// wrote), of processes that no longer exist. A pid means something on its own host only, so files of
// other hosts (a checkpoint directory shared over NFS) are left to those hosts' saves. This process's
// own are not touched, nor files of any other name. Errors are ignored: tidying up must not fail a
// save that succeeded.
void remove_stale_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string prefix = target.filename().string() + ".tmp.";
  const std::string this_host = host_tag() + ".";
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    std::string rest = name.substr(prefix.size());  // HOST.PID, or PID from an older version
    if (rest.compare(0, this_host.size(), this_host) == 0) rest.erase(0, this_host.size());
    const pid_t pid = parse_pid(rest);  // 0 for another host's file, or another name
    struct stat st {};
    if (pid <= 0 || pid == ::getpid() || ::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (!writer_may_be_alive(pid, st.st_mtim)) ::unlink(it->path().c_str());
  }
}

}  // namespace

void save_safetensors(const std::string& path, const TensorList& tensors,
                      const std::map<std::string, std::string>& metadata) {
  static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<Tensor> host;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    LOCKSTEP_CHECK(t.defined(), "save_safetensors: tensor '", name, "' is undefined");
    LOCKSTEP_CHECK(name != "__metadata__" && !header.contains(name), "save_safetensors: duplicate or reserved name '",
                   name, "'");
    host.push_back(internal::contiguous(internal::to_device(t, Device::cpu())));  // a view writes its elements
    header[name] = {{"dtype", st_dtype(t.dtype())}, {"shape", std::vector<int64_t>(t.shape())},
                    {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // the format pads the header to 8 bytes with spaces
  uint64_t len = json.size();

  std::string tmp = path + ".tmp." + host_tag() + "." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  LOCKSTEP_CHECK(fd >= 0, "save_safetensors: cannot create ", tmp, ": ", std::strerror(errno));
  try {
    write_all(fd, &len, 8, "save_safetensors", path);
    write_all(fd, json.data(), json.size(), "save_safetensors", path);
    for (const Tensor& t : host) write_all(fd, t.data_ptr(), t.nbytes(), "save_safetensors", path);
    LOCKSTEP_CHECK(::fsync(fd) == 0, "save_safetensors: fsync of ", tmp, " failed: ", std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail("save_safetensors: cannot rename ", tmp, " to ", path, ": ", std::strerror(err));
  }
  // Make the rename itself durable.
  std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/') + 1);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  remove_stale_temporaries(path);
}

SafetensorsFile load_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LOCKSTEP_CHECK(in, "load_safetensors: cannot open ", path);
  in.seekg(0, std::ios::end);
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  LOCKSTEP_CHECK(file_size >= 8, "load_safetensors: ", path, " is truncated (", file_size, " bytes, no header length)");
  uint64_t len = 0;
  in.read(reinterpret_cast<char*>(&len), 8);
  LOCKSTEP_CHECK(len <= file_size - 8 && len <= (100u << 20), "load_safetensors: ", path, " is corrupt or truncated: "
                 "header length ", len, " does not fit a file of ", file_size, " bytes");
  std::string json(len, '\0');
  in.read(json.data(), static_cast<std::streamsize>(len));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(json);
  } catch (const std::exception& e) {
    fail("load_safetensors: ", path, " has a corrupt JSON header: ", e.what());
  }
  LOCKSTEP_CHECK(header.is_object(), "load_safetensors: ", path, ": the header is not a JSON object");
  const uint64_t data_size = file_size - 8 - len;

  SafetensorsFile out;
  struct Entry {
    std::string name;
    Dtype dtype;
    Shape shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  for (auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      LOCKSTEP_CHECK(v.is_object(), "load_safetensors: ", path, ": __metadata__ is not an object");
      for (auto& [k, s] : v.items()) {
        LOCKSTEP_CHECK(s.is_string(), "load_safetensors: ", path, ": metadata '", k, "' is not a string");
        out.metadata[k] = s.get<std::string>();
      }
      continue;
    }
    Entry e{name, kFloat32, {}, 0, 0};
    try {
      LOCKSTEP_CHECK(parse_dtype(v.at("dtype").get<std::string>(), e.dtype), "load_safetensors: ", path, ": tensor '",
                     name, "' has dtype ", v.at("dtype").dump(), " (lockstep reads F32, F64, I64, BOOL, U8 and BF16)");
      e.shape = Shape(v.at("shape").get<std::vector<int64_t>>());
      auto off = v.at("data_offsets").get<std::vector<uint64_t>>();
      LOCKSTEP_CHECK(off.size() == 2, "load_safetensors: ", path, ": tensor '", name, "' has malformed data_offsets");
      e.begin = off[0];
      e.end = off[1];
    } catch (const nlohmann::json::exception& ex) {
      fail("load_safetensors: ", path, ": tensor '", name, "' has a malformed entry: ", ex.what());
    }
    uint64_t numel = 1;
    for (int64_t d : e.shape) {
      LOCKSTEP_CHECK(d >= 0, "load_safetensors: ", path, ": tensor '", name, "' has a negative dimension");
      numel *= static_cast<uint64_t>(d);
    }
    LOCKSTEP_CHECK(e.begin <= e.end && e.end <= data_size && e.end - e.begin == numel * element_size(e.dtype),
                   "load_safetensors: ", path, " is corrupt or truncated: tensor '", name, "' ", e.shape, " ",
                   e.dtype, " claims bytes [", e.begin, ", ", e.end, ") of a ", data_size, "-byte data section");
    entries.push_back(std::move(e));
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < entries.size(); ++i)
    LOCKSTEP_CHECK(entries[i].begin >= entries[i - 1].end, "load_safetensors: ", path, ": tensors '",
                   entries[i - 1].name, "' and '", entries[i].name, "' overlap");
  for (const Entry& e : entries) {
    Tensor t(e.shape, e.dtype, Device::cpu());
    in.seekg(static_cast<std::streamoff>(8 + len + e.begin));
    in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(e.end - e.begin));
    LOCKSTEP_CHECK(in, "load_safetensors: ", path, " is truncated while reading tensor '", e.name, "'");
    if (e.dtype == kBool) {  // a C++ bool holds 0 or 1 only
      const auto* b = static_cast<const uint8_t*>(t.data_ptr());
      for (int64_t i = 0; i < t.numel(); ++i)
        LOCKSTEP_CHECK(b[i] <= 1, "load_safetensors: ", path, ": BOOL tensor '", e.name, "' holds byte ", int(b[i]),
                       " at element ", i);
    }
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

}  // namespace lockstep
