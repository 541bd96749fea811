// examples/common/metrics_log: the JSON lines a run writes, what a resumed run keeps, and the chart.
#include "examples/common/metrics_log.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <sstream>

using lockstep::examples::MetricsLog;

namespace {
std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
std::string temp_path(const char* name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name + std::to_string(::getpid());
}
size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}
}  // namespace

TEST_CASE("MetricsLog writes one JSON object per record and a resumed log keeps the earlier ones") {
  const std::string jsonl = temp_path("m.jsonl"), svg = temp_path("m.svg");
  {
    MetricsLog log(jsonl, svg, "run <1>", /*append=*/false);
    log.log({{"step", 1}, {"loss", 2.5}});
    log.log({{"step", 2}, {"loss", 1.25}, {"val_loss", NAN}});
  }
  CHECK(read_all(jsonl) == "{\"step\":1,\"loss\":2.5}\n{\"step\":2,\"loss\":1.25,\"val_loss\":null}\n");
  MetricsLog resumed(jsonl, svg, "run <1>", /*append=*/true);
  REQUIRE(resumed.records().size() == 2);
  CHECK(resumed.records()[1][1].second == 1.25);
  CHECK(std::isnan(resumed.records()[1][2].second));
  resumed.log({{"step", 3}, {"loss", 0.5}, {"val_loss", 0.75}});
  CHECK(count(read_all(jsonl), "\n") == 3);
  std::string chart = read_all(svg);
  CHECK(chart.rfind("<svg", 0) == 0);
  CHECK(chart.find("run &lt;1&gt;") != std::string::npos);  // the title is escaped
  CHECK(count(chart, "<polyline") == 2);                       // a panel for loss, one for val_loss
  // loss spans 0.5..2.5 over steps 1..3: its axis labels are those bounds.
  CHECK(chart.find(">2.5<") != std::string::npos);
  CHECK(chart.find(">0.5<") != std::string::npos);
  // A run resumed from a checkpoint at step 2 drops what came after it (step 3 is redone).
  MetricsLog again(jsonl, svg, "run <1>", /*append=*/true);
  again.drop_after(2);
  REQUIRE(again.records().size() == 2);
  CHECK(read_all(jsonl) == "{\"step\":1,\"loss\":2.5}\n{\"step\":2,\"loss\":1.25,\"val_loss\":null}\n");
  CHECK(count(read_all(svg), "<polyline") == 1);  // val_loss has only a NaN left: no line
  MetricsLog fresh(jsonl, "", "", /*append=*/false);
  CHECK(fresh.records().empty());
  CHECK(read_all(jsonl).empty());
}

TEST_CASE("MetricsLog refuses a file that is not JSON lines, naming the line") {
  const std::string jsonl = temp_path("bad.jsonl");
  std::ofstream(jsonl) << "{\"step\":1}\nnot json\n";
  CHECK_THROWS_WITH(MetricsLog(jsonl, "", "", true), doctest::Contains("line 2 of"));
}
