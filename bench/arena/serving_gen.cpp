// Generated serving instances (serving_gen.h).
#include "serving_gen.h"

#include <array>
#include <random>

namespace moeprof::bench {

using planner::Buffer;

namespace {

// Forward steps of a serving engine, back to back, each with its own token count T (1k..16k).
// A step runs 61 layers of the executor's DeepSeek-V3/Kimi-K2.5 layer (baseline mode, TP=4
// rank shapes): the allocations and frees below are the order `moeprof run` records on
// Kimi-K2.5, with sizes in bytes per token (or per padded MoE row, P = 8T + 384 * 63). Every
// buffer of a step is freed when it ends, so steps are independent components. With `overlap`
// (two-batch overlap), a step's tokens are split in two microbatches whose events alternate.
// Time = event index.
struct LayerEvent {
  bool alloc;
  int tensor;     // index into kTensors
  int layer_back;  // frees: 0 = this layer's tensor, 1 = the previous layer's
};
struct TensorSpec {
  uint64_t per_token, per_row, fixed;  // bytes = per_token * T + per_row * P + fixed
};
enum : int { kPostNorm, kQkvA, kQaNormed, kQ, kKvaNormed, kKv, kK, kAttnOut, kOProj, kGateUp, kAct, kShared, kLogits,
             kTopkIds, kTopkW, kMoeOut, kHsFp4, kHsScales, kOffsets, kPermToTok, kExpToPerm, kG1, kG1Scales, kG2, kNumTensors };
constexpr TensorSpec kTensors[kNumTensors] = {
    {14336, 0, 0}, {4224, 0, 0}, {3072, 0, 0}, {6144, 0, 0},  {1024, 0, 0},  {8192, 0, 0}, {6144, 0, 0},    {4096, 0, 0},
    {14336, 0, 0}, {2048, 0, 0}, {1024, 0, 0}, {14336, 0, 0}, {1536, 0, 0},  {32, 0, 0},   {32, 0, 0},      {14336, 0, 0},
    {3584, 0, 0},  {448, 0, 0},  {0, 0, 1540}, {0, 4, 0},     {32, 0, 0},    {0, 256, 0},  {0, 32, 0},      {0, 14336, 0}};
constexpr LayerEvent kLayer[] = {
    {true, kPostNorm, 0},   {false, kQkvA, 1},      {false, kPostNorm, 1},  {true, kQkvA, 0},       {true, kQaNormed, 0},
    {true, kQ, 0},          {false, kQaNormed, 0},  {true, kKvaNormed, 0},  {true, kKv, 0},         {false, kKvaNormed, 0},
    {true, kK, 0},          {true, kAttnOut, 0},    {false, kQ, 0},         {false, kK, 0},         {false, kKv, 0},
    {true, kOProj, 0},      {false, kAttnOut, 0},   {true, kGateUp, 0},     {true, kAct, 0},        {false, kGateUp, 0},
    {true, kShared, 0},     {false, kAct, 0},       {true, kLogits, 0},     {true, kTopkIds, 0},    {true, kTopkW, 0},
    {true, kMoeOut, 0},     {true, kHsFp4, 0},      {true, kHsScales, 0},   {true, kOffsets, 0},    {true, kPermToTok, 0},
    {true, kExpToPerm, 0},  {true, kG1, 0},         {true, kG1Scales, 0},   {true, kG2, 0},         {false, kG2, 0},
    {false, kG1Scales, 0},  {false, kG1, 0},        {false, kExpToPerm, 0}, {false, kPermToTok, 0}, {false, kOffsets, 0},
    {false, kHsScales, 0},  {false, kHsFp4, 0},     {false, kTopkW, 0},     {false, kTopkIds, 0},   {false, kLogits, 0},
    {false, kShared, 0},    {false, kOProj, 0},     {false, kMoeOut, 1}};

// Pipelined steps: a new step (its own token count) starts every half forward, so two steps of
// different sizes are always in flight, one op each in turn: one component for the whole run.
}  // namespace

std::vector<Buffer> generate_pipelined(size_t target, uint64_t seed) {
  constexpr int kLayers = 61;
  constexpr int kEvents = static_cast<int>(sizeof(kLayer) / sizeof(kLayer[0]));
  std::mt19937_64 rng(seed);
  std::vector<Buffer> out;
  uint64_t now = 0;
  struct Step {
    uint64_t tokens = 0;
    int pos = 0;  // next event: layer * kEvents + event
    std::array<std::array<size_t, kNumTensors>, 2> live{};
    std::vector<size_t> mine;
  };
  auto fresh = [&]() {
    Step s;
    s.tokens = 64 * (16 + rng() % 241);
    return s;
  };
  Step steps[2] = {fresh(), fresh()};
  steps[1].pos = -kLayers / 2 * kEvents;  // starts half a forward later
  for (size_t turn = 0; out.size() < target; ++turn) {
    Step& s = steps[turn % 2];
    if (s.pos < 0) {
      ++s.pos;
      continue;
    }
    const int layer = s.pos / kEvents;
    const LayerEvent& e = kLayer[s.pos % kEvents];
    if (e.alloc) {
      const TensorSpec& t = kTensors[e.tensor];
      const uint64_t P = 8 * s.tokens + 384 * 63;
      Buffer b;
      b.id = out.size();
      b.size = t.per_token * s.tokens + t.per_row * P + t.fixed;
      b.lower = now++;
      b.upper = UINT64_MAX;
      s.live[static_cast<size_t>(layer % 2)][static_cast<size_t>(e.tensor)] = out.size();
      s.mine.push_back(out.size());
      out.push_back(b);
    } else if (layer >= e.layer_back) {
      out[s.live[static_cast<size_t>((layer - e.layer_back) % 2)][static_cast<size_t>(e.tensor)]].upper = now++;
    }
    if (++s.pos == kLayers * kEvents) {
      for (size_t i : s.mine)
        if (out[i].upper == UINT64_MAX) out[i].upper = now++;
      s = fresh();
    }
  }
  for (Buffer& b : out)
    if (b.upper == UINT64_MAX) b.upper = now++;
  return out;
}

std::vector<Buffer> generate_forward(size_t target, uint64_t seed, bool overlap, uint64_t fixed_tokens) {
  constexpr int kLayers = 61;
  std::mt19937_64 rng(seed);
  std::vector<Buffer> out;
  uint64_t now = 0;
  while (out.size() < target) {
    const uint64_t tokens = fixed_tokens != 0 ? fixed_tokens : 64 * (16 + rng() % 241);
    const int streams = overlap ? 2 : 1;
    const uint64_t mb_tokens[2] = {overlap ? tokens / 128 * 64 : tokens, overlap ? tokens - tokens / 128 * 64 : 0};
    // live[m][layer % 2][tensor]: buffer index of microbatch m's tensor, this and the previous layer.
    std::vector<std::array<std::array<size_t, kNumTensors>, 2>> live(static_cast<size_t>(streams));
    std::vector<size_t> pending;  // buffers still live at the end of the step
    for (int layer = 0; layer < kLayers; ++layer) {
      for (const LayerEvent& e : kLayer) {
        for (int m = 0; m < streams; ++m) {
          auto& mine = live[static_cast<size_t>(m)];
          if (e.alloc) {
            const TensorSpec& t = kTensors[e.tensor];
            const uint64_t T = mb_tokens[m], P = 8 * T + 384 * 63;
            Buffer b;
            b.id = out.size();
            b.size = t.per_token * T + t.per_row * P + t.fixed;
            b.lower = now++;
            b.upper = UINT64_MAX;
            mine[static_cast<size_t>(layer % 2)][static_cast<size_t>(e.tensor)] = out.size();
            out.push_back(b);
          } else if (layer >= e.layer_back) {
            Buffer& b = out[mine[static_cast<size_t>((layer - e.layer_back) % 2)][static_cast<size_t>(e.tensor)]];
            b.upper = now++;
          }
        }
      }
    }
    for (Buffer& b : out)
      if (b.upper == UINT64_MAX) b.upper = now++;
  }
  return out;
}

}  // namespace moeprof::bench
