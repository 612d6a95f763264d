// Precompiled-header entry for Metal kernels: ksim.h in its Metal dialect (see build.py).
#pragma once
#define KSIM_METAL 1
#include "ksim.h"
