// N-API functions over the paged attention and sampling launchers (native/kernels/attention.h,
// sampling.h, written on branch wip/cuda-attn). The attention launchers take the fields of
// HsPagedAttentionParams as one named object, read by the generated readParams (params.gen.h,
// shared with hisparse.cc's sparseDecodeAttention). When a header is absent at build time the
// functions still exist but throw, and buildInfo.hasAttention / hasSampling are false.
#include "common.h"

#if __has_include("../kernels/attention.h")
#include "../kernels/attention.h"
#include "params.gen.h"
#define HS_HAVE_ATTENTION 1
#else
#define HS_HAVE_ATTENTION 0
#endif
#if __has_include("../kernels/sampling.h")
#include "../kernels/sampling.h"
#define HS_HAVE_SAMPLING 1
#else
#define HS_HAVE_SAMPLING 0
#endif

namespace hs {
namespace {

[[maybe_unused, noreturn]] void missing(const Napi::CallbackInfo& info, const char* what, const char* header) {
  throw Napi::Error::New(info.Env(), std::string("this build of the native addon has no ") + what + " (native/kernels/" +
                                         header + " was absent at build time); merge the kernels and rerun "
                                         "`npm run build:native`");
}

/** pagedAttentionWorkspaceBytes(maxNumReqs, maxNumTokens, numHeads, headDim, maxModelLen, blockSize). */
Napi::Value AttentionWorkspaceBytes(const Napi::CallbackInfo& info) {
#if HS_HAVE_ATTENTION
  Args a(info, 6, "pagedAttentionWorkspaceBytes");
  const size_t n = hsPagedAttentionWorkspaceBytes(a.i32(0), a.i32(1), a.i32(2), a.i32(3), a.i32(4), a.i32(5));
  return Napi::Number::New(info.Env(), static_cast<double>(n));
#else
  missing(info, "paged attention kernels", "attention.h");
#endif
}

/** pagedPrefillWorkspaceBytes(numReqs, numTokens, numHeads, numKvHeads, headDim, maxQueryLen, maxModelLen). */
Napi::Value PrefillWorkspaceBytes(const Napi::CallbackInfo& info) {
#if HS_HAVE_ATTENTION
  Args a(info, 7, "pagedPrefillWorkspaceBytes");
  const size_t n =
      hsPagedPrefillWorkspaceBytes(a.i32(0), a.i32(1), a.i32(2), a.i32(3), a.i32(4), a.i32(5), a.i32(6));
  return Napi::Number::New(info.Env(), static_cast<double>(n));
#else
  missing(info, "paged attention kernels", "attention.h");
#endif
}

/** pagedDecodeAttention(stream, params: the fields of HsPagedAttentionParams by name; params.gen.h). */
Napi::Value PagedDecodeAttention(const Napi::CallbackInfo& info) {
#if HS_HAVE_ATTENTION
  Args a(info, 2, "pagedDecodeAttention");
  HsPagedAttentionParams p{};
  readParams(ParamObject(info, 1, "pagedDecodeAttention"), p);
  checkLaunch(hsPagedDecodeAttention(&p, a.stream(0)), "hsPagedDecodeAttention", a.stream(0), __FILE__, __LINE__);
  return info.Env().Undefined();
#else
  missing(info, "paged attention kernels", "attention.h");
#endif
}

/** pagedPrefillAttention(stream, params: as pagedDecodeAttention, maxQueryLen). */
Napi::Value PagedPrefillAttention(const Napi::CallbackInfo& info) {
#if HS_HAVE_ATTENTION
  Args a(info, 3, "pagedPrefillAttention");
  HsPagedAttentionParams p{};
  readParams(ParamObject(info, 1, "pagedPrefillAttention"), p);
  checkLaunch(hsPagedPrefillAttention(&p, a.i32(2), a.stream(0)), "hsPagedPrefillAttention", a.stream(0), __FILE__,
              __LINE__);
  return info.Env().Undefined();
#else
  missing(info, "paged attention kernels", "attention.h");
#endif
}

/** setDecodeMinSplitTokens(tokens) -> previous (hsSetDecodeMinSplitTokens; tokens <= 0 reads). */
Napi::Value SetDecodeMinSplitTokens(const Napi::CallbackInfo& info) {
#if HS_HAVE_ATTENTION
  Args a(info, 1, "setDecodeMinSplitTokens");
  return Napi::Number::New(info.Env(), hsSetDecodeMinSplitTokens(a.i32(0)));
#else
  missing(info, "paged attention kernels", "attention.h");
#endif
}

/** sampleWorkspaceBytes(B, V). */
Napi::Value SampleWorkspaceBytes(const Napi::CallbackInfo& info) {
#if HS_HAVE_SAMPLING
  Args a(info, 2, "sampleWorkspaceBytes");
  return Napi::Number::New(info.Env(), static_cast<double>(hsSampleWorkspaceBytes(a.i32(0), a.i32(1))));
#else
  missing(info, "GPU sampler", "sampling.h");
#endif
}

/** sample(stream, logits, B, V, temperature, topK, topP, minP, uniform, outIds, workspace, workspaceBytes). */
Napi::Value Sample(const Napi::CallbackInfo& info) {
#if HS_HAVE_SAMPLING
  Args a(info, 12, "sample");
  checkLaunch(hsSample(a.as<const float>(1), a.i32(2), a.i32(3), a.as<const float>(4), a.as<const int>(5),
                       a.as<const float>(6), a.as<const float>(7), a.as<const float>(8), a.as<int>(9), a.ptr(10),
                       a.size(11), a.stream(0)),
              "hsSample", a.stream(0), __FILE__, __LINE__);
  return info.Env().Undefined();
#else
  missing(info, "GPU sampler", "sampling.h");
#endif
}

}  // namespace

void initAttention(Napi::Env env, Napi::Object exports) {
  exports.Set("pagedAttentionWorkspaceBytes",
              Napi::Function::New(env, AttentionWorkspaceBytes, "pagedAttentionWorkspaceBytes"));
  exports.Set("pagedDecodeAttention", Napi::Function::New(env, PagedDecodeAttention, "pagedDecodeAttention"));
  exports.Set("pagedPrefillAttention", Napi::Function::New(env, PagedPrefillAttention, "pagedPrefillAttention"));
  exports.Set("pagedPrefillWorkspaceBytes",
              Napi::Function::New(env, PrefillWorkspaceBytes, "pagedPrefillWorkspaceBytes"));
  exports.Set("setDecodeMinSplitTokens",
              Napi::Function::New(env, SetDecodeMinSplitTokens, "setDecodeMinSplitTokens"));
  exports.Set("sampleWorkspaceBytes", Napi::Function::New(env, SampleWorkspaceBytes, "sampleWorkspaceBytes"));
  exports.Set("sample", Napi::Function::New(env, Sample, "sample"));
}

bool haveAttention() {
  return HS_HAVE_ATTENTION != 0;
}
bool haveSampling() {
  return HS_HAVE_SAMPLING != 0;
}

}  // namespace hs
