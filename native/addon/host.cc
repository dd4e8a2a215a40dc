// Pinned (page-locked, device-mapped) host buffers, viewable from JS as external ArrayBuffers.
//
// Lifetime: the memory is freed by dispose(), or else when both the wrapper and its ArrayBuffer
// (created on the first read of `buffer`) are garbage collected: each holds a reference on the
// shared state. dispose() detaches the ArrayBuffer first, so views created from it read as empty
// instead of touching freed memory. The ArrayBuffer is made lazily because Node 20 creates
// external ArrayBuffers through node::Buffer, limited to 4 GiB (buffer.constants.MAX_LENGTH): a
// larger host tier layer must still be allocatable for the kernels, which only need `ptr`.
#include "common.h"

namespace hs {
namespace {

/** node::Buffer's limit on Node 20 (buffer.constants.MAX_LENGTH), which external ArrayBuffers share. */
constexpr size_t kMaxJsView = size_t{1} << 32;

/** Shared between the wrapper and the ArrayBuffer finalizer; deleted with the last reference. */
struct PinnedState {
  void* host = nullptr;
  bool freed = false;
  int refs = 1;
};

void releasePinned(PinnedState* state) {
  if (--state->refs > 0) return;
  if (!state->freed) (void)cudaFreeHost(state->host);
  (void)cudaGetLastError();
  delete state;
}

void finalizePinned(Napi::Env /*env*/, void* /*data*/, PinnedState* state) {
  releasePinned(state);
}

/**
 * JS class PinnedBuffer(bytes): cudaHostAlloc(cudaHostAllocMapped | cudaHostAllocPortable).
 *   ptr: the device-visible address (UVA: equal to the host address); byteLength; buffer: the
 *   ArrayBuffer over the memory (created on first use; throws RangeError above 4 GiB); dispose().
 */
class PinnedBuffer : public Napi::ObjectWrap<PinnedBuffer> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "PinnedBuffer",
                       {InstanceAccessor<&PinnedBuffer::Ptr>("ptr"),
                        InstanceAccessor<&PinnedBuffer::ByteLength>("byteLength"),
                        InstanceAccessor<&PinnedBuffer::Buffer>("buffer"),
                        InstanceMethod<&PinnedBuffer::Dispose>("dispose")});
  }

  explicit PinnedBuffer(const Napi::CallbackInfo& info) : Napi::ObjectWrap<PinnedBuffer>(info) {
    Args a(info, 1, "PinnedBuffer");
    bytes_ = a.size(0);
    if (bytes_ == 0) throw Napi::RangeError::New(info.Env(), "PinnedBuffer needs at least one byte");
    void* host = nullptr;
    HS_CUDA(cudaHostAlloc(&host, bytes_, cudaHostAllocMapped | cudaHostAllocPortable));
    void* dev = nullptr;
    const cudaError_t err = cudaHostGetDevicePointer(&dev, host, 0);
    if (err != cudaSuccess) {
      (void)cudaFreeHost(host);
      checkCuda(err, "cudaHostGetDevicePointer", __FILE__, __LINE__);
    }
    devicePtr_ = dev;
    state_ = new PinnedState{host, false, 1};
  }

  ~PinnedBuffer() override {
    if (state_ != nullptr) releasePinned(state_);
  }

 private:
  Napi::Value Ptr(const Napi::CallbackInfo& info) {
    return ptrValue(info.Env(), state_ ? devicePtr_ : nullptr);
  }
  Napi::Value ByteLength(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(state_ ? bytes_ : 0));
  }
  Napi::Value Buffer(const Napi::CallbackInfo& info) {
    if (state_ == nullptr) throw Napi::Error::New(info.Env(), "PinnedBuffer is disposed");
    if (buffer_.IsEmpty()) {
      if (bytes_ > kMaxJsView)
        throw Napi::RangeError::New(info.Env(),
                                    "a pinned buffer over 4 GiB cannot be viewed from JS (node::Buffer's limit)");
      // The ArrayBuffer's reference, taken before it exists: if creation fails, Node may already
      // have run the finalizer (which releases it), so the wrapper's own reference stays intact.
      state_->refs++;
      Napi::ArrayBuffer ab;
      try {
        ab = Napi::ArrayBuffer::New(info.Env(), state_->host, bytes_, finalizePinned, state_);
      } catch (...) {
        if (state_->refs > 1) state_->refs--;  // only when the finalizer did not run
        throw;
      }
      buffer_ = Napi::Persistent(ab);
    }
    return buffer_.Value();
  }
  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    if (state_ != nullptr) {
      PinnedState* state = state_;
      state_ = nullptr;
      state->freed = true;
      // Detach first so that no view reaches the memory once it is freed. The ArrayBuffer's
      // finalizer runs later (or now); the wrapper's reference keeps the state alive until below.
      if (!buffer_.IsEmpty()) {
        Napi::ArrayBuffer ab = buffer_.Value();
        ab.Detach();
        buffer_.Reset();
      }
      const cudaError_t err = cudaFreeHost(state->host);
      releasePinned(state);
      checkCuda(err, "cudaFreeHost", __FILE__, __LINE__);
    }
    return info.Env().Undefined();
  }

  size_t bytes_ = 0;
  void* devicePtr_ = nullptr;
  PinnedState* state_ = nullptr;
  Napi::Reference<Napi::ArrayBuffer> buffer_;
};

}  // namespace

void initHost(Napi::Env env, Napi::Object exports) {
  exports.Set("PinnedBuffer", PinnedBuffer::Define(env));
}

}  // namespace hs
