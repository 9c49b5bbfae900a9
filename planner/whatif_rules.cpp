// What-if rule files: parsing, selectors, globs (planner/whatif.h has the grammar).
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "core/nearest.h"
#include "core/utf8.h"
#include "planner/stacks.h"
#include "planner/whatif.h"

namespace moeprof::planner {

bool glob_match(std::string_view p, std::string_view s) {
  // Iterative wildcard match with one backtrack point: linear in |p| * |s| at worst.
  size_t pi = 0, si = 0, star = std::string_view::npos, mark = 0;
  while (si < s.size()) {
    if (pi < p.size() && (p[pi] == '?' || p[pi] == s[si])) {
      ++pi;
      ++si;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = si;
    } else if (star != std::string_view::npos) {
      pi = star + 1;
      si = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

std::string explain_no_match(const Selector& sel, const RunAnalysis& run) {
  for (const Lifetime& l : run.lifetimes)
    if (sel.matches(l, run)) return "";
  // Each part on its own, over every lifetime; the distinct names and scopes for suggestions.
  std::set<std::string> names, scopes;
  bool name_hit = sel.name.empty(), scope_hit = sel.scope.empty(), stack_hit = sel.stack.empty();
  bool cat_hit = sel.categories == 0, size_hit = sel.min_bytes == 0 && sel.max_bytes == UINT64_MAX, device_hit = sel.device < 0;
  for (const Lifetime& l : run.lifetimes) {
    names.insert(run.str(l.name_id));
    scopes.insert(run.str(l.scope_id));
    Selector one;
    if (!name_hit && glob_match(sel.name, run.str(l.name_id))) name_hit = true;
    if (!scope_hit && glob_match(sel.scope, run.str(l.scope_id))) scope_hit = true;
    if (!stack_hit) {
      one.stack = sel.stack;
      stack_hit = one.matches(l, run);
    }
    if (!cat_hit && (sel.categories & category_bit(l.category)) != 0) cat_hit = true;
    if (!size_hit && l.bytes >= sel.min_bytes && l.bytes <= sel.max_bytes) size_hit = true;
    if (!device_hit && l.device == sel.device) device_hit = true;
  }
  auto suggest = [](const std::string& pattern, const std::set<std::string>& have) {
    // A glob is compared with the names' families ("layer.*/attn" for "layer.17/attn").
    std::set<std::string> forms;
    for (const auto& h : have) forms.insert(pattern.find('*') != std::string::npos ? family_scope(h) : h);
    std::vector<std::string> cands(forms.begin(), forms.end());
    std::erase(cands, std::string());
    return did_you_mean(pattern, cands);
  };
  if (run.lifetimes.empty()) return "the run has no allocations";
  if (!name_hit) return "no allocation is named '" + sel.name + "'" + suggest(sel.name, names);
  if (!scope_hit) return "no allocation has the scope '" + sel.scope + "'" + suggest(sel.scope, scopes);
  if (!stack_hit) return "no allocation's stack has a frame with '" + sel.stack + "'";
  if (!cat_hit) return "no allocation is in the selected categories";
  if (!size_hit) return "no allocation has a size in the selected range";
  if (!device_hit) return "no allocation is on device " + std::to_string(sel.device);
  return "each part matches some allocation, but no allocation matches all of them";
}

bool Selector::matches(const Lifetime& l, const RunAnalysis& run) const {
  if (device >= 0 && l.device != device) return false;
  if (l.bytes < min_bytes || l.bytes > max_bytes) return false;
  if (categories != 0 && (categories & category_bit(l.category)) == 0) return false;
  if (!name.empty() && !glob_match(name, run.str(l.name_id))) return false;
  if (!scope.empty() && !glob_match(scope, run.str(l.scope_id))) return false;
  if (!stack.empty()) {
    bool hit = false;
    for (uint32_t fid : run.stacks.stack(l.stack_id)) {
      const StackFrame& f = run.stacks.frame(fid);
      const std::string text = run.str(f.function) + " " + run.str(f.file) + ":" + std::to_string(f.line);
      // "file.py:41" must not match line 412: a match that ends in a digit may not be followed by one.
      const bool ends_digit = stack.back() >= '0' && stack.back() <= '9';
      for (size_t at = text.find(stack); at != std::string::npos; at = text.find(stack, at + 1)) {
        const size_t after = at + stack.size();
        if (!ends_digit || after >= text.size() || text[after] < '0' || text[after] > '9') {
          hit = true;
          break;
        }
      }
      if (hit) break;
    }
    if (!hit) return false;
  }
  return true;
}

std::string Selector::text() const {
  std::string s;
  auto add = [&](const std::string& t) { s += (s.empty() ? "" : " ") + t; };
  if (!name.empty()) add("name=" + name);
  if (!scope.empty()) add("scope=" + scope);
  if (categories != 0) {
    std::string c;
    for (int i = 0; i < kNumCategories; ++i)
      if (categories & (1u << i)) c += (c.empty() ? "" : ",") + std::string(category_name(static_cast<Category>(i)));
    add("category=" + c);
  }
  if (min_bytes != 0 || max_bytes != UINT64_MAX) {
    if (min_bytes == max_bytes) add("size=" + std::to_string(min_bytes));
    else add("size=" + (min_bytes ? std::to_string(min_bytes) : "") + ".." + (max_bytes != UINT64_MAX ? std::to_string(max_bytes) : ""));
  }
  if (!stack.empty()) add("stack=" + stack);
  if (device >= 0) add("device=" + std::to_string(device));
  return s.empty() ? "name=*" : s;
}

std::string Rule::text() const {
  switch (kind) {
    case RuleKind::kFreeAtLastUse: return "free-at-last-use " + target.text();
    case RuleKind::kHandOff: return "hand-off " + target.text() + (from ? " from " + from->text() : "");
    case RuleKind::kFreeAfterOp: return "free " + target.text() + " after op=" + anchor;
    case RuleKind::kFreeAfterScope: return "free " + target.text() + " after scope=" + anchor;
    case RuleKind::kDrop: return "drop " + target.text();
  }
  return "";
}

namespace {

bool parse_u64(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  const char* b = s.data();
  auto [p, ec] = std::from_chars(b, b + s.size(), *out);
  return ec == std::errc() && p == b + s.size();
}

// Splits on spaces and tabs; a '#' outside a term starts a comment.
std::vector<std::string> words(std::string_view line) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    if (i >= line.size() || line[i] == '#') break;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
    out.emplace_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

// Parses selector terms words[b, e) into *sel; returns an error message or "".
std::string parse_selector(const std::vector<std::string>& w, size_t b, size_t e, Selector* sel) {
  if (b >= e) return "a selector needs at least one term (name=, scope=, category=, size=, stack=, device=)";
  std::vector<std::string> keys;  // one term per key: the terms all hold, so a second would replace or contradict the first
  for (size_t i = b; i < e; ++i) {
    const std::string& t = w[i];
    const size_t eq = t.find('=');
    if (eq == std::string::npos || eq == 0)
      return "selector term '" + printable(t) + "' is not key=value (name=, scope=, category=, size=, stack=, device=)";
    const std::string key = t.substr(0, eq), v = t.substr(eq + 1);
    if (v.empty()) return "selector term '" + printable(t) + "' has an empty value";
    if (std::find(keys.begin(), keys.end(), key) != keys.end())
      return "selector term '" + printable(t) + "' repeats " + printable(key) +
             "=: the terms must all hold, one per key (category=A,B matches either category)";
    keys.push_back(key);
    if (key == "name") {
      sel->name = v;
    } else if (key == "scope") {
      sel->scope = v;
    } else if (key == "stack") {
      sel->stack = v;
    } else if (key == "category") {
      size_t p = 0;
      while (p <= v.size()) {
        const size_t c = v.find(',', p);
        const std::string one = v.substr(p, c == std::string::npos ? std::string::npos : c - p);
        Category cat;
        if (!parse_category(one, &cat))
          return "unknown category '" + printable(one) + "' (unknown, weights, kv_cache, activation, workspace, communication, graph)";
        sel->categories |= category_bit(cat);
        if (c == std::string::npos) break;
        p = c + 1;
      }
    } else if (key == "size") {
      const size_t dots = v.find("..");
      if (dots == std::string::npos) {
        uint64_t n;
        if (!parse_u64(v, &n)) return "size '" + printable(v) + "' is not a byte count (size=N or size=LO..HI)";
        sel->min_bytes = sel->max_bytes = n;
      } else {
        const std::string lo = v.substr(0, dots), hi = v.substr(dots + 2);
        if ((lo.empty() && hi.empty()) || (!lo.empty() && !parse_u64(lo, &sel->min_bytes)) ||
            (!hi.empty() && !parse_u64(hi, &sel->max_bytes)))
          return "size '" + printable(v) + "' is not a byte range (size=LO..HI, either bound may be empty)";
        if (sel->min_bytes > sel->max_bytes) return "size range '" + printable(v) + "' is empty";
      }
    } else if (key == "device") {
      uint64_t n;
      if (!parse_u64(v, &n) || n > 65535) return "device '" + printable(v) + "' is not a device number";
      sel->device = static_cast<int>(n);
    } else {
      return "unknown selector key '" + printable(key) + "' (name, scope, category, size, stack, device)";
    }
  }
  return "";
}

}  // namespace

Result<std::vector<Rule>> parse_rules(std::string_view text, const std::string& source) {
  std::vector<Rule> rules;
  size_t line_no = 0, pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() + 1 : nl + 1;
    ++line_no;
    const std::vector<std::string> w = words(line);
    if (w.empty()) continue;
    const std::string where = source + ":" + std::to_string(line_no) + ": ";
    Rule r;
    r.origin = source + ":" + std::to_string(line_no);
    const std::string& verb = w[0];
    std::string err;
    if (verb == "free-at-last-use" || verb == "drop") {
      r.kind = verb == "drop" ? RuleKind::kDrop : RuleKind::kFreeAtLastUse;
      err = parse_selector(w, 1, w.size(), &r.target);
    } else if (verb == "hand-off") {
      r.kind = RuleKind::kHandOff;
      size_t from = 1;
      while (from < w.size() && w[from] != "from") ++from;
      err = parse_selector(w, 1, from, &r.target);
      if (err.empty() && from < w.size()) {
        r.from.emplace();
        err = parse_selector(w, from + 1, w.size(), &*r.from);
        if (!err.empty()) err = "after 'from': " + err;
      }
    } else if (verb == "free") {
      size_t after = 1;
      while (after < w.size() && w[after] != "after") ++after;
      if (after == w.size()) {
        err = "'free' needs 'after op=GLOB' or 'after scope=GLOB' (or use free-at-last-use)";
      } else if (after + 2 != w.size()) {
        err = "'after' takes exactly one term, op=GLOB or scope=GLOB";
      } else {
        err = parse_selector(w, 1, after, &r.target);
        const std::string& a = w[after + 1];
        if (err.empty()) {
          if (a.rfind("op=", 0) == 0 && a.size() > 3) {
            r.kind = RuleKind::kFreeAfterOp;
            r.anchor = a.substr(3);
          } else if (a.rfind("scope=", 0) == 0 && a.size() > 6) {
            r.kind = RuleKind::kFreeAfterScope;
            r.anchor = a.substr(6);
          } else {
            err = "'after " + a + "': expected op=GLOB or scope=GLOB";
          }
        }
      }
    } else {
      err = "unknown rule '" + printable(verb) + "' (free-at-last-use, hand-off, free ... after, drop)";
    }
    if (!err.empty()) return Status::bad_input(where + err);
    rules.push_back(std::move(r));
  }
  return rules;
}

Result<std::vector<Rule>> load_rules(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::bad_input("cannot read rules " + path + ": " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  if (text.find('\0') != std::string::npos) return Status::bad_input(path + ": not a rule file (binary data)");
  return parse_rules(text, path);
}

std::string family_scope(std::string_view scope) {
  std::string out;
  bool in_digits = false;
  for (char c : scope) {
    const bool digit = c >= '0' && c <= '9';
    if (digit) {
      if (!in_digits) out.push_back('*');
      in_digits = true;
    } else {
      out.push_back(c);
      in_digits = false;
    }
  }
  return out;
}

}  // namespace moeprof::planner
