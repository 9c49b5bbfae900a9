#include "executor/workload.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kernels/common/random.h"

namespace moeprof {

namespace {

Status line_error(const std::string& source, int64_t line, const std::string& what) {
  return Status::bad_input(source + " line " + std::to_string(line) + ": " + what);
}

// A JSON integer in [lo, hi] (a number with a fraction or out of range is refused).
bool json_int(const nlohmann::json& v, int64_t lo, int64_t hi, int64_t* out) {
  if (!v.is_number_integer()) return false;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) return false;
    *out = static_cast<int64_t>(u);
  } else {
    *out = v.get<int64_t>();
  }
  return *out >= lo && *out <= hi;
}

}  // namespace

Result<Workload> parse_workload_jsonl(const std::string& text, const std::string& source) {
  Workload w;
  w.source = source;
  std::istringstream in(text);
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    nlohmann::json j;
    std::vector<std::string> keys;  // the request object's keys: one given twice is refused, not "the last wins"
    std::string repeated;
    try {
      j = nlohmann::json::parse(line, [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        if (depth == 1 && event == nlohmann::json::parse_event_t::key && repeated.empty()) {
          const std::string k = parsed.is_string() ? parsed.get<std::string>() : std::string();
          if (std::find(keys.begin(), keys.end(), k) != keys.end()) repeated = k;
          keys.push_back(k);
        }
        return true;
      });
    } catch (const nlohmann::json::parse_error& e) {
      std::string msg = e.what();
      if (auto p = msg.find("parse error"); p != std::string::npos) msg = msg.substr(p);
      return line_error(source, n, "not JSON (" + msg + ")");
    }
    if (!repeated.empty()) return line_error(source, n, "key \"" + repeated + "\" given twice");
    if (!j.is_object()) return line_error(source, n, "must be a JSON object {\"prompt_tokens\": ..., \"output_tokens\": ...}");
    for (const auto& [k, v] : j.items())
      if (k != "prompt_tokens" && k != "output_tokens" && k != "arrival_step")
        return line_error(source, n, "unknown key \"" + k + "\" (known: prompt_tokens, output_tokens, arrival_step)");
    RequestSpec r;
    r.line = n;
    if (!j.contains("prompt_tokens")) return line_error(source, n, "prompt_tokens is missing");
    const auto& p = j["prompt_tokens"];
    if (p.is_array()) {
      if (p.empty() || static_cast<int64_t>(p.size()) > kMaxRequestTokens)
        return line_error(source, n, "prompt_tokens must hold 1 to 2^30 token ids");
      r.prompt_ids.reserve(p.size());
      for (size_t i = 0; i < p.size(); ++i) {
        int64_t id = 0;
        if (!json_int(p[i], 0, INT32_MAX, &id))
          return line_error(source, n, "prompt_tokens[" + std::to_string(i) + "] must be a token id (an integer >= 0)");
        r.prompt_ids.push_back(static_cast<int32_t>(id));
      }
      r.prompt_len = static_cast<int64_t>(r.prompt_ids.size());
    } else if (!json_int(p, 1, kMaxRequestTokens, &r.prompt_len)) {
      return line_error(source, n, "prompt_tokens must be an integer in [1, 2^30] or an array of token ids");
    }
    if (!j.contains("output_tokens")) return line_error(source, n, "output_tokens is missing");
    if (!json_int(j["output_tokens"], 1, kMaxRequestTokens, &r.output_len))
      return line_error(source, n, "output_tokens must be an integer in [1, 2^30]");
    if (j.contains("arrival_step") && !json_int(j["arrival_step"], 0, kMaxRequestTokens, &r.arrival_step))
      return line_error(source, n, "arrival_step must be an integer in [0, 2^30]");
    if (static_cast<int64_t>(w.requests.size()) >= kMaxWorkloadRequests)
      return line_error(source, n, "more than 2^20 requests");
    w.requests.push_back(std::move(r));
  }
  if (w.requests.empty()) return Status::bad_input(source + ": no request (one JSON object per line)");
  return w;
}

