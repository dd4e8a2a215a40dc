// Pinned (page-locked, device-mapped) host buffers exposed to JS as external ArrayBuffers.
//
// Lifetime: the memory is freed by dispose(), or, without dispose(), when the ArrayBuffer is
// garbage collected (its finalizer). The wrapper holds a strong reference to its ArrayBuffer, so
// the memory outlives the wrapper as long as JS holds either. dispose() detaches the ArrayBuffer
// first, so views created from it read as empty instead of touching freed memory.
#include "common.h"

namespace hs {
namespace {

/** Shared between the wrapper and the ArrayBuffer finalizer; deleted by the finalizer. */
struct PinnedState {
  void* host = nullptr;
  bool freed = false;
};

void finalizePinned(Napi::Env /*env*/, void* /*data*/, PinnedState* state) {
  if (!state->freed) (void)cudaFreeHost(state->host);
  (void)cudaGetLastError();
  delete state;
}

/**
 * JS class PinnedBuffer(bytes): cudaHostAlloc(cudaHostAllocMapped | cudaHostAllocPortable).
 *   ptr: the device-visible address (UVA: equal to the host address); byteLength; buffer: the
 *   ArrayBuffer over the memory; dispose().
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
    state_ = new PinnedState{host, false};
    Napi::ArrayBuffer ab = Napi::ArrayBuffer::New(info.Env(), host, bytes_, finalizePinned, state_);
    buffer_ = Napi::Persistent(ab);
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
    return buffer_.Value();
  }
  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    if (state_ != nullptr) {
      void* host = state_->host;
      state_->freed = true;
      state_ = nullptr;
      // Detach first so that no view reaches the memory once it is freed. The finalizer may run
      // inside Detach() and delete the state: it is not touched afterwards.
      Napi::ArrayBuffer ab = buffer_.Value();
      ab.Detach();
      buffer_.Reset();
      HS_CUDA(cudaFreeHost(host));
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
