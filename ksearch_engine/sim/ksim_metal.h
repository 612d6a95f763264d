// Precompiled-header entry for Metal kernels: ksim.h in its Metal dialect (see build.py).
#pragma once
#define KSIM_METAL 1
#include "ksim.h"
// MSL 3.2 memory scopes of atomic_thread_fence (everything is sequentially consistent here)
enum ksim_thread_scope { thread_scope_thread, thread_scope_simdgroup, thread_scope_threadgroup, thread_scope_device };
// Metal has no clock: a Metal kernel that calls clock()/clock64() does not compile on a Mac, so not here either
// (the translator's Metal ports read ks_clock instead: specs/translation.yaml time.clock)
void ksim_metal_has_no_clock_use_a_counter() = delete;
#define clock() ksim_metal_has_no_clock_use_a_counter()
#define clock64() ksim_metal_has_no_clock_use_a_counter()
// Metal has no C library: memcpy does not compile on a Mac, so not here either (ksim.h's own uses come before this;
// the translator's Metal ports copy a class's payload with ks_memcpy: specs/translation.yaml class.member_rules)
void ksim_metal_has_no_memcpy_copy_the_elements() = delete;
#define memcpy(d, s, n) ksim_metal_has_no_memcpy_copy_the_elements()
// nor memset (the translator's Metal ports fill bytes with ks_memset: specs/translation.yaml mem.memset_local)
void ksim_metal_has_no_memset_set_the_elements() = delete;
#define memset(d, v, n) ksim_metal_has_no_memset_set_the_elements()
