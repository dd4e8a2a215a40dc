// Streams, events and CUDA graphs (stream capture -> instantiate -> replay).
#include "common.h"

namespace hs {
namespace {

/**
 * JS class Stream({nonBlocking?: boolean = true}): handle (address of the cudaStream_t, passed to
 * every launcher), synchronize(), query() -> true when idle, waitEvent(eventHandle), dispose().
 */
class Stream : public Napi::ObjectWrap<Stream> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Stream",
                       {InstanceAccessor<&Stream::Handle>("handle"),
                        InstanceMethod<&Stream::Synchronize>("synchronize"),
                        InstanceMethod<&Stream::Query>("query"), InstanceMethod<&Stream::WaitEvent>("waitEvent"),
                        InstanceMethod<&Stream::Dispose>("dispose")});
  }
  explicit Stream(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Stream>(info) {
    bool nonBlocking = true;
    if (info.Length() > 0 && info[0].IsObject()) nonBlocking = optBool(info[0].As<Napi::Object>(), "nonBlocking", true);
    HS_CUDA(cudaStreamCreateWithFlags(&stream_, nonBlocking ? cudaStreamNonBlocking : cudaStreamDefault));
  }
  ~Stream() override {
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }

 private:
  cudaStream_t get(const Napi::CallbackInfo& info) {
    if (stream_ == nullptr) throw Napi::Error::New(info.Env(), "Stream is disposed");
    return stream_;
  }
  Napi::Value Handle(const Napi::CallbackInfo& info) { return ptrValue(info.Env(), get(info)); }
  Napi::Value Synchronize(const Napi::CallbackInfo& info) {
    HS_CUDA(cudaStreamSynchronize(get(info)));
    return info.Env().Undefined();
  }
  Napi::Value Query(const Napi::CallbackInfo& info) {
    const cudaError_t err = cudaStreamQuery(get(info));
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return Napi::Boolean::New(info.Env(), false);
    }
    HS_CUDA(err);
    return Napi::Boolean::New(info.Env(), true);
  }
  Napi::Value WaitEvent(const Napi::CallbackInfo& info) {
    Args a(info, 1, "Stream.waitEvent");
    HS_CUDA(cudaStreamWaitEvent(get(info), static_cast<cudaEvent_t>(a.ptr(0)), 0));
    return info.Env().Undefined();
  }
  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    if (stream_ != nullptr) {
      cudaStream_t s = stream_;
      stream_ = nullptr;
      HS_CUDA(cudaStreamDestroy(s));
    }
    return info.Env().Undefined();
  }
  cudaStream_t stream_ = nullptr;
};

/**
 * JS class Event({timing?: boolean = false}): handle, record(streamHandle), synchronize(),
 * query() -> true when complete, elapsedMs(startEventHandle) (both need timing), dispose().
 */
class Event : public Napi::ObjectWrap<Event> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Event",
                       {InstanceAccessor<&Event::Handle>("handle"), InstanceMethod<&Event::Record>("record"),
                        InstanceMethod<&Event::Synchronize>("synchronize"), InstanceMethod<&Event::Query>("query"),
                        InstanceMethod<&Event::ElapsedMs>("elapsedMs"), InstanceMethod<&Event::Dispose>("dispose")});
  }
  explicit Event(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Event>(info) {
    bool timing = false;
    if (info.Length() > 0 && info[0].IsObject()) timing = optBool(info[0].As<Napi::Object>(), "timing", false);
    HS_CUDA(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
  }
  ~Event() override {
    if (event_ != nullptr) (void)cudaEventDestroy(event_);
  }

 private:
  cudaEvent_t get(const Napi::CallbackInfo& info) {
    if (event_ == nullptr) throw Napi::Error::New(info.Env(), "Event is disposed");
    return event_;
  }
  Napi::Value Handle(const Napi::CallbackInfo& info) { return ptrValue(info.Env(), get(info)); }
  Napi::Value Record(const Napi::CallbackInfo& info) {
    Args a(info, 1, "Event.record");
    HS_CUDA(cudaEventRecord(get(info), a.stream(0)));
    return info.Env().Undefined();
  }
  Napi::Value Synchronize(const Napi::CallbackInfo& info) {
    HS_CUDA(cudaEventSynchronize(get(info)));
    return info.Env().Undefined();
  }
  Napi::Value Query(const Napi::CallbackInfo& info) {
    const cudaError_t err = cudaEventQuery(get(info));
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return Napi::Boolean::New(info.Env(), false);
    }
    HS_CUDA(err);
    return Napi::Boolean::New(info.Env(), true);
  }
  Napi::Value ElapsedMs(const Napi::CallbackInfo& info) {
    Args a(info, 1, "Event.elapsedMs");
    float ms = 0.f;
    HS_CUDA(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(a.ptr(0)), get(info)));
    return Napi::Number::New(info.Env(), ms);
  }
  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    if (event_ != nullptr) {
      cudaEvent_t e = event_;
      event_ = nullptr;
      HS_CUDA(cudaEventDestroy(e));
    }
    return info.Env().Undefined();
  }
  cudaEvent_t event_ = nullptr;
};

