// Flash attention forward (non-causal), fp32, head dim fixed at compile time.
//   o[bh, i, :] = sum_j softmax_j(scale * q[bh, i, :] . k[bh, j, :]) * v[bh, j, :]
// One query row per thread. K and V are staged through shared memory in tiles of
// BLOCK_KV keys; each thread keeps an online softmax (running max m, running sum l)
// and a rescaled accumulator in registers, so the score matrix is never stored.
#include <cuda_runtime.h>
#include <math.h>

#define BLOCK_KV 32

template <int HEAD_DIM>
__global__ void flash_attention_kernel(const float* __restrict__ q, const float* __restrict__ k,
                                       const float* __restrict__ v, float* __restrict__ o,
                                       int q_len, int kv_len, float scale) {
    __shared__ float k_tile[BLOCK_KV][HEAD_DIM];
    __shared__ float v_tile[BLOCK_KV][HEAD_DIM];
    const int bh = blockIdx.y;
    const int qi = blockIdx.x * blockDim.x + threadIdx.x;
    const bool active = qi < q_len;
    const float* qh = q + (size_t)bh * q_len * HEAD_DIM;
    const float* kh = k + (size_t)bh * kv_len * HEAD_DIM;
    const float* vh = v + (size_t)bh * kv_len * HEAD_DIM;

    float qr[HEAD_DIM];
    float acc[HEAD_DIM];
    for (int d = 0; d < HEAD_DIM; ++d) {
        qr[d] = active ? qh[qi * HEAD_DIM + d] * scale : 0.0f;
        acc[d] = 0.0f;
    }
    float m = -INFINITY;
    float l = 0.0f;

    for (int j0 = 0; j0 < kv_len; j0 += BLOCK_KV) {
        // Every thread helps load the tile, active or not.
        for (int idx = threadIdx.x; idx < BLOCK_KV * HEAD_DIM; idx += blockDim.x) {
            const int j = idx / HEAD_DIM;
            const int d = idx % HEAD_DIM;
            const bool in_range = j0 + j < kv_len;
            k_tile[j][d] = in_range ? kh[(j0 + j) * HEAD_DIM + d] : 0.0f;
            v_tile[j][d] = in_range ? vh[(j0 + j) * HEAD_DIM + d] : 0.0f;
        }
        __syncthreads();
        const int jn = min(BLOCK_KV, kv_len - j0);
        for (int j = 0; j < jn; ++j) {
            float s = 0.0f;
            for (int d = 0; d < HEAD_DIM; ++d) {
                s += qr[d] * k_tile[j][d];
            }
            const float m_new = fmaxf(m, s);
            const float correction = __expf(m - m_new);
            const float p = __expf(s - m_new);
            l = l * correction + p;
            for (int d = 0; d < HEAD_DIM; ++d) {
                acc[d] = acc[d] * correction + p * v_tile[j][d];
            }
            m = m_new;
        }
        __syncthreads();  // the tile is overwritten next iteration
    }

    if (active) {
        const float inv_l = 1.0f / l;
        for (int d = 0; d < HEAD_DIM; ++d) {
            o[(size_t)bh * q_len * HEAD_DIM + qi * HEAD_DIM + d] = acc[d] * inv_l;
        }
    }
}

// q, o: [batch_heads, q_len, 64]; k, v: [batch_heads, kv_len, 64].
void flash_attention(const float* q, const float* k, const float* v, float* o,
                     int batch_heads, int q_len, int kv_len, float scale, cudaStream_t stream) {
    const int threads = 64;
    dim3 grid((q_len + threads - 1) / threads, batch_heads);
    flash_attention_kernel<64><<<grid, threads, 0, stream>>>(q, k, v, o, q_len, kv_len, scale);
}
