// GEMM for `linear`: y = x @ W^T (+ bias) with bf16/f16 operands, fp32 accumulation and bf16/f16
// or f32 output, through cuBLASLt (bias fused as the BIAS epilogue) or cublasGemmEx (+ bias
// kernel) as the fallback or when asked for. gemmStridedBatched: the general column-major strided
// batched GEMM (cublasGemmStridedBatchedEx) for attention-shaped products (mla_prefill.ts).
//
// Layout: cuBLAS is column-major. Row-major x [T, K] is column-major [K, T] (ld K); row-major
// W [N, K] is column-major [K, N] (ld K); row-major y [T, N] is column-major [N, T] (ld N). So
// y^T = op_T(W) * x^T: m = N, n = T, k = K, A = W with op T, B = x with op N, D = y.
#include <cstring>
#include <string>
#include <unordered_map>

#include "../kernels/kernels.h"
#include "common.h"
#include "cublas_dl.h"

namespace hs {
namespace {

using namespace blas;

cudaDataType_t toCudaType(int dtype) {
  switch (dtype) {
    case HS_DTYPE_F32: return CUDA_R_32F;
    case HS_DTYPE_BF16: return CUDA_R_16BF;
    case HS_DTYPE_F16: return CUDA_R_16F;
    default: throw std::runtime_error("Blas.linear: unsupported dtype code " + std::to_string(dtype));
  }
}

void checkBlas(cublasStatus_t st, const char* call, int line) {
  if (st != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string(call) + " failed at blas.cc:" + std::to_string(line) + ": " + statusText(st));
  }
}
#define HS_BLAS(call) checkBlas((call), #call, __LINE__)

/** One cached cuBLASLt configuration for a (shape, dtypes, bias) combination. */
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr;
  cublasLtMatrixLayout_t b = nullptr;
  cublasLtMatrixLayout_t d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool usable = false;     ///< the heuristic returned an algorithm
  bool fusedBias = false;  ///< the BIAS epilogue is set in desc
};

/**
 * JS class Blas({workspaceBytes?: number = 32 MiB, mode?: "lt" | "gemmex" = "lt"}):
 *   linear(stream, y, x, w, bias, T, N, K, inDtype, outDtype, biasDtype); mode; version;
 *   cublasPath; numPlans; dispose();
 *   gemmStridedBatched(stream, transA, transB, m, n, k, alpha, A, lda, strideA, B, ldb, strideB,
 *     beta, C, ldc, strideC, batchCount, abDtype, cDtype): column-major, per batch b
 *     C_b = alpha op(A_b) op(B_b) + beta C_b with X_b = X + b * strideX elements, fp32 accumulation.
 * @throws when cuBLAS cannot be loaded (message from blas::load()).
 */
