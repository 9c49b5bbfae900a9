// Generated program-like arena instances (arena_gen.h).
#include "arena_gen.h"

#include <algorithm>
#include <map>
#include <random>
#include <set>

namespace moeprof::bench {

namespace {

struct Tensor {
  uint64_t bytes = 0;
  int producer = -1;
  std::vector<int> consumers;
  bool needs_grad = true;
};

struct Op {
  std::vector<int> in, out;
  uint64_t workspace = 0;      // a temporary live only during the op
  std::vector<int> saved;      // tensors its backward reads (among in and out)
  std::vector<uint64_t> weights;  // bytes of each weight: one gradient each
  bool remat = false;          // the backward recomputes its outputs instead of keeping them
};

class Program {
 public:
  Program(uint64_t seed, TimeModel time) : rng_(seed), time_(time) {}

  std::mt19937_64& rng() { return rng_; }
  uint64_t uniform(uint64_t lo, uint64_t hi) { return lo + rng_() % (hi - lo + 1); }  // [lo, hi]
  bool chance(double p) { return static_cast<double>(rng_() >> 11) * 0x1.0p-53 < p; }

  int tensor(uint64_t bytes, bool needs_grad = true) {
    Tensor t;
    t.bytes = std::max<uint64_t>(bytes, 1);
    t.needs_grad = needs_grad;
    tensors_.push_back(t);
    return static_cast<int>(tensors_.size() - 1);
  }
  uint64_t bytes(int t) const { return tensors_[static_cast<size_t>(t)].bytes; }

  // Records an op (forward ops also go on the tape, for the backward).
  int op(std::vector<int> in, std::vector<int> out, uint64_t workspace = 0, std::vector<int> saved = {},
         std::vector<uint64_t> weights = {}, bool remat = false) {
    Op o;
    o.in = std::move(in);
    o.out = std::move(out);
    o.workspace = workspace;
    o.saved = std::move(saved);
    o.weights = std::move(weights);
    o.remat = remat;
    const int id = static_cast<int>(ops_.size());
    for (int t : o.in) tensors_[static_cast<size_t>(t)].consumers.push_back(id);
    for (int t : o.out) tensors_[static_cast<size_t>(t)].producer = id;
    ops_.push_back(std::move(o));
    if (recording_) tape_.push_back(id);
    return id;
  }
  // Shorthand: one new output of `bytes`.
  int unary(std::vector<int> in, uint64_t out_bytes, uint64_t workspace, std::vector<int> saved,
            std::vector<uint64_t> weights = {}, bool remat = false) {
    const int y = tensor(out_bytes);
    op(std::move(in), {y}, workspace, std::move(saved), std::move(weights), remat);
    return y;
  }
  // An input batch of `bytes`; the first one after a prefetch() reads the prefetched buffer.
  int load(uint64_t bytes) {
    const int t = tensor(bytes, false);
    op(carry_ >= 0 ? std::vector<int>{carry_} : std::vector<int>{}, {t});
    carry_ = -1;
    return t;
  }
  void prefetch(uint64_t bytes) {
    carry_ = tensor(bytes, false);
    op({}, {carry_});
  }

  void begin_forward() {
    tape_.clear();
    recording_ = true;
  }
  // The backward of the recorded forward, from a loss tensor. Weight gradients of the first
  // microbatch are kept until the optimizer; later microbatches add theirs into them.
  void backward(int loss, bool first_microbatch);
  // Optimizer step over every kept weight gradient, then they are freed.
  void optimizer_step();

  std::vector<planner::Buffer> buffers();
  size_t tensor_count() const { return tensors_.size(); }

 private:
  int accumulate(const std::vector<int>& parts) {
    if (parts.size() == 1) return parts[0];
    const int g = tensor(bytes(parts[0]));
    op(parts, {g});
    return g;
  }
  int materialize(int t, std::map<int, int>* copies);

