// MetricsLog: a training run's curves as JSON lines ({"step": 100, "loss": 2.31, ...}, one object per
// logged point) and as an SVG chart redrawn from them, one panel per metric against the x key, so a
// user can look at a run rather than read it. A resumed run appends to the same file and its chart
// shows the whole curve.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace lockstep::examples {

class MetricsLog {
 public:
  using Fields = std::vector<std::pair<std::string, double>>;

  // Empty paths disable that output. With `append`, records already in `jsonl_path` are kept (and
  // plotted); otherwise the file starts empty. `x_key` is the horizontal axis of every panel.
  MetricsLog(std::string jsonl_path, std::string svg_path, std::string title, bool append,
             std::string x_key = "step");

  // Writes one record (keys in the given order), flushes it and redraws the chart.
  void log(const Fields& fields);

  // Drops the records whose x is past `x` and rewrites the file: what a run resumed from a checkpoint
  // taken at x calls, so the steps it redoes are not in the curve twice.
  void drop_after(double x);

  const std::vector<Fields>& records() const { return records_; }

 private:
  void write_svg() const;

  std::string jsonl_path_, svg_path_, title_, x_key_;
  std::vector<Fields> records_;
};

// The chart alone, for tools and tests: one panel per key other than `x_key`, in order of first use.
std::string render_svg(const std::vector<MetricsLog::Fields>& records, const std::string& title,
                       const std::string& x_key);

}  // namespace lockstep::examples