/**
 * JS class CudaGraph(): captureBegin(streamHandle) starts a thread-local stream capture;
 * captureEnd() ends it and instantiates the graph; captureAbort() ends a failed capture and drops
 * it; launch(streamHandle) replays; numNodes; dispose().
 * Thread-local capture mode: CUDA calls that are unsafe during capture (cudaMalloc, synchronous
 * copies, stream syncs) fail on the capturing thread instead of corrupting the graph.
 */
class CudaGraph : public Napi::ObjectWrap<CudaGraph> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "CudaGraph",
                       {InstanceMethod<&CudaGraph::CaptureBegin>("captureBegin"),
                        InstanceMethod<&CudaGraph::CaptureEnd>("captureEnd"),
                        InstanceMethod<&CudaGraph::CaptureAbort>("captureAbort"),
                        InstanceMethod<&CudaGraph::Launch>("launch"),
                        InstanceAccessor<&CudaGraph::NumNodes>("numNodes"),
                        InstanceMethod<&CudaGraph::Dispose>("dispose")});
  }
  explicit CudaGraph(const Napi::CallbackInfo& info) : Napi::ObjectWrap<CudaGraph>(info) {}
  ~CudaGraph() override { release(); }

 private:
  void release() {
    if (exec_ != nullptr) (void)cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) (void)cudaGraphDestroy(graph_);
    exec_ = nullptr;
    graph_ = nullptr;
  }
  Napi::Value CaptureBegin(const Napi::CallbackInfo& info) {
    Args a(info, 1, "CudaGraph.captureBegin");
    if (capturing_ != nullptr || exec_ != nullptr)
      throw Napi::Error::New(info.Env(), "CudaGraph.captureBegin: this graph was already captured");
    HS_CUDA(cudaStreamBeginCapture(a.stream(0), cudaStreamCaptureModeThreadLocal));
    capturing_ = a.stream(0);
    return info.Env().Undefined();
  }
  Napi::Value CaptureEnd(const Napi::CallbackInfo& info) {
    if (capturing_ == nullptr) throw Napi::Error::New(info.Env(), "CudaGraph.captureEnd: no capture in progress");
    cudaStream_t s = capturing_;
    capturing_ = nullptr;
    HS_CUDA(cudaStreamEndCapture(s, &graph_));
    HS_CUDA(cudaGraphInstantiate(&exec_, graph_, 0));
    return info.Env().Undefined();
  }
  Napi::Value CaptureAbort(const Napi::CallbackInfo& info) {
    if (capturing_ != nullptr) {
      cudaGraph_t g = nullptr;
      (void)cudaStreamEndCapture(capturing_, &g);
      if (g != nullptr) (void)cudaGraphDestroy(g);
      (void)cudaGetLastError();
      capturing_ = nullptr;
    }
    return info.Env().Undefined();
  }
  Napi::Value Launch(const Napi::CallbackInfo& info) {
    Args a(info, 1, "CudaGraph.launch");
    if (exec_ == nullptr) throw Napi::Error::New(info.Env(), "CudaGraph.launch: the graph is not instantiated");
    HS_CUDA(cudaGraphLaunch(exec_, a.stream(0)));
    return info.Env().Undefined();
  }
  Napi::Value NumNodes(const Napi::CallbackInfo& info) {
    size_t n = 0;
    if (graph_ != nullptr) HS_CUDA(cudaGraphGetNodes(graph_, nullptr, &n));
    return Napi::Number::New(info.Env(), static_cast<double>(n));
  }
  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    release();
    return info.Env().Undefined();
  }
  cudaStream_t capturing_ = nullptr;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace

void initStreams(Napi::Env env, Napi::Object exports) {
  exports.Set("Stream", Stream::Define(env));
  exports.Set("Event", Event::Define(env));
  exports.Set("CudaGraph", CudaGraph::Define(env));
}

}  // namespace hs