  std::mt19937_64 rng_;
  TimeModel time_;
  std::vector<Tensor> tensors_;
  std::vector<Op> ops_;
  std::vector<int> tape_;
  bool recording_ = false;
  std::vector<int> weight_grads_;  // kept gradients, in creation order
  int carry_ = -1;                  // a prefetched batch not yet read
};

int Program::materialize(int t, std::map<int, int>* copies) {
  const int p = tensors_[static_cast<size_t>(t)].producer;
  if (p < 0 || !ops_[static_cast<size_t>(p)].remat) return t;
  if (auto it = copies->find(t); it != copies->end()) return it->second;
  const Op src = ops_[static_cast<size_t>(p)];  // copy: ops_ grows below
  std::vector<int> in;
  for (int x : src.in) in.push_back(materialize(x, copies));
  std::vector<int> out;
  for (int y : src.out) {
    out.push_back(tensor(bytes(y)));
    (*copies)[y] = out.back();
  }
  op(in, out, src.workspace);
  return (*copies)[t];
}

void Program::backward(int loss, bool first_microbatch) {
  recording_ = false;
  std::map<int, std::vector<int>> grads;
  std::map<int, int> copies;  // recomputed tensors of this backward
  grads[loss].push_back(tensor(bytes(loss)));
  op({loss}, {grads[loss].back()});
  size_t wg = 0;  // index into weight_grads_ for later microbatches
  for (size_t k = tape_.size(); k-- > 0;) {
    const Op f = ops_[static_cast<size_t>(tape_[k])];
    std::vector<int> in;
    for (int o : f.out)
      if (auto it = grads.find(o); it != grads.end()) {
        in.push_back(accumulate(it->second));
        grads.erase(it);
      }
    if (in.empty()) continue;
    for (int s : f.saved) in.push_back(materialize(s, &copies));
    std::vector<int> out;
    for (int x : f.in)
      if (tensors_[static_cast<size_t>(x)].needs_grad) {
        out.push_back(tensor(bytes(x)));
        grads[x].push_back(out.back());
      }
    std::vector<int> dws;
    for (uint64_t w : f.weights) {
      dws.push_back(tensor(w));
      out.push_back(dws.back());
    }
    op(in, out, f.workspace);
    for (int dw : dws) {
      if (first_microbatch) {
        weight_grads_.push_back(dw);
      } else if (wg < weight_grads_.size()) {
        op({dw, weight_grads_[wg++]}, {});  // in-place add into the kept gradient
      }
    }
  }
}

void Program::optimizer_step() {
  // Multi-tensor Adam over groups of up to 8 parameters: one temporary per parameter.
  for (size_t g = 0; g < weight_grads_.size(); g += 8) {
    std::vector<int> in(weight_grads_.begin() + static_cast<std::ptrdiff_t>(g),
                        weight_grads_.begin() + static_cast<std::ptrdiff_t>(std::min(g + 8, weight_grads_.size())));
    std::vector<int> tmp;
    for (int dw : in) tmp.push_back(tensor(bytes(dw)));
    op(in, tmp);
    op(tmp, {});
  }
  weight_grads_.clear();
}

std::vector<planner::Buffer> Program::buffers() {
  // Schedule: eager programs run in program order; a compiler's list scheduler picks among the
  // ready ops, mostly the earliest in program order.
  const size_t n_ops = ops_.size();
  std::vector<int> order;
  order.reserve(n_ops);
  if (time_ == TimeModel::kFramework) {
    for (size_t i = 0; i < n_ops; ++i) order.push_back(static_cast<int>(i));
  } else {
    std::vector<int> missing(n_ops, 0);
    for (size_t i = 0; i < n_ops; ++i)
      for (int t : ops_[i].in)
        if (tensors_[static_cast<size_t>(t)].producer >= 0) ++missing[i];
    std::set<int> ready;
    for (size_t i = 0; i < n_ops; ++i)
      if (missing[i] == 0) ready.insert(static_cast<int>(i));
    while (!ready.empty()) {
      auto it = ready.begin();
      if (chance(0.35))
        for (uint64_t skip = uniform(1, 6); skip > 0 && std::next(it) != ready.end(); --skip) ++it;
      const int o = *it;
      ready.erase(it);
      order.push_back(o);
      for (int t : ops_[static_cast<size_t>(o)].out)
        for (int c : tensors_[static_cast<size_t>(t)].consumers)
          if (--missing[static_cast<size_t>(c)] == 0) ready.insert(c);
    }
  }
  std::vector<size_t> step(n_ops);
  for (size_t s = 0; s < order.size(); ++s) step[static_cast<size_t>(order[s])] = s;
  const uint64_t round = time_ == TimeModel::kFramework ? 512 : 64;
  auto rounded = [&](uint64_t b) { return (b + round - 1) / round * round; };

  std::vector<planner::Buffer> out;
  std::vector<size_t> last(tensors_.size(), 0);
  for (size_t t = 0; t < tensors_.size(); ++t) {
    last[t] = step[static_cast<size_t>(tensors_[t].producer)];
    for (int c : tensors_[t].consumers) last[t] = std::max(last[t], step[static_cast<size_t>(c)]);
  }
  if (time_ == TimeModel::kCompiler) {
    for (size_t t = 0; t < tensors_.size(); ++t) {
      const uint64_t lo = step[static_cast<size_t>(tensors_[t].producer)];
      out.push_back({out.size(), rounded(tensors_[t].bytes), lo, last[t] + 1, 1});
    }
    for (size_t i = 0; i < n_ops; ++i)
      if (ops_[i].workspace > 0) out.push_back({out.size(), rounded(ops_[i].workspace), step[i], step[i] + 1, 1});
    return out;
  }
  // Allocation log: per op, its outputs and workspace are allocated, then the workspace and
  // every tensor read for the last time (or never read) are freed. One time unit per event.
  std::vector<std::vector<int>> dies(n_ops);
  for (size_t t = 0; t < tensors_.size(); ++t) dies[last[t]].push_back(static_cast<int>(t));
  std::vector<size_t> index(tensors_.size());
  uint64_t now = 0;
  for (int o : order) {
    const Op& op = ops_[static_cast<size_t>(o)];
    for (int t : op.out) {
      index[static_cast<size_t>(t)] = out.size();
      out.push_back({out.size(), rounded(bytes(t)), now++, 0, 1});
    }
    if (op.workspace > 0) {
      out.push_back({out.size(), rounded(op.workspace), now, now + 1, 1});
      now += 2;
    }
    for (int t : dies[static_cast<size_t>(o)]) out[index[static_cast<size_t>(t)]].upper = now++;
  }
  return out;
}

// ---- model families ----------------------------------------------------------------------

uint64_t jitter(Program& p, uint64_t v, int pct) {  // v +- pct%
  const uint64_t span = v * static_cast<uint64_t>(pct) / 100;
  return span == 0 ? v : v - span + p.rng()() % (2 * span + 1);
}

struct GptShape {
  uint64_t hidden, ffn, heads, kv_hidden, vocab, layers, experts, expert_ffn, topk;
  uint64_t checkpoint_every;  // 0: none
  uint64_t tokens_lo, tokens_hi, microbatches;
};

GptShape gpt_shape(Program& p, bool moe) {
  GptShape s{};
  const uint64_t hs[] = {1024, 1536, 2048, 2560, 3072, 4096, 5120};
  s.hidden = hs[p.uniform(0, 6)];
  s.heads = s.hidden / 128;
  s.kv_hidden = p.chance(0.5) ? s.hidden : s.hidden / 4;
  s.ffn = s.hidden * 8 / 3 / 64 * 64;
  s.vocab = p.chance(0.5) ? 32000 : 50304 + 64 * p.uniform(0, 200);
  s.layers = moe ? p.uniform(12, 32) : p.uniform(16, 48);
  s.experts = moe ? uint64_t{8} << p.uniform(0, 2) : 0;
  s.expert_ffn = s.hidden / 2 + 64 * p.uniform(0, 8);
  s.topk = moe ? p.uniform(1, 2) : 0;
  const uint64_t ck[] = {0, 1, 2, 4};
  s.checkpoint_every = ck[p.uniform(0, 3)];
  s.tokens_lo = 256 * p.uniform(1, 4);
  s.tokens_hi = s.tokens_lo * p.uniform(2, 6);
  s.microbatches = p.uniform(2, 6);
  return s;
}

// One microbatch's forward; returns the loss.
int gpt_forward(Program& p, const GptShape& s, bool moe, uint64_t T) {
  const uint64_t H = s.hidden, bf = 2;
  const int ids = p.load(T * 4);
  p.begin_forward();
  int x = p.unary({ids}, T * H * bf, 0, {ids}, {s.vocab * H * bf});
  for (uint64_t l = 0; l < s.layers; ++l) {
    const bool ck = s.checkpoint_every != 0 && l % s.checkpoint_every == 0;
    const uint64_t mm_ws = (uint64_t{4} << 20) + jitter(p, T * H / 8, 30);
    const int h = p.tensor(T * H * bf), st = p.tensor(T * 4);
    p.op({x}, {h, st}, 0, {x, st}, {H * bf}, ck);
    const int qkv = p.unary({h}, T * (H + 2 * s.kv_hidden) * bf, mm_ws, {h}, {(H + 2 * s.kv_hidden) * H * bf}, ck);
    const int q = p.tensor(T * H * bf), k = p.tensor(T * s.kv_hidden * bf);
    p.op({qkv}, {q, k}, 0, {}, {}, ck);
    const int o = p.tensor(T * H * bf), lse = p.tensor(s.heads * T * 4);
    p.op({q, k, qkv}, {o, lse}, jitter(p, s.heads * T * 16, 20), {q, k, qkv, o, lse}, {}, ck);
    const int a = p.unary({o}, T * H * bf, mm_ws, {o}, {H * H * bf}, ck);
    const int x1 = p.unary({x, a}, T * H * bf, 0, {}, {}, ck);
    const int h2 = p.tensor(T * H * bf), st2 = p.tensor(T * 4);
    p.op({x1}, {h2, st2}, 0, {x1, st2}, {H * bf}, ck);
    int d;
    if (!moe) {
      const int u = p.unary({h2}, T * 2 * s.ffn * bf, mm_ws, {h2}, {2 * s.ffn * H * bf}, ck);
      const int g = p.unary({u}, T * s.ffn * bf, 0, {u}, {}, ck);
      d = p.unary({g}, T * H * bf, mm_ws, {g}, {s.ffn * H * bf}, ck);
    } else {
      const int logits = p.unary({h2}, T * s.experts * 4, 0, {h2}, {s.experts * H * bf}, ck);
      const int route = p.tensor(T * s.topk * 8, false);
      p.op({logits}, {route}, 0, {}, {}, ck);
      // Skewed routing: expert e gets a share proportional to a random weight.
      std::vector<uint64_t> w(s.experts);
      uint64_t wsum = 0;
      for (auto& v : w) wsum += v = 1 + p.rng()() % 100;
      std::vector<int> parts;
      for (uint64_t e = 0; e < s.experts; ++e) {
        const uint64_t n = std::max<uint64_t>(1, T * s.topk * w[e] / wsum);
        const int xe = p.unary({h2, route}, n * H * bf, 0, {route}, {}, ck);
        const int ue = p.unary({xe}, n * 2 * s.expert_ffn * bf, mm_ws / 4, {xe}, {2 * s.expert_ffn * H * bf}, ck);
        const int ge = p.unary({ue}, n * s.expert_ffn * bf, 0, {ue}, {}, ck);
        parts.push_back(p.unary({ge}, n * H * bf, mm_ws / 4, {ge}, {s.expert_ffn * H * bf}, ck));
      }
      parts.push_back(route);
      d = p.unary(parts, T * H * bf, 0, {route}, {}, ck);
    }
    x = p.unary({x1, d}, T * H * bf, 0, {});  // the layer output: never recomputed
  }
  const int hf = p.tensor(T * H * bf), stf = p.tensor(T * 4);
  p.op({x}, {hf, stf}, 0, {x, stf}, {H * bf});
  const int logits = p.unary({hf}, T * s.vocab * bf, (uint64_t{8} << 20), {hf}, {s.vocab * H * bf});
  return p.unary({logits, ids}, 4, T * s.vocab / 2, {logits, ids});  // chunked cross-entropy
}

struct ConvShape {
  uint64_t batch, res, base, levels;
  uint64_t dense_layers, growth;  // densenet
  double remat;                   // share of bn/relu ops recomputed in the backward
  uint64_t microbatches;
};

// conv -> bn -> relu at `bytes` output, weights cin x cout x 3 x 3.
int conv_block(Program& p, const ConvShape& s, int x, uint64_t bytes, uint64_t cin, uint64_t cout) {
  const int c = p.unary({x}, bytes, jitter(p, bytes / 4 + (uint64_t{1} << 20), 40), {x}, {cin * cout * 9 * 2});
  const bool rm = p.chance(s.remat);
  const int b = p.tensor(bytes), st = p.tensor(cout * 8);
  p.op({c}, {b, st}, 0, {c, st}, {cout * 4}, rm);
  const int r = p.tensor(bytes);
  p.op({b}, {r}, 0, {r}, {}, rm);  // relu: its backward reads its output
  return r;
}

int unet_forward(Program& p, const ConvShape& s, uint64_t B) {
  auto bytes_at = [&](uint64_t d) { return B * (s.res >> d) * (s.res >> d) * (s.base << d) * 2; };
  const int img = p.load(B * s.res * s.res * 3 * 2);
  p.begin_forward();
  int x = conv_block(p, s, img, bytes_at(0), 3, s.base);
  std::vector<int> skips;
  for (uint64_t d = 0; d < s.levels; ++d) {
    x = conv_block(p, s, x, bytes_at(d), s.base << d, s.base << d);
    skips.push_back(x);
    if (d + 1 < s.levels) {
      x = p.unary({x}, bytes_at(d) / 4, 0, {x});  // max pool
      x = conv_block(p, s, x, bytes_at(d + 1), s.base << d, s.base << (d + 1));
    }
  }
  for (uint64_t d = s.levels - 1; d-- > 0;) {
    const int up = p.unary({x}, bytes_at(d), bytes_at(d) / 8, {x}, {(s.base << (d + 1)) * (s.base << d) * 4 * 2});
    const int cat = p.unary({up, skips[d]}, 2 * bytes_at(d), 0, {});
    x = conv_block(p, s, cat, bytes_at(d), s.base << (d + 1), s.base << d);
    x = conv_block(p, s, x, bytes_at(d), s.base << d, s.base << d);
  }
  const int logits = p.unary({x}, B * s.res * s.res * 4 * 4, 0, {x}, {s.base * 4 * 2});
  return p.unary({logits, img}, 4, B * s.res * s.res * 8, {logits, img});
}

int densenet_forward(Program& p, const ConvShape& s, uint64_t B) {
  uint64_t res = s.res, ch = 2 * s.growth;
  auto fm = [&](uint64_t c) { return B * res * res * c * 2; };
  const int img = p.load(B * res * res * 3 * 2);
  p.begin_forward();
  int x = conv_block(p, s, img, fm(ch), 3, ch);
  for (uint64_t blk = 0; blk < s.levels; ++blk) {
    std::vector<int> feats = {x};
    for (uint64_t l = 0; l < s.dense_layers; ++l) {
      const int cat = p.unary(feats, fm(ch), 0, {}, {}, p.chance(s.remat));  // concat of every earlier output
      const int b = conv_block(p, s, cat, fm(4 * s.growth), ch, 4 * s.growth);
      feats.push_back(conv_block(p, s, b, fm(s.growth), 4 * s.growth, s.growth));
      ch += s.growth;
    }
    x = p.unary(feats, fm(ch), 0, {});
    if (blk + 1 < s.levels) {
      x = conv_block(p, s, x, fm(ch / 2), ch, ch / 2);
      ch /= 2;
      res /= 2;
      x = p.unary({x}, fm(ch), 0, {x});  // average pool
    }
  }
  const int logits = p.unary({x}, B * 1000 * 4, 0, {x}, {ch * 1000 * 2});
  return p.unary({logits, img}, 4, B * 1000 * 8, {logits, img});
}

}  // namespace

std::string family_name(Family f) {
  switch (f) {
    case Family::kGpt: return "gpt";
    case Family::kMoe: return "moe";
    case Family::kUnet: return "unet";
    case Family::kDenseNet: return "densenet";
  }
  return "";
}

std::vector<planner::Buffer> generate_program(const GenSpec& spec) {
  Program p(spec.seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(spec.family) * 131 + static_cast<uint64_t>(spec.time),
            spec.time);
  const bool gpt = spec.family == Family::kGpt || spec.family == Family::kMoe;
  GptShape g{};
  ConvShape c{};
  if (gpt) {
    g = gpt_shape(p, spec.family == Family::kMoe);
  } else {
    c.batch = p.uniform(2, 16);
    c.res = uint64_t{64} << p.uniform(0, 2);
    c.base = uint64_t{16} << p.uniform(0, 2);
    c.levels = spec.family == Family::kUnet ? p.uniform(4, 5) : p.uniform(3, 4);
    c.dense_layers = p.uniform(6, 16);
    c.growth = 16 * p.uniform(1, 3);
    c.remat = 0.1 * static_cast<double>(p.uniform(0, 5));
    c.microbatches = p.uniform(1, 4);
  }
  // Training steps until the target; the next step's first batch is loaded before the
  // optimizer of the current one (so the whole run is one component).
  const uint64_t mbs = gpt ? g.microbatches : c.microbatches;
  while (p.tensor_count() < spec.target_buffers) {
    for (uint64_t m = 0; m < mbs && (m == 0 || p.tensor_count() < spec.target_buffers); ++m) {
      int loss;
      if (gpt) {
        const uint64_t T = p.uniform(g.tokens_lo / 64, g.tokens_hi / 64) * 64;
        loss = gpt_forward(p, g, spec.family == Family::kMoe, T);
      } else {
        const uint64_t B = std::max<uint64_t>(1, jitter(p, c.batch, 50));
        loss = spec.family == Family::kUnet ? unet_forward(p, c, B) : densenet_forward(p, c, B);
      }
      p.backward(loss, m == 0);
    }
    p.prefetch(uint64_t{1} << 20);
    p.optimizer_step();
  }
  return p.buffers();
}

}  // namespace moeprof::bench
