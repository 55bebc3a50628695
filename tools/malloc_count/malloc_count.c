// Counts a process's allocations (malloc, calloc, realloc, aligned_alloc, memalign, posix_memalign) for the
// per-request figures in docs/benchmarks.md ("Per-request path"). Loaded with LD_PRELOAD; a thread writes the
// running total to $MCOUNT_FILE every 50 ms, so a benchmark reads it before and after a load and divides by the
// requests served in between.
//   gcc -O2 -shared -fPIC -o /tmp/malloc_count.so tools/malloc_count/malloc_count.c -ldl -lpthread
//   MCOUNT_FILE=/tmp/mc LD_PRELOAD=/tmp/malloc_count.so build/prefixgate --config gateway.yaml
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static atomic_ulong count;

static void counted(void) { atomic_fetch_add_explicit(&count, 1, memory_order_relaxed); }

// dlsym itself calls calloc before the real one is known: those first calls are served from this buffer.
static char bootstrap[65536];
static size_t bootstrap_used;

void* malloc(size_t size) {
  static void* (*real)(size_t);
  if (!real) real = dlsym(RTLD_NEXT, "malloc");
  counted();
  return real(size);
}

void* calloc(size_t n, size_t size) {
  static void* (*real)(size_t, size_t);
  if (!real) {
    if (bootstrap_used + n * size > sizeof bootstrap) return NULL;
    void* p = bootstrap + bootstrap_used;
    bootstrap_used += (n * size + 15) & ~(size_t)15;
    real = dlsym(RTLD_NEXT, "calloc");
    return p;
  }
  counted();
  return real(n, size);
}

void* realloc(void* p, size_t size) {
  static void* (*real)(void*, size_t);
  if (!real) real = dlsym(RTLD_NEXT, "realloc");
  counted();
  return real(p, size);
}

void* aligned_alloc(size_t align, size_t size) {
  static void* (*real)(size_t, size_t);
  if (!real) real = dlsym(RTLD_NEXT, "aligned_alloc");
  counted();
  return real(align, size);
}

void* memalign(size_t align, size_t size) {
  static void* (*real)(size_t, size_t);
  if (!real) real = dlsym(RTLD_NEXT, "memalign");
  counted();
  return real(align, size);
}

int posix_memalign(void** p, size_t align, size_t size) {
  static int (*real)(void**, size_t, size_t);
  if (!real) real = dlsym(RTLD_NEXT, "posix_memalign");
  counted();
  return real(p, align, size);
}

void free(void* p) {
  static void (*real)(void*);
  if ((char*)p >= bootstrap && (char*)p < bootstrap + sizeof bootstrap) return;
  if (!real) real = dlsym(RTLD_NEXT, "free");
  real(p);
}

static void* writer(void* path) {
  for (;;) {
    usleep(50000);
    FILE* out = fopen(path, "w");
    if (out) {
      fprintf(out, "%lu\n", atomic_load(&count));
      fclose(out);
    }
  }
  return NULL;
}

__attribute__((constructor)) static void start(void) {
  const char* path = getenv("MCOUNT_FILE");
  if (!path) return;
  pthread_t thread;
  pthread_create(&thread, NULL, writer, (void*)path);
  pthread_detach(thread);
}
