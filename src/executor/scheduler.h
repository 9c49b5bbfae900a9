// The serving scheduler: which requests run in each step, and where their tokens go in the paged
// KV pool (pure bookkeeping: no backend). A faithful small SGLang scheduler:
//  * Requests arrive at their arrival step into a FCFS waiting queue.
//  * A step is a prefill (extend) step when the request whose prompt is being chunked continues,
//    or when waiting requests can be admitted; otherwise a decode step over every running request.
//    Prefill and decode are never mixed in one step (SGLang's default).
//  * A prefill step takes at most chunked_prefill_size prompt tokens: the chunked request first,
//    then waiting requests in order; the request that does not fit in what is left of the budget
//    is cut there and continues in the next step (at most one request is being chunked).
//  * Admission: while fewer than max_running_requests requests hold a request row, and while the
//    pool's unreserved pages hold the request's whole need, prompt + output - 1 tokens rounded up
//    to pages (the pages are reserved at admission, so the pool is never overrun and no running
//    request is ever retracted: SGLang's reservation with a new-token ratio of 1). A request that
//    does not fit waits (the queue is FCFS: it also holds back the requests behind it); a request
//    that could never fit the pool is refused up front.
//  * Pages are taken from the free list as positions are written (a new page at each page
//    boundary) and given back when the request finishes. Page 0 is never handed out: its slots
//    are where padded rows of a CUDA-graph batch write. Request row 0 is the padding row likewise.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "core/status.h"
#include "executor/workload.h"

namespace moeprof {

struct SchedulerConfig {
  int64_t chunked_prefill_size = 8192;
  int64_t max_running_requests = 1;
  int64_t page_size = 1;
  int64_t pool_tokens = 0;   // a multiple of page_size (pages 1..pool_tokens/page_size)
  int64_t context_len = 0;   // positions per request row
};

enum class StepKind { kPrefill, kDecode };
std::string_view step_kind_name(StepKind k);

// One token row of a step.
struct StepRow {
  int64_t request = 0;  // index into the workload
  int64_t pos = 0;      // position in the request
  int32_t slot = 0;     // KV pool slot (page * page_size + pos % page_size)
};

struct StepPlan {
  int64_t index = 0;  // the step number (it jumps over idle steps to the next arrival)
  StepKind kind = StepKind::kPrefill;
  std::vector<StepRow> rows;
  // Prefill: per request, its rows [begin, begin + len) and the prompt tokens already cached.
  struct Segment {
    int64_t request = 0, begin = 0, len = 0, prefix = 0;
    bool completes = false;  // the request's prompt ends in this step: its last row gives a token
  };
  std::vector<Segment> segments;
};

struct RequestState {
  int64_t prompt_len = 0, output_len = 0, arrival_step = 0;
  int64_t row = -1;               // request row while admitted
  int64_t prefilled = 0;          // prompt tokens stored
  int64_t kv_len = 0;             // positions with a stored latent
  int64_t reserved_pages = 0;
  std::vector<int32_t> pages;
  std::vector<int32_t> output;    // generated tokens
  int64_t admitted_step = -1, finished_step = -1;
  bool waited = false;            // held back at least once by memory or max_running_requests
  bool pool_held = false;         // held back at least once because the pool lacked the pages
  bool finished() const { return finished_step >= 0; }
};

class Scheduler {
 public:
  // Fails (bad input) when a request can never fit: more tokens than the pool or the context.
  static Result<Scheduler> create(const SchedulerConfig& cfg, const Workload& w);

  bool done() const { return finished_ == static_cast<int64_t>(reqs_.size()); }
  // Plans the next step and takes the pages its rows write. Call only while !done().
  StepPlan next();
  // Records the tokens a step produced: tokens[i] for the i-th request that yields a token (the
  // prefill segments that complete, in order; every decode row, in order). Finished requests give
  // back their pages and rows.
  void finish(const StepPlan& plan, const std::vector<int32_t>& tokens);

  const std::vector<RequestState>& requests() const { return reqs_; }
  const SchedulerConfig& config() const { return cfg_; }
  int64_t tokens_used() const { return tokens_used_; }    // positions stored in the pool
  int64_t pages_used() const { return pages_used_; }
  int64_t reserved_pages() const { return reserved_; }
  int64_t running() const { return running_; }            // requests holding a row
  int64_t waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t pool_pages() const { return cfg_.pool_tokens / cfg_.page_size; }
  int64_t waited_requests() const;                        // requests held back at least once
  int64_t pool_held_requests() const;                     // of them, by the pool's pages

 private:
  explicit Scheduler(const SchedulerConfig& cfg) : cfg_(cfg) {}
  int64_t pages_for(int64_t tokens) const { return (tokens + cfg_.page_size - 1) / cfg_.page_size; }
  int32_t slot_for(RequestState& r, int64_t pos);
  void release(int64_t i, int64_t step);

  SchedulerConfig cfg_;
  std::vector<RequestState> reqs_;
  std::vector<int64_t> arrivals_;     // request indices by (arrival step, index)
  size_t next_arrival_ = 0;
  std::deque<int64_t> waiting_;
  std::vector<int64_t> decoding_;     // admitted, prompt done, not finished (admission order)
  int64_t chunked_ = -1;              // the request whose prompt is being chunked
  // Free pages in the order they are taken: those never used (next_fresh_ up to pool_pages()), then
  // the ones released, oldest first. Memory in proportion to the pages released, not the pool.
  int64_t next_fresh_ = 1;
  std::deque<int32_t> free_pages_;
  std::deque<int64_t> free_rows_;
  int64_t step_ = 0, finished_ = 0, running_ = 0;
  int64_t tokens_used_ = 0, pages_used_ = 0, reserved_ = 0;
};

}  // namespace moeprof
