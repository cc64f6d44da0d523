// Specifications of the energy per step (docs/metrics.md, "Energy") on hand-built NVML samples:
// the counter's difference across each step where the device has NVML's energy counter, the
// trapezoid rule over power samples where it does not, and no number (never 0) where neither
// covers a step. Every expected joule is worked out beside it.
#include <gtest/gtest.h>

#include "gpuprof/analysis/energy.h"

using namespace gpuprof;

namespace {

constexpr int64_t kMs = 1'000'000;   // ns

GpuSample counter(int device, int64_t ts, int64_t mj) {
  GpuSample s;
  s.ts_ns = ts;
  s.device = static_cast<int16_t>(device);
  s.energy_mj = mj;
  return s;
}

GpuSample power(int device, int64_t ts, int32_t mw) {
  GpuSample s;
  s.ts_ns = ts;
  s.device = static_cast<int16_t>(device);
  s.power_mw = mw;
  s.gpu_util_pct = 50;
  return s;
}

std::vector<TimeWindow> windows(std::initializer_list<std::pair<int64_t, int64_t>> ms) {
  std::vector<TimeWindow> out;
  for (auto [a, b] : ms) out.push_back({a * kMs, b * kMs});
  return out;
}

}  // namespace

// The counter climbs 25,000 mJ every 100 ms (a steady 250 W) with a reading at every step boundary,
// while the power samples say 999 W: the counter is what counts. Step [0, 300 ms) spans three
// increments, 75 J; step [300, 500 ms) two, 50 J. The device row: 125 J over 2 steps, 62.5 J per
// step, 125 J / 0.5 s = 250 W.
TEST(Energy, TheCounterDifferenceAcrossEachStep) {
  Trace t;
  for (int i = 0; i <= 5; ++i) {
    GpuSample s = counter(0, i * 100 * kMs, 1'000'000 + i * 25'000);
    s.power_mw = 999'000;
    t.gpu_samples.push_back(s);
  }
  const EnergyResult r = step_energy(t, windows({{0, 300}, {300, 500}}));
  ASSERT_EQ(r.devices.size(), 1u);
  ASSERT_EQ(r.steps.size(), 2u);
  EXPECT_DOUBLE_EQ(r.steps[0][0].energy_j, 75.0);
  EXPECT_EQ(r.steps[0][0].method, EnergyMethod::Counter);
  EXPECT_DOUBLE_EQ(r.steps[1][0].energy_j, 50.0);
  const DeviceEnergy& d = r.devices[0];
  EXPECT_EQ(d.device, 0);
  EXPECT_EQ(d.method(), "counter");
  EXPECT_EQ(d.counter_steps, 2);
  EXPECT_DOUBLE_EQ(d.energy_j, 125.0);
  EXPECT_DOUBLE_EQ(d.energy_per_step_j(), 62.5);
  EXPECT_DOUBLE_EQ(d.mean_power_w(), 250.0);
  EXPECT_EQ(d.note, "");
}

// Between two readings the counter is taken to climb linearly: readings 5,000 mJ at 0 and
// 305,000 mJ at 1 s (300 J in 1 s); the step [250, 750 ms) is half of that, 150 J.
TEST(Energy, BetweenReadingsTheCounterIsInterpolated) {
  Trace t;
  t.gpu_samples = {counter(0, 0, 5'000), counter(0, 1000 * kMs, 305'000)};
  const EnergyResult r = step_energy(t, windows({{250, 750}}));
  EXPECT_DOUBLE_EQ(r.steps[0][0].energy_j, 150.0);
  EXPECT_EQ(r.steps[0][0].method, EnergyMethod::Counter);
}

// A live session stamps the step's edge, then reads the counter: the reading comes a little after
// the edge. Readings 50 us after the edges of [0, 100 ms) (0 and 40,000 mJ): the start takes the
// first reading (50 us away, within the 2 ms allowed); the end lies between the two readings, at
// 99.95 / 100 of the way: 39,980 mJ, so 39.98 J. The step [100, 103 ms) ends 2.95 ms after the last
// reading, beyond the 2 ms allowed: it is integrated from the power samples instead (100 W, the
// first sample's held 47 ms back to the step: 100 W x 3 ms = 0.3 J), and the note says why. With
// 5 ms allowed, the counter gives it 40,000 - 39,980 mJ = 0.02 J.
TEST(Energy, ABoundaryReadingJustAfterTheEdgeIsUsedAFarOneIsNot) {
  Trace t;
  t.gpu_samples = {counter(0, 50'000, 0), counter(0, 100 * kMs + 50'000, 40'000), power(0, 150 * kMs, 100'000),
                   power(0, 250 * kMs, 100'000)};
  const std::vector<TimeWindow> steps = {{0, 100 * kMs}, {100 * kMs, 103 * kMs}};
  EnergyResult r = step_energy(t, steps);
  EXPECT_NEAR(r.steps[0][0].energy_j, 39.98, 1e-9);
  EXPECT_EQ(r.steps[0][0].method, EnergyMethod::Counter);
  EXPECT_NEAR(r.steps[1][0].energy_j, 0.3, 1e-9);
  EXPECT_EQ(r.steps[1][0].method, EnergyMethod::Power);
  EXPECT_EQ(r.devices[0].method(), "counter and power");
  EXPECT_EQ(r.devices[0].note, "1 step from power samples: the energy counter's readings did not cover them");
  EnergyOptions wide;
  wide.counter_edge_ns = 5 * kMs;
  r = step_energy(t, steps, wide);
  EXPECT_EQ(r.steps[1][0].method, EnergyMethod::Counter);
  EXPECT_NEAR(r.steps[1][0].energy_j, 0.02, 1e-9);
}

// No counter (a device older than Volta): power samples every 100 ms of 100, 200, 200, 100 W. The
// step [50, 250 ms): power at 50 ms is 150 W (halfway from 100 to 200), at 250 ms 150 W; trapezoids
// [50, 100] (150 + 200) / 2 x 0.05 s = 8.75 J, [100, 200] 200 W x 0.1 s = 20 J, [200, 250] 8.75 J:
// 37.5 J.
TEST(Energy, WithoutACounterPowerSamplesAreIntegratedByTheTrapezoidRule) {
  Trace t;
  const int32_t mw[] = {100'000, 200'000, 200'000, 100'000};
  for (int i = 0; i < 4; ++i) t.gpu_samples.push_back(power(0, i * 100 * kMs, mw[i]));
  const EnergyResult r = step_energy(t, windows({{50, 250}}));
  EXPECT_NEAR(r.steps[0][0].energy_j, 37.5, 1e-9);
  EXPECT_EQ(r.steps[0][0].method, EnergyMethod::Power);
  EXPECT_EQ(r.devices[0].method(), "power");
  EXPECT_EQ(r.devices[0].note, "no energy counter on this device");
  EXPECT_NEAR(r.devices[0].mean_power_w(), 187.5, 1e-9);   // 37.5 J / 0.2 s
}

// Past the last sample its power is held for up to 200 ms (two sampling periods): the step
// [300, 450 ms) after a last sample of 100 W at 300 ms is 100 W x 0.15 s = 15 J. A step ending
// 250 ms after the last sample is not measured: its energy is unknown (-1, None in the report),
// never 0, and the note says which rule failed.
TEST(Energy, PowerIsHeldTwoPeriodsPastTheLastSampleAndNoFurther) {
  Trace t;
  for (int ms = 0; ms <= 300; ms += 100) t.gpu_samples.push_back(power(0, ms * kMs, 100'000));
  const EnergyResult r = step_energy(t, windows({{300, 450}, {450, 550}}));
  EXPECT_NEAR(r.steps[0][0].energy_j, 15.0, 1e-9);
  EXPECT_EQ(r.steps[1][0].method, EnergyMethod::None);
  EXPECT_EQ(r.steps[1][0].energy_j, -1.0);
  const DeviceEnergy& d = r.devices[0];
  EXPECT_EQ(d.power_steps, 1);
  EXPECT_NEAR(d.energy_j, 15.0, 1e-9);   // the measured step only
  EXPECT_EQ(d.note,
            "1 of 2 steps not measured (the first: no energy counter and no power sample within 200 ms of "
            "its start or end); no energy counter on this device");
}

// A device that reports neither the counter nor power (utilization only): no step is measured, the
// device's energy is unknown, and the note says so.
TEST(Energy, ADeviceReportingNeitherHasNoEnergyNeverZero) {
  Trace t;
  GpuSample s;
  s.device = 0;
  s.gpu_util_pct = 90;
  for (int ms = 0; ms <= 200; ms += 100) {
    s.ts_ns = ms * kMs;
    t.gpu_samples.push_back(s);
  }
  const EnergyResult r = step_energy(t, windows({{0, 100}, {100, 200}}));
  ASSERT_EQ(r.devices.size(), 1u);
  const DeviceEnergy& d = r.devices[0];
  EXPECT_EQ(d.method(), "");
  EXPECT_EQ(d.measured_steps(), 0);
  EXPECT_EQ(d.energy_j, -1.0);
  EXPECT_EQ(d.energy_per_step_j(), -1.0);
  EXPECT_EQ(d.mean_power_w(), -1.0);
  EXPECT_EQ(d.note,
            "2 of 2 steps not measured (the first: NVML reported neither its energy counter nor its power "
            "draw for this device)");
  EXPECT_EQ(r.steps[0][0].energy_j, -1.0);
}

// The counter restarts from 0 when the driver is reloaded: a step across that is not a negative
// energy. Without power samples it is not measured, and the note names the reason.
TEST(Energy, ACounterGoingBackwardsIsNotANegativeEnergy) {
  Trace t;
  t.gpu_samples = {counter(0, 0, 900'000), counter(0, 100 * kMs, 1'000), counter(0, 200 * kMs, 21'000)};
  const EnergyResult r = step_energy(t, windows({{0, 100}, {100, 200}}));
  EXPECT_EQ(r.steps[0][0].method, EnergyMethod::None);
  EXPECT_DOUBLE_EQ(r.steps[1][0].energy_j, 20.0);
  EXPECT_EQ(r.devices[0].note,
            "1 of 2 steps not measured (the first: the energy counter went backwards across it (the driver "
            "was reloaded) and no power samples)");
}

// Two GPUs, one with the counter and one without, over one step [0, 200 ms): GPU 0 climbs
// 60,000 mJ (60 J); GPU 1 draws a steady 150 W (30 J). Rows come in device order; a device seen
// only before the steps (GPU 3) still gets its row, with nothing measured.
TEST(Energy, EachDeviceIsMeasuredItsOwnWay) {
  Trace t;
  t.gpu_samples = {power(1, 0, 150'000),          counter(0, 0, 10'000),        power(1, 100 * kMs, 150'000),
                   counter(0, 200 * kMs, 70'000), power(1, 200 * kMs, 150'000), power(3, -900 * kMs, 50'000)};
  const EnergyResult r = step_energy(t, windows({{0, 200}}));
  ASSERT_EQ(r.devices.size(), 3u);
  EXPECT_EQ(r.devices[0].device, 0);
  EXPECT_EQ(r.devices[1].device, 1);
  EXPECT_EQ(r.devices[2].device, 3);
  EXPECT_DOUBLE_EQ(r.steps[0][0].energy_j, 60.0);
  EXPECT_NEAR(r.steps[0][1].energy_j, 30.0, 1e-9);
  EXPECT_EQ(r.steps[0][2].method, EnergyMethod::None);
  EXPECT_EQ(r.devices[0].method(), "counter");
  EXPECT_EQ(r.devices[1].method(), "power");
  EXPECT_EQ(r.devices[2].method(), "");
}

// The counter's differences over consecutive steps add up to the difference over the whole span,
// whatever the readings in between: the per-step numbers partition the span's energy exactly.
TEST(Energy, ConsecutiveStepsPartitionTheSpansCounterDifference) {
  Trace t;
  const int64_t mj[] = {0, 7'000, 9'500, 30'000, 31'000, 52'345};
  for (int i = 0; i < 6; ++i) t.gpu_samples.push_back(counter(0, i * 37 * kMs, mj[i]));
  const EnergyResult r = step_energy(t, windows({{0, 20}, {20, 95}, {95, 96}, {96, 185}}));
  double sum = 0.0;
  for (const auto& step : r.steps) sum += step[0].energy_j;
  EXPECT_NEAR(sum, 52.345, 1e-9);   // (52,345 - 0) mJ over [0, 185 ms = 5 x 37 ms]
}
