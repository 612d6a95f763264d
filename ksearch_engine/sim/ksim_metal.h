// Precompiled-header entry for Metal kernels: ksim.h in its Metal dialect (see build.py).
#pragma once
#define KSIM_METAL 1
#include "ksim.h"
// MSL 3.2 memory scopes of atomic_thread_fence (everything is sequentially consistent here)
enum ksim_thread_scope { thread_scope_thread, thread_scope_simdgroup, thread_scope_threadgroup, thread_scope_device };
