// Weight loading: FileReader (file ranges read by native threads into pinned staging buffers,
// the read side of src/backends/cuda/weight_stream.ts) and the generated-weight launcher
// (kernels/weight_fill.h).
//
// FileReader({buffers, bufferBytes, threads}) owns `buffers` page-locked host buffers
// (cudaHostAlloc Portable) and a pool of `threads` reader threads. read(i, fd, position, bytes)
// queues a pread loop of `bytes` bytes at `position` of the open file descriptor `fd` into buffer i
// and returns at once; wait(i) blocks until that read is done and throws its error (errno text,
// or an early end of file). The JS side queues host-to-device copies out of buffer i after
// wait(i), and reuses the buffer only once those copies are done (an event), so the reads of the
// other buffers overlap the copies. Reader threads never touch JS values.
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../kernels/kernels.h"
#include "../kernels/weight_fill.h"
#include "common.h"

namespace hs {
namespace {

/** Largest single pread (Linux transfers at most 0x7ffff000 bytes per call). */
constexpr size_t kMaxPread = size_t{1} << 30;

/** Reads `bytes` bytes at `position` of fd into dst; returns "" or what went wrong. */
std::string preadFully(int fd, char* dst, uint64_t position, size_t bytes) {
  size_t got = 0;
  while (got < bytes) {
    const size_t want = bytes - got < kMaxPread ? bytes - got : kMaxPread;
    const ssize_t r = ::pread(fd, dst + got, want, static_cast<off_t>(position + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      return "read of " + std::to_string(bytes) + " bytes at offset " + std::to_string(position) +
             " failed: " + std::strerror(errno);
    }
    if (r == 0) {
      return "the file ended " + std::to_string(got) + " bytes into a read of " + std::to_string(bytes) +
             " bytes at offset " + std::to_string(position) + " (truncated file?)";
    }
    got += static_cast<size_t>(r);
  }
  return "";
}

/** The buffers, the queue and the threads; shared by the JS wrapper only. */
class ReaderPool {
 public:
  ReaderPool(size_t buffers, size_t bufferBytes, int threads) : slots_(buffers), bufferBytes_(bufferBytes) {
    try {
      for (Slot& s : slots_) HS_CUDA(cudaHostAlloc(&s.host, bufferBytes, cudaHostAllocPortable));
      for (int t = 0; t < threads; ++t) threads_.emplace_back([this] { run(); });
    } catch (...) {
      shutdown();
      throw;
    }
  }
  ~ReaderPool() { shutdown(); }

  size_t numBuffers() const { return slots_.size(); }
  size_t bufferBytes() const { return bufferBytes_; }
  void* host(size_t i) const { return slots_.at(i).host; }

  /** Queues a read into buffer i. @throws std::runtime_error when one is in flight there. */
  void read(size_t i, int fd, uint64_t position, size_t bytes) {
    std::lock_guard<std::mutex> lk(mu_);
    Slot& s = slots_.at(i);
    if (s.state != State::Idle) throw std::runtime_error("FileReader.read: buffer " + std::to_string(i) + " is busy");
    s.fd = fd;
    s.position = position;
    s.bytes = bytes;
    s.error.clear();
    s.state = State::Queued;
    queue_.push_back(i);
    work_.notify_one();
  }

  /** Waits for buffer i's read. @throws std::runtime_error with its error, or when none was queued. */
  void wait(size_t i) {
    std::unique_lock<std::mutex> lk(mu_);
    Slot& s = slots_.at(i);
    if (s.state == State::Idle) throw std::runtime_error("FileReader.wait: no read on buffer " + std::to_string(i));
    done_.wait(lk, [&] { return s.state == State::Done; });
    s.state = State::Idle;
    if (!s.error.empty()) throw std::runtime_error(s.error);
  }

 private:
  enum class State { Idle, Queued, Done };
  struct Slot {
    void* host = nullptr;
    State state = State::Idle;
    int fd = -1;
    uint64_t position = 0;
    size_t bytes = 0;
    std::string error;
  };

  void run() {
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      work_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;  // queued reads are dropped: nobody waits for them any more
      const size_t i = queue_.front();
      queue_.pop_front();
      const Slot job = slots_[i];
      lk.unlock();
      std::string err = preadFully(job.fd, static_cast<char*>(job.host), job.position, job.bytes);
      lk.lock();
      slots_[i].error = std::move(err);
      slots_[i].state = State::Done;
      done_.notify_all();
    }
  }

  /** Stops and joins the threads (a read in progress finishes first), then frees the buffers. */
  void shutdown() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    work_.notify_all();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
    for (Slot& s : slots_) {
      if (s.host != nullptr) (void)cudaFreeHost(s.host);
      s.host = nullptr;
    }
    (void)cudaGetLastError();
  }

