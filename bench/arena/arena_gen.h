// Generated arena-planning instances that look like real programs' buffers (bench_arena).
//
// A program is a graph of ops over tensors: a forward pass built from a model family, its
// backward pass derived op by op (gradients of every input, accumulation where a tensor has
// several consumers, weight gradients that live until the optimizer step), recomputation of
// checkpointed ops, several microbatches and training steps. The ops are then scheduled and every
// tensor becomes a buffer live from its producer to its last consumer:
//   - "framework" instances are eager allocation logs: program order, one time unit per
//     allocation or free, sizes rounded to 512 B (a caching allocator's block);
//   - "compiler" instances are tensor schedules: a list scheduler that reorders ready ops, one
//     time unit per op (many buffers share a start or an end), sizes rounded to 64 B.
// Every instance is one connected component (the next step's input batch is loaded before the
// current step ends) and mixes long lifetimes (saved activations, weight gradients, skip
// connections) with short ones (temporaries, workspaces, recomputed tensors), with sizes over
// several orders of magnitude. Everything is a deterministic function of the seed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/arena.h"

namespace moeprof::bench {

enum class Family : uint8_t {
  kGpt,       // decoder transformer: attention + gated MLP, activation checkpointing every k layers
  kMoe,       // transformer with routed experts, one op per expert (sizes follow the routing)
  kUnet,      // convolutional U-Net: levels of halving size, long skip connections
  kDenseNet,  // dense blocks: every layer reads every earlier layer's output of its block
};

enum class TimeModel : uint8_t { kFramework, kCompiler };

struct GenSpec {
  Family family = Family::kGpt;
  TimeModel time = TimeModel::kFramework;
  size_t target_buffers = 10000;  // whole training steps are generated until at least this many
  uint64_t seed = 1;
};

std::vector<planner::Buffer> generate_program(const GenSpec& spec);

// "gpt", "moe", "unet", "densenet" (nullptr-free: empty for an unknown family).
std::string family_name(Family f);

}  // namespace moeprof::bench
