// Specifications of the occupancy calculator. Each case works the CUDA occupancy rules by hand:
// warps, registers (per-warp allocation unit, per-sub-partition register file), shared memory
// (granularity, the driver's per-block reserve on sm_80+, carveout sizes) and the blocks-per-SM cap.
#include <gtest/gtest.h>

#include "gpuprof/analysis/occupancy.h"

using namespace gpuprof;

namespace {

DeviceProps v100() {
  DeviceProps d;
  d.name = "Tesla V100";
  d.compute_major = 7;
  d.compute_minor = 0;
  d.max_threads_per_block = 1024;
  d.max_threads_per_sm = 2048;
  d.regs_per_block = 65536;
  d.regs_per_sm = 65536;
  d.shared_mem_per_block = 48 * 1024;
  d.shared_mem_per_sm = 96 * 1024;
  d.shared_mem_per_block_optin = 96 * 1024;
  d.num_sms = 80;
  return d;
}

DeviceProps a100() {
  DeviceProps d = v100();
  d.name = "A100";
  d.compute_major = 8;
  d.compute_minor = 0;
  d.shared_mem_per_sm = 164 * 1024;
  d.shared_mem_per_block_optin = 163 * 1024;
  d.num_sms = 108;
  return d;
}

DeviceProps h100() {
  DeviceProps d = a100();
  d.name = "H100";
  d.compute_major = 9;
  d.shared_mem_per_sm = 228 * 1024;
  d.shared_mem_per_block_optin = 227 * 1024;
  d.num_sms = 132;
  return d;
}

OccupancyResult run(const DeviceProps& d, int64_t threads, int regs, int64_t smem,
                    SharedMemLimit limit = SharedMemLimit::Auto) {
  return active_blocks_per_sm(d, LaunchResources{threads, regs, smem}, limit);
}

KernelInfo kernel(int blocks, int threads, int regs, int64_t smem) {
  KernelInfo k;
  k.grid[0] = blocks;
  k.grid[1] = k.grid[2] = 1;
  k.block[0] = threads;
  k.block[1] = k.block[2] = 1;
  k.registers_per_thread = regs;
  k.shared_mem_bytes = smem;
  return k;
}

}  // namespace

TEST(Occupancy, VoltaEachLimitWorkedByHand) {
  // 256 threads = 8 warps, 64 registers, 16 KiB shared memory.
  //   warps: 2048 / 32 = 64 slots / 8 = 8 blocks
  //   registers: 64 x 32 = 2048 per warp (a multiple of 256); 65536 / 4 sub-partitions = 16384
  //              -> 8 warps each, 32 per SM / 8 = 4 blocks
  //   shared memory: 16 KiB (multiple of 256 B) into 96 KiB = 6 blocks; cap 32 on cc 7.0
  const OccupancyResult r = run(v100(), 256, 64, 16 * 1024);
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.limit_warps, 8);
  EXPECT_EQ(r.limit_registers, 4);
  EXPECT_EQ(r.limit_shared_mem, 6);
  EXPECT_EQ(r.limit_blocks, 32);
  EXPECT_EQ(r.active_blocks_per_sm, 4);
  // 1000 blocks over 80 SMs = 12.5 per SM > 4: 4 x 256 / 2048 = 50 %.
  EXPECT_DOUBLE_EQ(occupancy_pct(v100(), kernel(1000, 256, 64, 16 * 1024)), 50.0);
}

TEST(Occupancy, RegistersRoundUpToTheAllocationUnit) {
  // 33 registers x 32 lanes = 1056, rounded up to 1280 per warp. 16384 / 1280 = 12 warps per
  // sub-partition, 48 per SM; 128-thread blocks (4 warps) -> 12 blocks. (Without the rounding it
  // would be 16384 / 1056 = 15 -> 60 / 4 = 15.)
  EXPECT_EQ(run(v100(), 128, 33, 0).limit_registers, 12);
  // A block whose registers exceed the per-block file cannot launch: 1024 x 128 = 131072 > 65536.
  const OccupancyResult r = run(v100(), 1024, 128, 0);
  EXPECT_EQ(r.limit_registers, 0);
  EXPECT_EQ(r.active_blocks_per_sm, 0);
  // No registers reported: registers do not limit.
  EXPECT_GT(run(v100(), 128, 0, 0).limit_registers, 1000);
}

TEST(Occupancy, WarpsRoundUpToWholeWarpsAndTheBlockCapApplies) {
  // 48 threads occupy 2 warps: 64 / 2 = 32 blocks; cap 32.
  EXPECT_EQ(run(v100(), 48, 16, 0).limit_warps, 32);
  // 32-thread blocks: 64 by warps, but a V100 SM holds at most 32 blocks.
  EXPECT_EQ(run(v100(), 32, 16, 0).active_blocks_per_sm, 32);
  // Over the per-block thread limit: does not launch.
  EXPECT_EQ(run(v100(), 2048, 16, 0).active_blocks_per_sm, 0);
}

TEST(Occupancy, AmpereReservesOneKiBPerBlock) {
  // A100, 32 KiB per block: 32 + 1 (driver reserve) = 33 KiB = 33792 B (multiple of 128);
  // 164 KiB / 33 KiB = 4.97 -> 4 blocks (it would be 5 without the reserve).
  EXPECT_EQ(run(a100(), 128, 32, 32 * 1024).limit_shared_mem, 4);
  // No shared memory still allocates the reserve: 164 KiB / 1 KiB = 164, so the cap (32) decides.
  const OccupancyResult r = run(a100(), 32, 16, 0);
  EXPECT_EQ(r.limit_shared_mem, 164);
  EXPECT_EQ(r.active_blocks_per_sm, 32);
}

