// Precompiled-header entry for CUDA kernels: ksim.h in its CUDA dialect (see build.py).
#pragma once
#define KSIM_CUDA 1
#include "ksim.h"
