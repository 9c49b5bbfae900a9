#include "executor/scheduler.h"

#include <algorithm>
#include <cstdint>
#include <string>

namespace moeprof {

std::string_view step_kind_name(StepKind k) { return k == StepKind::kPrefill ? "prefill" : "decode"; }

Result<Scheduler> Scheduler::create(const SchedulerConfig& cfg, const Workload& w) {
  if (cfg.page_size < 1 || cfg.pool_tokens < cfg.page_size || cfg.pool_tokens % cfg.page_size != 0)
    return Status::bad_input("scheduler: the pool must hold at least one page, a whole number of pages");
  // Slots (page x page size + offset, page 0 the padding page) are int32, as SGLang's req_to_token.
  if (cfg.pool_tokens > int64_t{INT32_MAX} + 1 - cfg.page_size)
    return Status::bad_input("the KV pool of " + std::to_string(cfg.pool_tokens) + " tokens is larger than its int32 slots address (" +
                             std::to_string(int64_t{INT32_MAX} + 1 - cfg.page_size) + " tokens with page size " +
                             std::to_string(cfg.page_size) + ", as SGLang's req_to_token)");
  if (cfg.chunked_prefill_size < 1 || cfg.max_running_requests < 1 || cfg.context_len < 1)
    return Status::bad_input("scheduler: chunked prefill size, max running requests and context length must be >= 1");
  Scheduler s(cfg);
  s.reqs_.resize(w.requests.size());
  for (size_t i = 0; i < w.requests.size(); ++i) {
    const RequestSpec& r = w.requests[i];
    RequestState& st = s.reqs_[i];
    st.prompt_len = r.prompt_len;
    st.output_len = r.output_len;
    st.arrival_step = r.arrival_step;
    const int64_t need = r.prompt_len + r.output_len - 1;  // the last token is generated, never stored
    const std::string who = "request " + std::to_string(i) + (r.line > 0 ? " (line " + std::to_string(r.line) + ")" : "");
    if (need > cfg.context_len)
      return Status::bad_input(who + " needs " + std::to_string(need) + " positions (prompt + output - 1), more than the context length " +
                               std::to_string(cfg.context_len));
    if (s.pages_for(need) > s.pool_pages())
      return Status::bad_input(who + " needs " + std::to_string(need) + " KV tokens, more than the whole pool (" +
                               std::to_string(cfg.pool_tokens) + (cfg.pool_tokens == 1 ? " token" : " tokens") +
                               (cfg.page_size > 1 ? ", " + std::to_string(s.pool_pages()) + " pages of " + std::to_string(cfg.page_size) : "") +
                               "): it could never run");
    s.arrivals_.push_back(static_cast<int64_t>(i));
  }
  std::stable_sort(s.arrivals_.begin(), s.arrivals_.end(),
                   [&](int64_t a, int64_t b) { return s.reqs_[a].arrival_step < s.reqs_[b].arrival_step; });
  for (int64_t r = 1; r <= cfg.max_running_requests; ++r) s.free_rows_.push_back(r);
  return s;
}

int64_t Scheduler::pool_held_requests() const {
  return std::count_if(reqs_.begin(), reqs_.end(), [](const RequestState& r) { return r.pool_held; });
}

int64_t Scheduler::waited_requests() const {
  return std::count_if(reqs_.begin(), reqs_.end(), [](const RequestState& r) { return r.waited; });
}

int32_t Scheduler::slot_for(RequestState& r, int64_t pos) {
  if (pos / cfg_.page_size >= static_cast<int64_t>(r.pages.size())) {
    // Reserved at admission: a page never used, else the oldest released.
    if (next_fresh_ <= pool_pages()) {
      r.pages.push_back(static_cast<int32_t>(next_fresh_++));
    } else {
      r.pages.push_back(free_pages_.front());
      free_pages_.pop_front();
    }
    ++pages_used_;
  }
  ++tokens_used_;
  ++r.kv_len;
  return static_cast<int32_t>(r.pages[static_cast<size_t>(pos / cfg_.page_size)] * cfg_.page_size + pos % cfg_.page_size);
}

StepPlan Scheduler::next() {
  // Idle: jump to the next arrival.
  if (waiting_.empty() && decoding_.empty() && chunked_ < 0 && next_arrival_ < arrivals_.size())
    step_ = std::max(step_, reqs_[static_cast<size_t>(arrivals_[next_arrival_])].arrival_step);
  while (next_arrival_ < arrivals_.size() && reqs_[static_cast<size_t>(arrivals_[next_arrival_])].arrival_step <= step_)
    waiting_.push_back(arrivals_[next_arrival_++]);

  StepPlan plan;
  plan.index = step_++;
  int64_t budget = cfg_.chunked_prefill_size;
  auto add_prefill = [&](int64_t i) {
    RequestState& r = reqs_[static_cast<size_t>(i)];
    const int64_t n = std::min(r.prompt_len - r.prefilled, budget);
    StepPlan::Segment seg{i, static_cast<int64_t>(plan.rows.size()), n, r.prefilled, r.prefilled + n == r.prompt_len};
    for (int64_t k = 0; k < n; ++k) plan.rows.push_back(StepRow{i, r.prefilled + k, slot_for(r, r.prefilled + k)});
    r.prefilled += n;
    budget -= n;
    chunked_ = seg.completes ? -1 : i;
    plan.segments.push_back(seg);
  };
  if (chunked_ >= 0) add_prefill(chunked_);
  while (chunked_ < 0 && budget > 0 && !waiting_.empty()) {
    const int64_t i = waiting_.front();
    RequestState& r = reqs_[static_cast<size_t>(i)];
    const int64_t need = pages_for(r.prompt_len + r.output_len - 1);
    if (free_rows_.empty() || need > pool_pages() - reserved_) {
      const bool pool = need > pool_pages() - reserved_;
      for (int64_t w : waiting_) {  // FCFS: all of them wait
        reqs_[static_cast<size_t>(w)].waited = true;
        reqs_[static_cast<size_t>(w)].pool_held |= pool;
      }
      break;
    }
    waiting_.pop_front();
    r.row = free_rows_.front();
    free_rows_.pop_front();
    r.reserved_pages = need;
    reserved_ += need;
    r.admitted_step = plan.index;
    ++running_;
    add_prefill(i);
  }
  if (!plan.rows.empty()) return plan;

  plan.kind = StepKind::kDecode;
  for (int64_t i : decoding_) {
    RequestState& r = reqs_[static_cast<size_t>(i)];
    // The input is the latest generated token, at position prompt + generated - 1.
    const int64_t pos = r.prompt_len + static_cast<int64_t>(r.output.size()) - 1;
    plan.rows.push_back(StepRow{i, pos, slot_for(r, pos)});
  }
  return plan;
}

void Scheduler::release(int64_t i, int64_t step) {
  RequestState& r = reqs_[static_cast<size_t>(i)];
  r.finished_step = step;
  for (int32_t p : r.pages) free_pages_.push_back(p);
  pages_used_ -= static_cast<int64_t>(r.pages.size());
  tokens_used_ -= r.kv_len;
  reserved_ -= r.reserved_pages;
  r.pages.clear();
  r.kv_len = 0;
  r.reserved_pages = 0;
  free_rows_.push_back(r.row);
  r.row = -1;
  --running_;
  ++finished_;
}

void Scheduler::finish(const StepPlan& plan, const std::vector<int32_t>& tokens) {
  size_t t = 0;
  std::vector<int64_t> done;
  if (plan.kind == StepKind::kPrefill) {
    for (const auto& seg : plan.segments) {
      if (!seg.completes) continue;
      RequestState& r = reqs_[static_cast<size_t>(seg.request)];
      r.output.push_back(t < tokens.size() ? tokens[t] : 0);
      ++t;
      if (static_cast<int64_t>(r.output.size()) >= r.output_len)
        done.push_back(seg.request);
      else
        decoding_.push_back(seg.request);
    }
  } else {
    for (const StepRow& row : plan.rows) {
      RequestState& r = reqs_[static_cast<size_t>(row.request)];
      r.output.push_back(t < tokens.size() ? tokens[t] : 0);
      ++t;
      if (static_cast<int64_t>(r.output.size()) >= r.output_len) done.push_back(row.request);
    }
  }
  for (int64_t i : done) {
    release(i, plan.index);
    decoding_.erase(std::remove(decoding_.begin(), decoding_.end(), i), decoding_.end());
  }
}

}  // namespace moeprof