TEST(Occupancy, OptInSharedMemoryAboveTheDefaultLimit) {
  // A100, 100 KiB per block: above the default 48 KiB, so the launch must have opted in (up to
  // 163 KiB); 101 KiB with the reserve fits once in 164 KiB.
  EXPECT_EQ(run(a100(), 256, 32, 100 * 1024).active_blocks_per_sm, 1);
  // Kineto's estimate applies the default limit anyway and finds no block fits.
  EXPECT_EQ(run(a100(), 256, 32, 100 * 1024, SharedMemLimit::DefaultOnly).active_blocks_per_sm, 0);
  // More than even the opt-in limit: cannot launch.
  EXPECT_EQ(run(a100(), 256, 32, 200 * 1024).active_blocks_per_sm, 0);
}

TEST(Occupancy, HopperAndBlackwell) {
  // H100, 100 KiB per block: 101 KiB into 228 KiB = 2 blocks.
  EXPECT_EQ(run(h100(), 128, 32, 100 * 1024).active_blocks_per_sm, 2);
  // B200 (cc 10.0) shares Hopper's limits: 32 blocks, 228 KiB.
  DeviceProps b200 = h100();
  b200.compute_major = 10;
  EXPECT_EQ(run(b200, 32, 16, 0).active_blocks_per_sm, 32);
  // RTX 5090 (cc 12.0): 1536 threads and 100 KiB per SM, at most 24 blocks.
  DeviceProps rtx = a100();
  rtx.compute_major = 12;
  rtx.max_threads_per_sm = 1536;
  rtx.shared_mem_per_sm = 100 * 1024;
  rtx.shared_mem_per_block_optin = 99 * 1024;
  EXPECT_EQ(run(rtx, 32, 16, 0).limit_warps, 48);
  EXPECT_EQ(run(rtx, 32, 16, 0).active_blocks_per_sm, 24);
  // Its 100 KiB: 48 KiB + 1 KiB = 49 KiB -> 2 blocks.
  EXPECT_EQ(run(rtx, 128, 32, 48 * 1024).limit_shared_mem, 2);
}

TEST(Occupancy, TuringHoldsSixteenBlocks) {
  DeviceProps t4 = v100();
  t4.compute_minor = 5;
  t4.max_threads_per_sm = 1024;
  t4.shared_mem_per_sm = 64 * 1024;
  t4.shared_mem_per_block_optin = 64 * 1024;
  // 32 warp slots, 1-warp blocks: 32 by warps, capped at 16 on cc 7.5.
  EXPECT_EQ(run(t4, 32, 16, 0).active_blocks_per_sm, 16);
}

TEST(Occupancy, UnknownDevicesAreRefusedWithAReason) {
  DeviceProps pascal = v100();
  pascal.compute_major = 6;
  pascal.compute_minor = 1;
  OccupancyResult r = run(pascal, 128, 32, 0);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(std::string(r.why_not).find("7.0 to 12.x"), std::string::npos);

  DeviceProps amd = v100();
  amd.compute_major = 9;
  amd.warp_size = 64;   // MI250 reports "9.0" with 64-wide wavefronts
  r = run(amd, 128, 32, 0);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(std::string(r.why_not).find("NVIDIA"), std::string::npos);

  DeviceProps empty;
  empty.compute_major = 8;
  EXPECT_FALSE(run(empty, 128, 32, 0).ok);
  EXPECT_EQ(occupancy_pct(empty, kernel(10, 128, 32, 0)), -1.0);
  // A launch without a block size has no occupancy.
  EXPECT_FALSE(run(v100(), 0, 32, 0).ok);
}

TEST(Occupancy, SinglePrecisionLikeKineto) {
  // 32 blocks of 128 threads on 80 SMs: 0.4 blocks per SM (not exact in binary), x 128 / 2048 =
  // 2.5 %. Kineto computes in float and writes (int)(0.5 + 2.5000001) = 3; in double it would be
  // 2.4999999 and round to 2.
  const double pct = occupancy_pct(v100(), kernel(32, 128, 16, 0));
  EXPECT_EQ(static_cast<int>(0.5 + pct), 3);
}

TEST(Occupancy, RecordedValueFirstExceptKinetosOptInBlindSpot) {
  DeviceProps d = a100();
  KernelInfo k = kernel(1000, 256, 32, 16 * 1024);
  k.est_occupancy_pct = 42.0f;   // what the trace says wins
  EXPECT_DOUBLE_EQ(kernel_occupancy_pct(&d, k), 42.0);
  k.est_occupancy_pct = -1.0f;   // absent: ours. 16+1 KiB -> 9 by memory; 64 regs... 32 regs:
  // registers 1024/warp -> 16 warps per sub-partition -> 64 / 8 = 8 blocks; warps 64/8 = 8 -> 8 x 256 /
  // 2048 = 100 %.
  EXPECT_DOUBLE_EQ(kernel_occupancy_pct(&d, k), 100.0);
  EXPECT_EQ(kernel_occupancy_pct(nullptr, k), -1.0);
  // Kineto wrote 0 for a kernel that opted in to 100 KiB: ours says 1 block x 256 / 2048 = 12.5 %.
  KernelInfo big = kernel(1000, 256, 32, 100 * 1024);
  big.est_occupancy_pct = 0.0f;
  EXPECT_DOUBLE_EQ(kernel_occupancy_pct(&d, big), 12.5);
}
