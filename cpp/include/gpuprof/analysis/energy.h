// Energy per step from a trace's NVML samples (docs/metrics.md, "Energy"): each sampled device's
// energy over each step, from NVML's total-energy counter where the device has one, else from its
// power samples integrated over the step; never a guess where neither covers the step.
//
// What is measured is the whole device: NVML's counter and power reading include the work of every
// process on the GPU, and the board's own draw (memory, fans where powered by the board).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gpuprof/analysis/gpu_summary.h"   // TimeWindow
#include "gpuprof/core/trace.h"

namespace gpuprof {

enum class EnergyMethod : uint8_t { None, Counter, Power };

struct EnergyOptions {
  // A step's edge may lie this far outside the counter's readings and still take the nearest one.
  // Live sessions read the counter at every step boundary, a few microseconds after the boundary
  // was stamped; the error this allows is at most the device's power times the gap.
  int64_t counter_edge_ns = 2'000'000;
  // A step's edge may lie this far before the first or after the last power sample, whose value is
  // then held: two periods of the sampler's 100 ms (a span's last step usually ends between two
  // samples, its first may begin just before the sampler's first reading).
  int64_t power_hold_ns = 200'000'000;
};

// One step on one device.
struct StepEnergy {
  double energy_j = -1.0;   // -1: not measured
  EnergyMethod method = EnergyMethod::None;
};

// One row of the report's `energy` table: a device with NVML samples, over the report's steps.
struct DeviceEnergy {
  int device = -1;
  int64_t steps = 0;           // steps of the report
  int64_t counter_steps = 0;   // measured from the energy counter
  int64_t power_steps = 0;     // measured by integrating power samples
  double energy_j = -1.0;      // summed over the measured steps; -1: none measured
  int64_t measured_ns = 0;     // the measured steps' summed duration
  std::string note;            // why some steps were not measured, or measured by power; "" when none

  int64_t measured_steps() const { return counter_steps + power_steps; }
  double energy_per_step_j() const { return measured_steps() > 0 ? energy_j / double(measured_steps()) : -1.0; }
  double mean_power_w() const { return measured_ns > 0 ? energy_j / (double(measured_ns) * 1e-9) : -1.0; }
  // "counter", "power", "counter and power", or "" (nothing measured).
  std::string method() const;
};

struct EnergyResult {
  std::vector<DeviceEnergy> devices;            // ascending device id; every device with a sample
  std::vector<std::vector<StepEnergy>> steps;   // steps[k][i]: step k on devices[i]
};

EnergyResult step_energy(const Trace& t, const std::vector<TimeWindow>& steps, const EnergyOptions& o = {});

// The two rules, on one device's readings sorted by time (exposed for tests):
// The counter at time t (mJ): linear between the readings on either side of t; the nearest reading
// when t lies at most `edge_ns` outside them. False when no reading is that close.
bool counter_at(const std::vector<std::pair<int64_t, int64_t>>& readings_mj, int64_t t, int64_t edge_ns,
                double* mj);
// The integral of power over [a, b] in joules (samples in W): the trapezoid rule over the samples
// inside, with the power at a and b interpolated between their neighbours, or the first / last
// sample's held when a or b lies at most `hold_ns` outside the samples. False otherwise.
bool integrate_power(const std::vector<std::pair<int64_t, double>>& samples_w, int64_t a, int64_t b,
                     int64_t hold_ns, double* joules);

}  // namespace gpuprof
