// The step workspace: one device buffer handed out by a bump pointer and reset once per step.
// Op outputs live here, so a step does no allocation at all (and a decode step can be captured
// in a CUDA graph: its addresses are the same on every replay).
#include "common.h"

namespace hs {
namespace {

constexpr size_t kDefaultAlign = 256;  // cudaMalloc alignment; what cuBLASLt prefers

/**
 * JS class Workspace(bytes): base, capacity, used, peak (bytes); alloc(bytes, align = 256) ->
 * address; reset(); setUsed(bytes) (mark [0, bytes) as taken, e.g. after a graph replay);
 * dispose().
 */
class Workspace : public Napi::ObjectWrap<Workspace> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Workspace",
                       {InstanceAccessor<&Workspace::Base>("base"), InstanceAccessor<&Workspace::Capacity>("capacity"),
                        InstanceAccessor<&Workspace::Used>("used"), InstanceAccessor<&Workspace::Peak>("peak"),
                        InstanceMethod<&Workspace::Alloc>("alloc"), InstanceMethod<&Workspace::Reset>("reset"),
                        InstanceMethod<&Workspace::SetUsed>("setUsed"),
                        InstanceMethod<&Workspace::Dispose>("dispose")});
  }
  explicit Workspace(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Workspace>(info) {
    Args a(info, 1, "Workspace");
    capacity_ = a.size(0);
    if (capacity_ > 0) HS_CUDA(cudaMalloc(&base_, capacity_));
  }
  ~Workspace() override {
    if (base_ != nullptr) (void)cudaFree(base_);
  }

 private:
  void live(const Napi::CallbackInfo& info) const {
    if (disposed_) throw Napi::Error::New(info.Env(), "Workspace is disposed");
  }
  Napi::Value Base(const Napi::CallbackInfo& info) { return ptrValue(info.Env(), base_); }
  Napi::Value Capacity(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(capacity_));
  }
  Napi::Value Used(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(used_)); }
  Napi::Value Peak(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(peak_)); }
  Napi::Value Alloc(const Napi::CallbackInfo& info) {
    live(info);
    Args a(info, 1, "Workspace.alloc");
    const size_t bytes = a.size(0);
    const size_t align = info.Length() > 1 ? a.size(1) : kDefaultAlign;
    if (align == 0 || (align & (align - 1)) != 0)
      throw Napi::RangeError::New(info.Env(), "Workspace.alloc: align must be a power of two");
    const size_t start = (used_ + align - 1) / align * align;
    if (start + bytes > capacity_) {
      throw Napi::RangeError::New(
          info.Env(), "step workspace exhausted: " + std::to_string(bytes) + " more bytes needed with " +
                          std::to_string(used_) + " of " + std::to_string(capacity_) +
                          " in use; raise the backend's workspaceBytes option");
    }
    used_ = start + bytes;
    if (used_ > peak_) peak_ = used_;
    return ptrValue(info.Env(), static_cast<char*>(base_) + start);
  }
  Napi::Value Reset(const Napi::CallbackInfo& info) {
    live(info);
    used_ = 0;
    return info.Env().Undefined();
  }
  Napi::Value SetUsed(const Napi::CallbackInfo& info) {
    live(info);
    Args a(info, 1, "Workspace.setUsed");
    const size_t n = a.size(0);
    if (n > capacity_) throw Napi::RangeError::New(info.Env(), "Workspace.setUsed: beyond the capacity");
    used_ = n;
    if (used_ > peak_) peak_ = used_;
    return info.Env().Undefined();
  }
  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    if (!disposed_) {
      disposed_ = true;
      void* b = base_;
      base_ = nullptr;
      capacity_ = used_ = 0;
      if (b != nullptr) HS_CUDA(cudaFree(b));
    }
    return info.Env().Undefined();
  }
  void* base_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
  size_t peak_ = 0;
  bool disposed_ = false;
};

}  // namespace

void initWorkspace(Napi::Env env, Napi::Object exports) {
  exports.Set("Workspace", Workspace::Define(env));
}

}  // namespace hs
