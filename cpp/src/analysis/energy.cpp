// Energy per step (energy.h; docs/metrics.md, "Energy", gives the rules and their error bounds).
#include "gpuprof/analysis/energy.h"

#include <algorithm>
#include <map>

namespace gpuprof {

namespace {

template <class V>
bool earlier(const std::pair<int64_t, V>& a, const std::pair<int64_t, V>& b) {
  return a.first < b.first;
}

// The power at t: linear between the samples on either side, held from the nearest within hold_ns
// outside them.
bool power_at(const std::vector<std::pair<int64_t, double>>& s, int64_t t, int64_t hold_ns, double* w) {
  if (s.empty()) return false;
  if (t <= s.front().first) {
    if (s.front().first - t > hold_ns) return false;
    *w = s.front().second;
    return true;
  }
  if (t >= s.back().first) {
    if (t - s.back().first > hold_ns) return false;
    *w = s.back().second;
    return true;
  }
  auto hi = std::upper_bound(s.begin(), s.end(), std::make_pair(t, 0.0), earlier<double>);
  auto lo = hi - 1;
  const double f = double(t - lo->first) / double(hi->first - lo->first);
  *w = lo->second + f * (hi->second - lo->second);
  return true;
}

std::string ms(int64_t ns) { return std::to_string(ns / 1'000'000) + " ms"; }

// Why a step got no energy, in the words of the rules above.
std::string why_not_measured(bool no_counter, bool no_power, bool counter_backwards, const EnergyOptions& o) {
  if (no_counter && no_power) return "NVML reported neither its energy counter nor its power draw for this device";
  std::string counter = no_counter ? "no energy counter"
                        : counter_backwards
                            ? "the energy counter went backwards across it (the driver was reloaded)"
                            : "no energy-counter reading within " + ms(o.counter_edge_ns) + " of its start or end";
  std::string power =
      no_power ? "no power samples" : "no power sample within " + ms(o.power_hold_ns) + " of its start or end";
  return counter + " and " + power;
}

}  // namespace

bool counter_at(const std::vector<std::pair<int64_t, int64_t>>& r, int64_t t, int64_t edge_ns, double* mj) {
  if (r.empty()) return false;
  if (t <= r.front().first) {
    if (r.front().first - t > edge_ns) return false;
    *mj = double(r.front().second);
    return true;
  }
  if (t >= r.back().first) {
    if (t - r.back().first > edge_ns) return false;
    *mj = double(r.back().second);
    return true;
  }
  auto hi = std::upper_bound(r.begin(), r.end(), std::make_pair(t, int64_t(0)), earlier<int64_t>);
  auto lo = hi - 1;
  const double f = double(t - lo->first) / double(hi->first - lo->first);
  *mj = double(lo->second) + f * double(hi->second - lo->second);
  return true;
}

bool integrate_power(const std::vector<std::pair<int64_t, double>>& s, int64_t a, int64_t b, int64_t hold_ns,
                     double* joules) {
  if (b < a) return false;
  double pa = 0.0, pb = 0.0;
  if (!power_at(s, a, hold_ns, &pa) || !power_at(s, b, hold_ns, &pb)) return false;
  // Trapezoids between a, every sample strictly inside (a, b), and b.
  double sum_w_ns = 0.0;
  int64_t t_prev = a;
  double p_prev = pa;
  auto it = std::upper_bound(s.begin(), s.end(), std::make_pair(a, 0.0), earlier<double>);
  for (; it != s.end() && it->first < b; ++it) {
    sum_w_ns += 0.5 * (p_prev + it->second) * double(it->first - t_prev);
    t_prev = it->first;
    p_prev = it->second;
  }
  sum_w_ns += 0.5 * (p_prev + pb) * double(b - t_prev);
  *joules = sum_w_ns * 1e-9;
  return true;
}

std::string DeviceEnergy::method() const {
  if (counter_steps > 0 && power_steps > 0) return "counter and power";
  if (counter_steps > 0) return "counter";
  if (power_steps > 0) return "power";
  return "";
}

EnergyResult step_energy(const Trace& t, const std::vector<TimeWindow>& steps, const EnergyOptions& o) {
  struct Readings {
    std::vector<std::pair<int64_t, int64_t>> counter_mj;
    std::vector<std::pair<int64_t, double>> power_w;
    bool sampled = false;
  };
  std::map<int, Readings> by_device;
  for (const GpuSample& s : t.gpu_samples) {
    Readings& r = by_device[s.device];
    r.sampled = true;
    if (s.energy_mj >= 0) r.counter_mj.emplace_back(s.ts_ns, s.energy_mj);
    if (s.power_mw >= 0) r.power_w.emplace_back(s.ts_ns, s.power_mw / 1000.0);
  }
  EnergyResult out;
  out.steps.assign(steps.size(), std::vector<StepEnergy>(by_device.size()));
  size_t i = 0;
  for (auto& [device, r] : by_device) {
    std::stable_sort(r.counter_mj.begin(), r.counter_mj.end(), earlier<int64_t>);
    std::stable_sort(r.power_w.begin(), r.power_w.end(), earlier<double>);
    DeviceEnergy d;
    d.device = device;
    d.steps = int64_t(steps.size());
    int64_t unmeasured = 0;
    bool counter_backwards = false;
    std::string why_unmeasured;   // of the first step not measured
    double sum_j = 0.0;
    for (size_t k = 0; k < steps.size(); ++k) {
      const TimeWindow& w = steps[k];
      StepEnergy& e = out.steps[k][i];
      double mj_a = 0.0, mj_b = 0.0, j = 0.0;
      bool backwards = false;
      if (counter_at(r.counter_mj, w.start_ns, o.counter_edge_ns, &mj_a) &&
          counter_at(r.counter_mj, w.end_ns, o.counter_edge_ns, &mj_b)) {
        if (mj_b >= mj_a) e = {(mj_b - mj_a) / 1000.0, EnergyMethod::Counter};
        else backwards = counter_backwards = true;   // the driver was reloaded: the counter restarted
      }
      if (e.method == EnergyMethod::None && integrate_power(r.power_w, w.start_ns, w.end_ns, o.power_hold_ns, &j))
        e = {j, EnergyMethod::Power};
      if (e.method == EnergyMethod::Counter) ++d.counter_steps;
      else if (e.method == EnergyMethod::Power) ++d.power_steps;
      else {
        if (unmeasured++ == 0)
          why_unmeasured = why_not_measured(r.counter_mj.empty(), r.power_w.empty(), backwards, o);
        continue;
      }
      sum_j += e.energy_j;
      d.measured_ns += w.length_ns();
    }
    if (d.measured_steps() > 0) d.energy_j = sum_j;
    // The note: why steps are missing, and why the counter was not used where power was.
    std::vector<std::string> notes;
    if (unmeasured > 0)
      notes.push_back(std::to_string(unmeasured) + " of " + std::to_string(steps.size()) +
                      " steps not measured (the first: " + why_unmeasured + ")");
    if (d.power_steps > 0 && !r.counter_mj.empty())
      notes.push_back(std::to_string(d.power_steps) + (d.power_steps == 1 ? " step" : " steps") +
                      " from power samples: the energy counter's readings " +
                      (counter_backwards ? "did not cover them or went backwards (the driver was reloaded)"
                                         : "did not cover them"));
    else if (d.power_steps > 0) notes.push_back("no energy counter on this device");
    for (const std::string& n : notes) d.note += (d.note.empty() ? "" : "; ") + n;
    out.devices.push_back(std::move(d));
    ++i;
  }
  return out;
}

}  // namespace gpuprof