namespace {

// "L" or "LO-HI" with 1 <= LO <= HI <= 2^30.
bool parse_length(const std::string& s, int64_t* lo, int64_t* hi) {
  auto num = [](std::string_view t, int64_t* v) {
    if (t.empty()) return false;
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), *v);
    return ec == std::errc() && p == t.data() + t.size();
  };
  const auto dash = s.find('-');
  if (dash == std::string::npos) {
    if (!num(s, lo)) return false;
    *hi = *lo;
  } else if (!num(std::string_view(s).substr(0, dash), lo) || !num(std::string_view(s).substr(dash + 1), hi)) {
    return false;
  }
  return *lo >= 1 && *hi >= *lo && *hi <= kMaxRequestTokens;
}

}  // namespace

Result<Workload> parse_synthetic_workload(const std::string& spec) {
  const std::string prefix = "synthetic:";
  const std::string usage = " (synthetic:N,PROMPT,OUTPUT[,SEED] with PROMPT and OUTPUT a length L or a range LO-HI)";
  if (spec.rfind(prefix, 0) != 0) return Status::bad_input("workload " + spec + ": not a synthetic spec" + usage);
  std::vector<std::string> parts;
  std::stringstream ss(spec.substr(prefix.size()));
  for (std::string p; std::getline(ss, p, ',');) parts.push_back(p);
  if (parts.size() < 3 || parts.size() > 4) return Status::bad_input("workload " + spec + ": needs 3 or 4 fields" + usage);
  int64_t n = 0, plo = 0, phi = 0, olo = 0, ohi = 0;
  uint64_t seed = 0;
  {
    auto [p, ec] = std::from_chars(parts[0].data(), parts[0].data() + parts[0].size(), n);
    if (ec != std::errc() || p != parts[0].data() + parts[0].size() || n < 1 || n > kMaxWorkloadRequests)
      return Status::bad_input("workload " + spec + ": N must be an integer in [1, 2^20] (got \"" + parts[0] + "\")");
  }
  if (!parse_length(parts[1], &plo, &phi))
    return Status::bad_input("workload " + spec + ": PROMPT must be L or LO-HI with 1 <= LO <= HI <= 2^30 (got \"" + parts[1] + "\")");
  if (!parse_length(parts[2], &olo, &ohi))
    return Status::bad_input("workload " + spec + ": OUTPUT must be L or LO-HI with 1 <= LO <= HI <= 2^30 (got \"" + parts[2] + "\")");
  if (parts.size() == 4) {
    auto [p, ec] = std::from_chars(parts[3].data(), parts[3].data() + parts[3].size(), seed);
    if (ec != std::errc() || p != parts[3].data() + parts[3].size())
      return Status::bad_input("workload " + spec + ": SEED must be a non-negative integer (got \"" + parts[3] + "\")");
  }
  Workload w;
  w.source = spec;
  w.requests.resize(static_cast<size_t>(n));
  auto draw = [&](int64_t lo, int64_t hi, uint64_t stream, int64_t i) {
    if (lo == hi) return lo;
    return lo + static_cast<int64_t>(kern::hash64(seed * 2 + stream, static_cast<uint64_t>(i)) % static_cast<uint64_t>(hi - lo + 1));
  };
  for (int64_t i = 0; i < n; ++i) {
    w.requests[static_cast<size_t>(i)].prompt_len = draw(plo, phi, 0, i);
    w.requests[static_cast<size_t>(i)].output_len = draw(olo, ohi, 1, i);
  }
  return w;
}

Result<Workload> load_workload(const std::string& spec) {
  if (spec.rfind("synthetic:", 0) == 0) return parse_synthetic_workload(spec);
  std::error_code ec;
  if (std::filesystem::is_directory(spec, ec))
    return Status::bad_input("cannot read workload " + spec + ": it is a directory (a JSONL file, or synthetic:N,PROMPT,OUTPUT[,SEED])");
  std::ifstream f(spec, std::ios::binary);
  if (!f) return Status::bad_input("cannot open workload " + spec + " (a JSONL file, or synthetic:N,PROMPT,OUTPUT[,SEED])");
  std::ostringstream buf;
  buf << f.rdbuf();
  return parse_workload_jsonl(buf.str(), spec);
}

}  // namespace moeprof
