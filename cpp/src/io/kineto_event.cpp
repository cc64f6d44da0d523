// The pending event's reset and the text helpers of kineto_event.h.
#include "kineto_event.h"

namespace gpuprof::kineto {

bool sanitize_utf8(std::string_view in, std::string* out) {
  size_t i = 0;
  const size_t n = in.size();
  while (i < n && static_cast<unsigned char>(in[i]) < 0x80) ++i;
  if (i == n) return false;
  out->assign(in.data(), i);
  bool replaced = false;
  while (i < n) {
    const unsigned char c = static_cast<unsigned char>(in[i]);
    int len = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      out->push_back(char(c));
      ++i;
      continue;
    }
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    }
    bool ok = len > 0 && i + len <= n;
    for (int k = 1; ok && k < len; ++k) {
      const unsigned char d = static_cast<unsigned char>(in[i + k]);
      ok = (d & 0xC0) == 0x80;
      cp = (cp << 6) | (d & 0x3F);
    }
    // Reject overlong forms, surrogates and values past U+10FFFF.
    if (ok)
      ok = !((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
             (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF);
    if (ok) {
      out->append(in.data() + i, len);
      i += len;
    } else {
      out->append("\xEF\xBF\xBD");
      replaced = true;
      ++i;
    }
  }
  return replaced;
}

int64_t elements_in_dims(std::string_view text) {
  int64_t total = 0, product = 1;
  int depth = 0;
  bool numbers = false;   // the innermost list open now has numbers
  int64_t value = -1;
  for (char c : text) {
    if (c == '[') {
      ++depth;
      product = 1;
      numbers = false;
    } else if (c >= '0' && c <= '9') {
      value = (value < 0 ? 0 : value * 10) + (c - '0');
      if (value > (int64_t(1) << 50)) return -1;
    } else if (c == ',' || c == ']') {
      if (value >= 0) {
        product *= value;
        numbers = true;
        if (product > (int64_t(1) << 50)) return -1;
        value = -1;
      }
      if (c == ']') {
        if (numbers) total += product;
        numbers = false;
        product = 1;
        if (--depth < 0) return -1;
      }
    } else if (c != ' ') {
      return -1;
    }
  }
  return depth == 0 ? total : -1;
}

void PendingEvent::keep_launch_arg(Arg arg, std::string_view v) {
  std::string* to = nullptr;
  switch (arg) {
    case Arg::KernelBackend: to = &launch.backend; break;
    case Arg::KernelFile: to = &launch.file; break;
    case Arg::KernelHash: to = &launch.hash; break;
    case Arg::Grid: to = &launch.grid; break;
    default: return;
  }
  to->assign(v.data(), v.size());
  compiled_launch = true;
}

void PendingEvent::reset() {
  ph = 0;
  cat = Cat::None;
  name.clear();
  has_name = false;
  pid = tid = -1;
  ts.present = ts.converted = ts.other_unit = false;
  dur.present = dur.converted = dur.other_unit = false;
  correlation = external_id = batch = 0;
  worker = -1;
  device = stream = registers = shared_mem = bytes = device_type = device_id = -1;
  total_allocated = total_reserved = -1;
  addr = 0;
  sequence_nr = -1;
  fwd_thread = 0;
  blocks_per_sm = warps_per_sm = occupancy = -1;
  for (int i = 0; i < 3; ++i) grid[i] = block[i] = 0;
  has_bytes = false;
  bad_number = false;
  shapes.clear();
  has_shapes = false;
  types.clear();
  concrete.clear();
  has_types = has_concrete = false;
  flops = -1;
  input_type.clear();
  if (compiled_launch) {
    compiled_launch = false;
    launch.backend.clear();
    launch.file.clear();
    launch.hash.clear();
    launch.grid.clear();
  }
  if (collective) clear_collective();
}

// Out of line: inlined into reset, the registers it needs were saved and restored on every event
// (17 instructions an event, callgrind), collective or not.
[[gnu::noinline]] void PendingEvent::clear_collective() {
  collective = false;
  coll = CollectiveInfo{};
}

KernelInfo PendingEvent::kernel_info() const {
  KernelInfo k;
  for (int i = 0; i < 3; ++i) {
    k.grid[i] = grid[i];
    k.block[i] = block[i];
  }
  k.registers_per_thread = registers > INT32_MAX ? -1 : int32_t(registers);
  k.shared_mem_bytes = shared_mem;
  k.blocks_per_sm = float(blocks_per_sm);
  k.warps_per_sm = float(warps_per_sm);
  k.est_occupancy_pct = float(occupancy);
  return k;
}

}  // namespace gpuprof::kineto
