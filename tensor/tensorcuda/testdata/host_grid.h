// host_grid.h: what the host runs of the op kernels share
// (TestOpKernelsOnHost): the grid variables, __syncthreads and
// __shfl_xor_sync, a loop over a grid's threads, a block's threads run
// together, random buffers at a chosen alignment and failure counting.
// Included by the *_host.cc harnesses after the kernel source (it uses op_t).
#pragma once
#include <barrier>
#include <cstdio>
#include <thread>
#include <cstdlib>
#include <random>
#include <vector>

thread_local dim3s threadIdx;
dim3s blockIdx, blockDim, gridDim;

// block_barrier is the barrier of the block block_together runs (none:
// __syncthreads does nothing, as in grid's one thread after another).
static std::barrier<> *block_barrier;
void __syncthreads() {
  if (block_barrier) block_barrier->arrive_and_wait();
}

// __shfl_xor_sync: in a block run together (block_together) each thread
// posts v and, after the block's barrier, reads the value of thread
// tid ^ lane_mask (in its warp for lane_mask < 32); the whole block must
// call it at once, as op_block_sum's callers do. Calls alternate between
// two sets of slots, so that one barrier a call keeps a slot from being
// written before it is read. Run one thread after another (grid), a thread
// gets its own v back: a sum over groups of one lane.
template <typename T> T __shfl_xor_sync(unsigned, T v, int lane_mask) {
  static T slots[2][1024];
  thread_local unsigned calls;
  if (!block_barrier) return v;
  T *s = slots[calls++ & 1];
  s[threadIdx.x] = v;
  block_barrier->arrive_and_wait();
  return s[threadIdx.x ^ lane_mask];
}

static int failures, checks;
static std::mt19937_64 rng(SEED);

#define FAIL(...)                                                                                  \
  do {                                                                                             \
    if (failures++ < 20) std::printf(__VA_ARGS__);                                                 \
  } while (0)

// block_together runs f on threads threads at once, as block (bx, by) of a
// grid of gx × gy blocks: a kernel's shared memory (static here),
// __syncthreads and the warps' shuffles work as on the device.
template <typename F> static void block_together(unsigned gx, unsigned gy, unsigned bx, unsigned by, unsigned threads, F f) {
  gridDim = {gx, gy, 1};
  blockDim = {threads, 1, 1};
  blockIdx = {bx, by, 0};
  std::barrier<> bar(threads);
  block_barrier = &bar;
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < threads; t++)
    ts.emplace_back([&, t] {
      threadIdx = {t, 0, 0};
      f();
    });
  for (auto &th : ts) th.join();
  block_barrier = nullptr;
}

// grid2d runs f for every thread of a grid of gx × gy blocks of threads
// threads, one thread after another (row by row of blocks).
template <typename F> static void grid2d(unsigned gx, unsigned gy, unsigned threads, F f) {
  gridDim = {gx, gy, 1};
  blockDim = {threads, 1, 1};
  for (unsigned by = 0; by < gy; by++)
    for (unsigned bx = 0; bx < gx; bx++)
      for (unsigned t = 0; t < threads; t++) {
        blockIdx = {bx, by, 0};
        threadIdx = {t, 0, 0};
        f();
      }
}

// grid runs f for every thread of a grid of blocks × threads.
template <typename F> static void grid(unsigned blocks, unsigned threads, F f) { grid2d(blocks, 1, threads, f); }

static op_t element(float f) {
  op_t e;
  op_put(&e, f);
  return e;
}

// buffer returns n random elements in an allocation that starts shift
// elements past a 16-byte boundary (storage is a 16-byte aligned vector).
struct buffer {
  std::vector<uint4> storage;
  op_t *p;
  buffer(long long n, int shift) : storage((n + shift) * sizeof(op_t) / 16 + 2) {
    p = (op_t *)storage.data() + shift;
    std::normal_distribution<float> nd;
    for (long long i = 0; i < n; i++) p[i] = element(nd(rng));
  }
};

static bool same(op_t a, op_t b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// finish prints the outcome ("ok N" when every check passed) and returns
// main's exit status.
static int finish() {
  if (failures) {
    std::printf("%d of %d checks failed\n", failures, checks);
    return 1;
  }
  std::printf("ok %d\n", checks);
  return 0;
}