class Blas : public Napi::ObjectWrap<Blas> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Blas",
                       {InstanceMethod<&Blas::Linear>("linear"), InstanceAccessor<&Blas::Mode>("mode"),
                        InstanceAccessor<&Blas::Version>("version"), InstanceAccessor<&Blas::Path>("cublasPath"),
                        InstanceAccessor<&Blas::NumPlans>("numPlans"), InstanceMethod<&Blas::Dispose>("dispose"),
                        InstanceMethod<&Blas::GemmStridedBatched>("gemmStridedBatched")});
  }

  explicit Blas(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Blas>(info), api_(load()) {
    Napi::Object opts = info.Length() > 0 && info[0].IsObject() ? info[0].As<Napi::Object>() : Napi::Object::New(info.Env());
    wsBytes_ = static_cast<size_t>(optNumber(opts, "workspaceBytes", 32.0 * (1 << 20)));
    const std::string mode = optString(opts, "mode", "lt");
    if (mode != "lt" && mode != "gemmex") throw Napi::TypeError::New(info.Env(), "Blas mode must be \"lt\" or \"gemmex\"");
    useLt_ = mode == "lt";
    try {
      if (wsBytes_ > 0) HS_CUDA(cudaMalloc(&ws_, wsBytes_));
      HS_BLAS(api_.ltCreate(&lt_));
      HS_BLAS(api_.cublasCreate(&cublas_));
    } catch (...) {
      release();  // the destructor does not run when a constructor throws
      throw;
    }
  }
  ~Blas() override { release(); }

 private:
  void release() {
    for (auto& [key, p] : plans_) destroyPlan(p);
    plans_.clear();
    if (lt_ != nullptr) api_.ltDestroy(lt_);
    if (cublas_ != nullptr) api_.cublasDestroy(cublas_);
    if (ws_ != nullptr) (void)cudaFree(ws_);
    lt_ = nullptr;
    cublas_ = nullptr;
    ws_ = nullptr;
    disposed_ = true;
  }
  void destroyPlan(LtPlan& p) {
    if (p.desc) api_.ltMatmulDescDestroy(p.desc);
    if (p.a) api_.ltMatrixLayoutDestroy(p.a);
    if (p.b) api_.ltMatrixLayoutDestroy(p.b);
    if (p.d) api_.ltMatrixLayoutDestroy(p.d);
    p = LtPlan{};
  }

  /** Builds desc + layouts and asks the heuristic for one algorithm (with the bias epilogue if asked). */
  bool tryPlan(LtPlan& p, int n, int t, int k, int inT, int outT, int biasT, const void* bias) {
    const cudaDataType_t in = toCudaType(inT);
    const cudaDataType_t out = toCudaType(outT);
    HS_BLAS(api_.ltMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const int32_t opT = CUBLAS_OP_T;
    const int32_t opN = CUBLAS_OP_N;
    HS_BLAS(api_.ltMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof(opT)));
    HS_BLAS(api_.ltMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof(opN)));
    if (biasT >= 0) {
      const uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
      const int32_t bt = toCudaType(biasT);
      HS_BLAS(api_.ltMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
      HS_BLAS(api_.ltMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
      HS_BLAS(api_.ltMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
      p.fusedBias = true;
    }
    HS_BLAS(api_.ltMatrixLayoutCreate(&p.a, in, k, n, k));   // W: column-major [K, N]
    HS_BLAS(api_.ltMatrixLayoutCreate(&p.b, in, k, t, k));   // x: column-major [K, T]
    HS_BLAS(api_.ltMatrixLayoutCreate(&p.d, out, n, t, n));  // y: column-major [N, T]
    cublasLtMatmulPreference_t pref = nullptr;
    HS_BLAS(api_.ltMatmulPreferenceCreate(&pref));
    const uint64_t maxWs = wsBytes_;
    cublasLtMatmulHeuristicResult_t result;
    std::memset(&result, 0, sizeof(result));
    int found = 0;
    cublasStatus_t st = api_.ltMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &maxWs,
                                                            sizeof(maxWs));
    if (st == CUBLAS_STATUS_SUCCESS)
      st = api_.ltMatmulAlgoGetHeuristic(lt_, p.desc, p.a, p.b, p.d, p.d, pref, 1, &result, &found);
    api_.ltMatmulPreferenceDestroy(pref);
    p.usable = st == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
    if (p.usable) p.algo = result.algo;
    return p.usable;
  }

  LtPlan& plan(int n, int t, int k, int inT, int outT, int biasT, const void* bias) {
    const std::string key = std::to_string(n) + ":" + std::to_string(t) + ":" + std::to_string(k) + ":" +
                            std::to_string(inT) + ":" + std::to_string(outT) + ":" + std::to_string(biasT);
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second;
    if (plans_.size() >= kMaxPlans) {  // prefill shapes vary with T: bound the cache
      for (auto& [k2, p] : plans_) destroyPlan(p);
      plans_.clear();
    }
    LtPlan p;
    if (!tryPlan(p, n, t, k, inT, outT, biasT, bias) && biasT >= 0) {
      destroyPlan(p);  // no algorithm with the fused bias: plain GEMM + bias kernel
      tryPlan(p, n, t, k, inT, outT, -1, nullptr);
    }
    return plans_.emplace(key, p).first->second;
  }

  /** Binds the cuBLAS handle to stream s (and our workspace). */
  void bindStream(cudaStream_t s) {
    if (s != cublasStream_ || !cublasStreamSet_) {
      HS_BLAS(api_.cublasSetStream(cublas_, s));
      // cublasSetStream resets the workspace to cuBLAS's own pool: set ours again (no allocation
      // inside graph capture).
      if (ws_ != nullptr) HS_BLAS(api_.cublasSetWorkspace(cublas_, ws_, wsBytes_));
      cublasStream_ = s;
      cublasStreamSet_ = true;
    }
  }

  void gemmEx(cudaStream_t s, void* y, const void* x, const void* w, int n, int t, int k, int inT, int outT) {
    bindStream(s);
    const float alpha = 1.f;
    const float beta = 0.f;
    HS_BLAS(api_.cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, n, t, k, &alpha, w, toCudaType(inT), k, x,
                              toCudaType(inT), k, &beta, y, toCudaType(outT), n, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
  }

  Napi::Value Linear(const Napi::CallbackInfo& info) {
    if (disposed_) throw Napi::Error::New(info.Env(), "Blas is disposed");
    Args a(info, 11, "Blas.linear");
    cudaStream_t s = a.stream(0);
    void* y = a.ptr(1);
    const void* x = a.ptr(2);
    const void* w = a.ptr(3);
    const void* bias = a.ptr(4);  // 0 = no bias
    const int t = a.i32(5), n = a.i32(6), k = a.i32(7);
    const int inT = a.i32(8), outT = a.i32(9), biasT = bias ? a.i32(10) : -1;
    if (t < 0 || n <= 0 || k <= 0) throw Napi::RangeError::New(info.Env(), "Blas.linear: invalid shape");
    if (t == 0) return info.Env().Undefined();
    const bool aligned256 = ((reinterpret_cast<uintptr_t>(y) | reinterpret_cast<uintptr_t>(x) |
                              reinterpret_cast<uintptr_t>(w) | reinterpret_cast<uintptr_t>(bias)) & 255) == 0;
    bool biasDone = false;
    bool done = false;
    if (useLt_ && aligned256) {
      LtPlan& p = plan(n, t, k, inT, outT, biasT, bias);
      if (p.usable) {
        if (p.fusedBias) {
          HS_BLAS(api_.ltMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
          biasDone = true;
        }
        const float alpha = 1.f;
        const float beta = 0.f;
        HS_BLAS(api_.ltMatmul(lt_, p.desc, &alpha, w, p.a, x, p.b, &beta, y, p.d, y, p.d, &p.algo, ws_, wsBytes_, s));
        done = true;
      }
    }
    if (!done) gemmEx(s, y, x, w, n, t, k, inT, outT);
    if (bias != nullptr && !biasDone) HS_LAUNCH(hsBiasAdd, s, y, bias, t, n, outT, biasT);
    return info.Env().Undefined();
  }

  Napi::Value GemmStridedBatched(const Napi::CallbackInfo& info) {
    if (disposed_) throw Napi::Error::New(info.Env(), "Blas is disposed");
    Args a(info, 20, "Blas.gemmStridedBatched");
    const int m = a.i32(3), n = a.i32(4), k = a.i32(5), batch = a.i32(17);
    if (m < 0 || n < 0 || k < 0 || batch < 0)
      throw Napi::RangeError::New(info.Env(), "Blas.gemmStridedBatched: invalid shape");
    if (m == 0 || n == 0 || batch == 0) return info.Env().Undefined();
    const float alpha = a.f32(6), beta = a.f32(13);
    const cudaDataType_t ab = toCudaType(a.i32(18));
    bindStream(a.stream(0));
    HS_BLAS(api_.cublasGemmStridedBatchedEx(
        cublas_, a.flag(1) ? CUBLAS_OP_T : CUBLAS_OP_N, a.flag(2) ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha,
        a.ptr(7), ab, a.i32(8), static_cast<long long>(a.size(9)), a.ptr(10), ab, a.i32(11),
        static_cast<long long>(a.size(12)), &beta, a.ptr(14), toCudaType(a.i32(19)), a.i32(15),
        static_cast<long long>(a.size(16)), batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return info.Env().Undefined();
  }

  Napi::Value Mode(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), useLt_ ? "lt" : "gemmex"); }
  Napi::Value Version(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(api_.ltGetVersion()));
  }
  Napi::Value Path(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), api_.cublasPath); }
  Napi::Value NumPlans(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(plans_.size()));
  }
  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    if (!disposed_) release();
    return info.Env().Undefined();
  }

  static constexpr size_t kMaxPlans = 4096;
  const Api& api_;
  cublasLtHandle_t lt_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cudaStream_t cublasStream_ = nullptr;
  bool cublasStreamSet_ = false;
  void* ws_ = nullptr;
  size_t wsBytes_ = 0;
  bool useLt_ = true;
  bool disposed_ = false;
  std::unordered_map<std::string, LtPlan> plans_;
};

}  // namespace

void initBlas(Napi::Env env, Napi::Object exports) {
  exports.Set("Blas", Blas::Define(env));
}

}  // namespace hs