  std::mutex mu_;
  std::condition_variable work_;
  std::condition_variable done_;
  std::deque<size_t> queue_;
  bool stop_ = false;
  std::vector<Slot> slots_;
  size_t bufferBytes_;
  std::vector<std::thread> threads_;
};

/** JS class FileReader (see the top of this file); typed in src/backends/cuda/addon_loader.ts. */
class FileReader : public Napi::ObjectWrap<FileReader> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "FileReader",
                       {InstanceAccessor<&FileReader::NumBuffers>("numBuffers"),
                        InstanceAccessor<&FileReader::BufferBytes>("bufferBytes"),
                        InstanceMethod<&FileReader::BufferPtr>("bufferPtr"), InstanceMethod<&FileReader::Read>("read"),
                        InstanceMethod<&FileReader::Wait>("wait"), InstanceMethod<&FileReader::Dispose>("dispose")});
  }

  explicit FileReader(const Napi::CallbackInfo& info) : Napi::ObjectWrap<FileReader>(info) {
    if (info.Length() < 1 || !info[0].IsObject())
      throw Napi::TypeError::New(info.Env(), "FileReader needs {buffers, bufferBytes, threads}");
    const Napi::Object o = info[0].As<Napi::Object>();
    const double buffers = optNumber(o, "buffers", 0);
    const double bytes = optNumber(o, "bufferBytes", 0);
    const double threads = optNumber(o, "threads", 0);
    if (!(buffers >= 1 && buffers <= 64) || !(bytes >= 1 && bytes < 9007199254740992.0) ||
        !(threads >= 1 && threads <= 64))
      throw Napi::RangeError::New(info.Env(), "FileReader: buffers and threads in [1, 64], bufferBytes >= 1");
    pool_ = std::make_unique<ReaderPool>(static_cast<size_t>(buffers), static_cast<size_t>(bytes),
                                         static_cast<int>(threads));
  }

 private:
  ReaderPool& pool(const Napi::CallbackInfo& info) {
    if (!pool_) throw Napi::Error::New(info.Env(), "FileReader is disposed");
    return *pool_;
  }
  size_t buffer(const Napi::CallbackInfo& info, const Args& a) {
    const size_t i = a.size(0);
    if (i >= pool(info).numBuffers()) throw Napi::RangeError::New(info.Env(), "FileReader: no such buffer");
    return i;
  }
  Napi::Value NumBuffers(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), pool_ ? static_cast<double>(pool_->numBuffers()) : 0);
  }
  Napi::Value BufferBytes(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), pool_ ? static_cast<double>(pool_->bufferBytes()) : 0);
  }
  Napi::Value BufferPtr(const Napi::CallbackInfo& info) {
    Args a(info, 1, "FileReader.bufferPtr");
    return ptrValue(info.Env(), pool(info).host(buffer(info, a)));
  }
  Napi::Value Read(const Napi::CallbackInfo& info) {
    Args a(info, 4, "FileReader.read");
    const size_t i = buffer(info, a);
    const int fd = a.i32(1);
    const size_t bytes = a.size(3);
    if (fd < 0 || bytes > pool(info).bufferBytes())
      throw Napi::RangeError::New(info.Env(), "FileReader.read: bad descriptor, or more bytes than a buffer holds");
    pool(info).read(i, fd, a.size(2), bytes);
    return info.Env().Undefined();
  }
  Napi::Value Wait(const Napi::CallbackInfo& info) {
    Args a(info, 1, "FileReader.wait");
    pool(info).wait(buffer(info, a));
    return info.Env().Undefined();
  }
  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    pool_.reset();
    return info.Env().Undefined();
  }

  std::unique_ptr<ReaderPool> pool_;
};

/** A JS number that must fit an unsigned 32-bit word (hash keys, constant bits). */
uint32_t u32Arg(const Args& a, size_t i, const char* what) {
  const size_t v = a.size(i);
  if (v > 0xffffffffu) throw Napi::RangeError::New(a.env(), std::string("fillWeight: ") + what + " must be below 2^32");
  return static_cast<uint32_t>(v);
}

/** fillWeight(stream, dst, dtype, count, first, table, constantBits, key0, key1): hsFillWeight. */
Napi::Value FillWeight(const Napi::CallbackInfo& info) {
  Args a(info, 9, "fillWeight");
  HS_LAUNCH(hsFillWeight, a.stream(0), a.ptr(1), a.i32(2), a.size(3), a.size(4), a.ptr(5),
            u32Arg(a, 6, "constantBits"), u32Arg(a, 7, "key0"), u32Arg(a, 8, "key1"));
  return info.Env().Undefined();
}

}  // namespace

void initLoader(Napi::Env env, Napi::Object exports) {
  exports.Set("FileReader", FileReader::Define(env));
  exports.Set("fillWeight", Napi::Function::New(env, FillWeight, "fillWeight"));
}

}  // namespace hs
