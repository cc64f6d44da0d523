#include "raw_inflate.h"

#include <zlib.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <new>

#ifndef GPUPROF_HAVE_ISAL
#define GPUPROF_HAVE_ISAL 0
#endif
#if GPUPROF_HAVE_ISAL
#include <isa-l/igzip_lib.h>
#endif

namespace gpuprof::io {

namespace {

// Both decoders take lengths as 32-bit counts: larger calls are cut (the caller loops anyway).
uint32_t clamp32(size_t n) { return n > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(n); }

class ZlibInflater final : public RawInflater {
 public:
  bool start() {
    ok_ = inflateInit2(&z_, -15) == Z_OK;   // -15: raw deflate, 32 KiB window
    return ok_;
  }
  ~ZlibInflater() override {
    if (ok_) inflateEnd(&z_);
  }
  void reset() override { inflateReset(&z_); }
  Step run(const unsigned char* in, size_t in_len, unsigned char* out, size_t out_len) override {
    z_.next_in = const_cast<Bytef*>(in);
    z_.avail_in = clamp32(in_len);
    z_.next_out = out;
    z_.avail_out = clamp32(out_len);
    const uInt in_given = z_.avail_in, out_given = z_.avail_out;
    const int rc = inflate(&z_, Z_NO_FLUSH);
    Step s;
    s.consumed = in_given - z_.avail_in;
    s.produced = out_given - z_.avail_out;
    if (rc == Z_STREAM_END) {
      s.status = Status::kEnd;   // zlib stops at the last byte of the deflate data: no leftover
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      s.status = Status::kError;
      s.message = z_.msg != nullptr ? z_.msg : zError(rc);
    }
    return s;
  }

 private:
  z_stream z_{};
  bool ok_ = false;
};

#if GPUPROF_HAVE_ISAL
class IsalInflater final : public RawInflater {
 public:
  bool start() {
    state_.reset(new (std::nothrow) inflate_state);
    if (!state_) return false;
    reset();
    return true;
  }
  void reset() override {
    isal_inflate_init(state_.get());
    state_->crc_flag = ISAL_DEFLATE;   // raw deflate: TextStream reads the gzip framing
  }
  Step run(const unsigned char* in, size_t in_len, unsigned char* out, size_t out_len) override {
    inflate_state& st = *state_;
    st.next_in = const_cast<uint8_t*>(in);
    st.avail_in = clamp32(in_len);
    st.next_out = out;
    st.avail_out = clamp32(out_len);
    const uint32_t in_given = st.avail_in, out_given = st.avail_out;
    const int rc = isal_inflate(&st);
    Step s;
    s.consumed = in_given - st.avail_in;
    s.produced = out_given - st.avail_out;
    if (rc < 0) {
      s.status = Status::kError;
      s.message = rc == ISAL_INVALID_BLOCK    ? "invalid deflate block"
                  : rc == ISAL_INVALID_SYMBOL ? "invalid deflate symbol"
                  : rc == ISAL_INVALID_LOOKBACK
                      ? "invalid lookback distance"
                      : "deflate data not understood (ISA-L code " + std::to_string(rc) + ")";
    } else if (st.block_state == ISAL_BLOCK_FINISH) {
      s.status = Status::kEnd;
      // igzip keeps up to 64 bits read ahead in read_in; past the end of the deflate data its
      // whole bytes are the next bytes of the file (the part byte that ends the data is its own).
      s.leftover_bytes = static_cast<size_t>(st.read_in_length) / 8;
      const uint64_t bits = st.read_in_length % 8 == 0 ? st.read_in : st.read_in >> (st.read_in_length % 8);
      for (size_t i = 0; i < s.leftover_bytes; ++i) s.leftover[i] = static_cast<unsigned char>(bits >> (8 * i));
    }
    return s;
  }

 private:
  std::unique_ptr<inflate_state> state_;
};
#endif

template <class T>
std::unique_ptr<RawInflater> started(std::string* error, const char* what) {
  std::unique_ptr<T> d(new (std::nothrow) T());
  if (!d || !d->start()) {
    *error = std::string("cannot start gzip decompression (") + what + ": out of memory)";
    return nullptr;
  }
  return d;
}

}  // namespace

bool RawInflater::isal_built_in() { return GPUPROF_HAVE_ISAL != 0; }

const char* RawInflater::chosen() {
  const char* env = std::getenv("GPUPROF_INFLATER");   // read at each file opened (the tests switch it)
  if (env != nullptr && std::strcmp(env, "zlib") == 0) return "zlib";
  return isal_built_in() ? "isa-l" : "zlib";
}

std::unique_ptr<RawInflater> RawInflater::create(std::string* error) { return create(chosen(), error); }

std::unique_ptr<RawInflater> RawInflater::create(const std::string& name, std::string* error) {
#if GPUPROF_HAVE_ISAL
  if (name == "isa-l") return started<IsalInflater>(error, "ISA-L");
#endif
  if (name == "zlib") return started<ZlibInflater>(error, "zlib");
  *error = "no gzip decoder named " + name + " in this build";
  return nullptr;
}

}  // namespace gpuprof::io
