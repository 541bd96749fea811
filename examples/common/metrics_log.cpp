#include "examples/common/metrics_log.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/check.h"

namespace lockstep::examples {
namespace {

// Integral values (steps, epochs, counts) print as integers; the rest round-trip.
nlohmann::ordered_json to_json(const MetricsLog::Fields& fields) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& [k, v] : fields) {
    if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9e15)
      j[k] = static_cast<int64_t>(v);
    else if (std::isfinite(v))
      j[k] = v;
    else
      j[k] = nullptr;  // JSON has no NaN: a diverged loss is written as null
  }
  return j;
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

}  // namespace

MetricsLog::MetricsLog(std::string jsonl_path, std::string svg_path, std::string title, bool append,
                       std::string x_key)
    : jsonl_path_(std::move(jsonl_path)), svg_path_(std::move(svg_path)), title_(std::move(title)),
      x_key_(std::move(x_key)) {
  if (jsonl_path_.empty()) return;
  if (append) {
    std::ifstream in(jsonl_path_);
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      if (line.empty()) continue;
      auto j = nlohmann::ordered_json::parse(line, nullptr, /*allow_exceptions=*/false);
      LOCKSTEP_CHECK(j.is_object(), "MetricsLog: line ", n, " of ", jsonl_path_, " is not a JSON object");
      Fields f;
      for (auto& [k, v] : j.items()) f.emplace_back(k, v.is_number() ? v.get<double>() : NAN);
      records_.push_back(std::move(f));
    }
  }
  std::ofstream out(jsonl_path_, append ? std::ios::app : std::ios::trunc);
  LOCKSTEP_CHECK(out.good(), "MetricsLog: cannot write ", jsonl_path_);
}

void MetricsLog::log(const Fields& fields) {
  records_.push_back(fields);
  if (!jsonl_path_.empty()) {
    std::ofstream out(jsonl_path_, std::ios::app);
    out << to_json(fields).dump() << '\n';
    LOCKSTEP_CHECK(out.good(), "MetricsLog: cannot write ", jsonl_path_);
  }
  write_svg();
}

void MetricsLog::drop_after(double x) {
  std::erase_if(records_, [&](const Fields& r) {
    for (const auto& [k, v] : r)
      if (k == x_key_) return v > x;
    return false;
  });
  if (!jsonl_path_.empty()) {
    std::ofstream out(jsonl_path_, std::ios::trunc);
    for (const Fields& r : records_) out << to_json(r).dump() << '\n';
    LOCKSTEP_CHECK(out.good(), "MetricsLog: cannot write ", jsonl_path_);
  }
  write_svg();
}

void MetricsLog::write_svg() const {
  if (svg_path_.empty()) return;
  // Written beside and renamed, so a browser refreshing the chart never reads half a file.
  std::string tmp = svg_path_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << render_svg(records_, title_, x_key_);
    LOCKSTEP_CHECK(out.good(), "MetricsLog: cannot write ", tmp);
  }
  LOCKSTEP_CHECK(std::rename(tmp.c_str(), svg_path_.c_str()) == 0, "MetricsLog: cannot rename ", tmp, " to ",
                 svg_path_);
}

std::string render_svg(const std::vector<MetricsLog::Fields>& records, const std::string& title,
                       const std::string& x_key) {
  // Panels in the order their keys first appear; each holds the (x, y) points of the records with both.
  std::vector<std::string> keys;
  for (const auto& r : records)
    for (const auto& [k, v] : r)
      if (k != x_key && std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  constexpr int kW = 520, kH = 200, kLeft = 64, kRight = 16, kTop = 28, kBottom = 30, kHeader = 30;
  const int height = kHeader + static_cast<int>(keys.size()) * kH;
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kW << "\" height=\"" << height
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << kW / 2 << "\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">" << xml_escape(title)
    << "</text>\n";
  for (size_t p = 0; p < keys.size(); ++p) {
    std::vector<std::pair<double, double>> pts;
    for (const auto& r : records) {
      double x = NAN, y = NAN;
      for (const auto& [k, v] : r) {
        if (k == x_key) x = v;
        if (k == keys[p]) y = v;
      }
      if (std::isfinite(x) && std::isfinite(y)) pts.emplace_back(x, y);
    }
    const int top = kHeader + static_cast<int>(p) * kH, x0 = kLeft, x1 = kW - kRight, y0 = top + kH - kBottom,
              y1 = top + kTop;
    s << "<text x=\"" << x0 << "\" y=\"" << top + 18 << "\" font-weight=\"bold\">" << xml_escape(keys[p])
      << "</text>\n"
      << "<rect x=\"" << x0 << "\" y=\"" << y1 << "\" width=\"" << x1 - x0 << "\" height=\"" << y0 - y1
      << "\" fill=\"none\" stroke=\"#999\"/>\n";
    if (pts.empty()) continue;
    double xmin = pts[0].first, xmax = xmin, ymin = pts[0].second, ymax = ymin;
    for (auto [x, y] : pts) {
      xmin = std::min(xmin, x), xmax = std::max(xmax, x), ymin = std::min(ymin, y), ymax = std::max(ymax, y);
    }
    if (xmax == xmin) xmax = xmin + 1;
    if (ymax == ymin) ymax = ymin + (ymin == 0 ? 1 : std::fabs(ymin) * 0.01);
    auto px = [&](double x) { return x0 + (x - xmin) / (xmax - xmin) * (x1 - x0); };
    auto py = [&](double y) { return y0 - (y - ymin) / (ymax - ymin) * (y0 - y1); };
    s << "<text x=\"" << x0 - 4 << "\" y=\"" << y1 + 4 << "\" text-anchor=\"end\">" << fmt(ymax) << "</text>\n"
      << "<text x=\"" << x0 - 4 << "\" y=\"" << y0 << "\" text-anchor=\"end\">" << fmt(ymin) << "</text>\n"
      << "<text x=\"" << x0 << "\" y=\"" << y0 + 14 << "\">" << fmt(xmin) << "</text>\n"
      << "<text x=\"" << x1 << "\" y=\"" << y0 + 14 << "\" text-anchor=\"end\">" << fmt(xmax) << "</text>\n"
      << "<text x=\"" << (x0 + x1) / 2 << "\" y=\"" << y0 + 14 << "\" text-anchor=\"middle\">"
      << xml_escape(x_key) << "</text>\n"
      << "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"";
    for (auto [x, y] : pts) s << fmt(px(x)) << ',' << fmt(py(y)) << ' ';
    s << "\"/>\n";
    if (pts.size() == 1) s << "<circle cx=\"" << px(pts[0].first) << "\" cy=\"" << py(pts[0].second) << "\" r=\"3\"/>\n";
  }
  s << "</svg>\n";
  return s.str();
}

}  // namespace lockstep::examples
