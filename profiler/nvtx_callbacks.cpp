// NVTX callbacks (CUPTI_CB_DOMAIN_NVTX): each thread's stack of pushed ranges, read by the
// allocation API callbacks to scope an allocation (api_callbacks.cpp), and the strings registered
// with nvtxDomainRegisterStringA/W. NVTX reaches CUPTI only through an NVTX injection
// (nvtx_static_injection.cpp, or NVTX_INJECTION64_PATH=libmoeprof_inject.so).
#include <cstddef>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include <generated_nvtx_meta.h>  // NVTX callback parameter structs (includes nvtx3 headers)

#include "profiler/tracer_state.h"

namespace moeprof::profiler::detail {
namespace {

// Strings registered with nvtxDomainRegisterStringA/W, by handle.
std::mutex& registered_mu() {
  static auto* m = new std::mutex;
  return *m;
}
std::unordered_map<const void*, std::string>& registered_strings() {
  static auto* m = new std::unordered_map<const void*, std::string>;
  return *m;
}

std::string narrow(const wchar_t* w) {
  std::string s;
  if (w == nullptr) return s;
  for (; *w != 0 && s.size() < 4096; ++w) s += (*w > 0 && *w < 128) ? static_cast<char>(*w) : '?';
  return s;
}

std::string message_of(const nvtxEventAttributes_t* a) {
  if (a == nullptr) return {};
  switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII:
      return a->message.ascii != nullptr ? std::string(a->message.ascii) : std::string();
    case NVTX_MESSAGE_TYPE_UNICODE:
      return narrow(a->message.unicode);
    case NVTX_MESSAGE_TYPE_REGISTERED: {
      std::lock_guard<std::mutex> lock(registered_mu());
      auto it = registered_strings().find(static_cast<const void*>(a->message.registered));
      return it != registered_strings().end() ? it->second : std::string();
    }
    default:
      return {};
  }
}

void push_range(ThreadState& ts, std::string text, const void* domain) {
  if (ts.stack.size() >= kMaxRangeDepth) {
    ++ts.overflow;
    return;
  }
  ts.stack.push_back(RangeEntry{std::move(text), domain});
  ts.cache_valid = false;
}

void pop_range(ThreadState& ts, const void* domain) {
  if (ts.overflow > 0) {
    --ts.overflow;
    return;
  }
  for (size_t i = ts.stack.size(); i > 0; --i) {
    if (ts.stack[i - 1].domain == domain) {
      ts.stack.erase(ts.stack.begin() + static_cast<std::ptrdiff_t>(i - 1));
      ts.cache_valid = false;
      return;
    }
  }
}

// The NVTX callbacks handle_nvtx decodes: enabled together, so the two cannot differ.
constexpr CUpti_CallbackId kNvtxCbids[] = {
    CUPTI_CBID_NVTX_nvtxRangePushA,          CUPTI_CBID_NVTX_nvtxRangePushW,
    CUPTI_CBID_NVTX_nvtxRangePushEx,         CUPTI_CBID_NVTX_nvtxRangePop,
    CUPTI_CBID_NVTX_nvtxDomainRangePushEx,   CUPTI_CBID_NVTX_nvtxDomainRangePop,
    CUPTI_CBID_NVTX_nvtxDomainRegisterStringA, CUPTI_CBID_NVTX_nvtxDomainRegisterStringW,
};

}  // namespace

void handle_nvtx(ThreadState& ts, CUpti_CallbackId cbid, const CUpti_NvtxData* d) {
  if (d == nullptr) return;
  const void* params = d->functionParams;
  switch (cbid) {
    case CUPTI_CBID_NVTX_nvtxRangePushA: {
      auto* p = static_cast<const nvtxRangePushA_params*>(params);
      push_range(ts, p != nullptr && p->message != nullptr ? p->message : "", nullptr);
      break;
    }
    case CUPTI_CBID_NVTX_nvtxRangePushW: {
      auto* p = static_cast<const nvtxRangePushW_params*>(params);
      push_range(ts, p != nullptr ? narrow(p->message) : std::string(), nullptr);
      break;
    }
    case CUPTI_CBID_NVTX_nvtxRangePushEx: {
      auto* p = static_cast<const nvtxRangePushEx_params*>(params);
      push_range(ts, p != nullptr ? message_of(p->eventAttrib) : std::string(), nullptr);
      break;
    }
    case CUPTI_CBID_NVTX_nvtxRangePop:
      pop_range(ts, nullptr);
      break;
    case CUPTI_CBID_NVTX_nvtxDomainRangePushEx: {
      auto* p = static_cast<const nvtxDomainRangePushEx_params*>(params);
      if (p != nullptr) push_range(ts, message_of(p->core.eventAttrib), static_cast<const void*>(p->domain));
      break;
    }
    case CUPTI_CBID_NVTX_nvtxDomainRangePop: {
      auto* p = static_cast<const nvtxDomainRangePop_params*>(params);
      if (p != nullptr) pop_range(ts, static_cast<const void*>(p->domain));
      break;
    }
    case CUPTI_CBID_NVTX_nvtxDomainRegisterStringA:
    case CUPTI_CBID_NVTX_nvtxDomainRegisterStringW: {
      if (d->functionReturnValue == nullptr || params == nullptr) break;
      auto handle = *static_cast<const nvtxStringHandle_t*>(d->functionReturnValue);
      if (handle == nullptr) break;
      std::string text;
      if (cbid == CUPTI_CBID_NVTX_nvtxDomainRegisterStringA) {
        auto* p = static_cast<const nvtxDomainRegisterStringA_params*>(params);
        if (p->string != nullptr) text = p->string;
      } else {
        auto* p = static_cast<const nvtxDomainRegisterStringW_params*>(params);
        text = narrow(reinterpret_cast<const wchar_t*>(p->string));
      }
      std::lock_guard<std::mutex> lock(registered_mu());
      registered_strings()[static_cast<const void*>(handle)] = std::move(text);
      break;
    }
    default:
      break;
  }
}

void enable_nvtx_callbacks(CUpti_SubscriberHandle subscriber, std::map<std::string, std::string>& extra) {
  for (CUpti_CallbackId cbid : kNvtxCbids) {
    CUptiResult r = cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_NVTX, cbid);
    if (r != CUPTI_SUCCESS) extra["tracer.nvtx"] = "NVTX callbacks unavailable: " + cupti_error_string(r);
  }
}

}  // namespace moeprof::profiler::detail
