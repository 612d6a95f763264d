// Precompiled-header entry for a CUDA kernel file run without its program (cuda_source.py): ksim.h in its CUDA
// dialect with the CPU CUDA runtime's host API (ksim_host.h) declared and defined, so that host code the file
// or its headers hold (timers, allocation helpers, classes with member functions) compiles although it never
// runs here, and texture objects made for a workload (portinfer) are real. Nothing of the capture's runs at load.
#pragma once
#define KSIM_KERNEL_ONLY 1
#include "ksim_host.h"
// the driver API's names of the same handles (a kernel file of a driver-API program takes a CUtexObject)
typedef cudaTextureObject_t CUtexObject;
typedef cudaSurfaceObject_t CUsurfObject;
