/*
 * A debugging aid for crashes in native code on the GPU machine (no gdb there): preloaded with
 * LD_PRELOAD, it installs a SIGSEGV/SIGBUS/SIGILL/SIGABRT handler on an alternate stack that
 * prints the faulting address and the return addresses of the stack, each as module + offset
 * (+ symbol when exported), then re-raises the signal. Node.js installs its own SIGSEGV handler
 * (WebAssembly traps) after this library's constructor: the preloaded sigaction() below keeps
 * ours for the four signals. Build: scripts/gpu/nccl_diag.sh.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

static void describe(void* pc) {
  Dl_info info;
  if (dladdr(pc, &info) && info.dli_fname != NULL) {
    fprintf(stderr, "  %p %s+0x%lx %s+0x%lx\n", pc, info.dli_fname,
            (unsigned long)((char*)pc - (char*)info.dli_fbase), info.dli_sname ? info.dli_sname : "?",
            info.dli_saddr ? (unsigned long)((char*)pc - (char*)info.dli_saddr) : 0UL);
  } else {
    fprintf(stderr, "  %p ?\n", pc);
  }
}

static int installed = 0;

static int traced(int sig) { return sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGABRT; }

/** Preloaded over libc's: once ours is installed, other handlers of the traced signals are ignored. */
int sigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  static int (*real)(int, const struct sigaction*, struct sigaction*) = NULL;
  if (real == NULL) real = (int (*)(int, const struct sigaction*, struct sigaction*))dlsym(RTLD_NEXT, "sigaction");
  if (installed && traced(sig) && act != NULL) return real(sig, NULL, old);
  return real(sig, act, old);
}

static void handler(int sig, siginfo_t* si, void* ucv) {
  ucontext_t* uc = (ucontext_t*)ucv;
  fprintf(stderr, "segv_trace: signal %d (%s) at address %p, thread %ld, pc:\n", sig, strsignal(sig), si->si_addr,
          (long)gettid());
  describe((void*)uc->uc_mcontext.gregs[REG_RIP]);
  void** sp = (void**)uc->uc_mcontext.gregs[REG_RSP];
  fprintf(stderr, "segv_trace: stack pointer %p; words on the stack that point into loaded code:\n", (void*)sp);
  for (int i = 0; i < 256; i++) {
    Dl_info info;
    if (dladdr(sp[i], &info) && info.dli_fname != NULL && (info.dli_sname != NULL || strstr(info.dli_fname, ".node") || strstr(info.dli_fname, "nccl"))) {
      fprintf(stderr, "  [sp+%d]", i * 8);
      describe(sp[i]);
    }
  }
  fprintf(stderr, "segv_trace: backtrace:\n");
  void* frames[64];
  int n = backtrace(frames, 64);
  for (int i = 0; i < n; i++) describe(frames[i]);
  installed = 0;
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigaction(sig, &dfl, NULL);
  raise(sig);
}

__attribute__((constructor)) static void install(void) {
  static char stack[1 << 16];
  stack_t ss = {.ss_sp = stack, .ss_size = sizeof stack, .ss_flags = 0};
  sigaltstack(&ss, NULL);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = handler;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGABRT};
  for (unsigned i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaction(sigs[i], &sa, NULL);
  installed = 1;
}
