// Paged attention, decode step (one query token per sequence), grouped-query attention.
// K/V live in fixed-size pages: k_cache, v_cache: [num_pages, page_size, num_kv_heads, HEAD_DIM].
// block_table[b, i] is the page holding positions [i*page_size, (i+1)*page_size) of sequence b;
// context_lens[b] is its length. q, out: [batch, num_heads, HEAD_DIM].
// One warp per (sequence, query head); each lane owns HEAD_DIM/32 dims, the q.k dot product is
// reduced with butterfly shuffles and the softmax is computed online.
#include <cuda_runtime.h>
#include <math.h>

template <int HEAD_DIM>
__global__ void paged_decode_kernel(const float* __restrict__ q, const float* __restrict__ k_cache,
                                    const float* __restrict__ v_cache, const int* __restrict__ block_table,
                                    const int* __restrict__ context_lens, float* __restrict__ out,
                                    int num_heads, int num_kv_heads, int page_size, int max_pages,
                                    float scale) {
    constexpr int PER_LANE = HEAD_DIM / 32;
    const int h = blockIdx.x;
    const int b = blockIdx.y;
    const int lane = threadIdx.x;
    const int kv_h = h / (num_heads / num_kv_heads);
    const int ctx = context_lens[b];
    const float* qh = q + ((size_t)b * num_heads + h) * HEAD_DIM;

    float qr[PER_LANE];
    float acc[PER_LANE];
    for (int i = 0; i < PER_LANE; ++i) {
        qr[i] = qh[lane + i * 32] * scale;
        acc[i] = 0.0f;
    }
    float m = -INFINITY;
    float l = 0.0f;
    for (int pos = 0; pos < ctx; ++pos) {
        const int page = block_table[b * max_pages + pos / page_size];
        const int slot = pos % page_size;
        const size_t base = (((size_t)page * page_size + slot) * num_kv_heads + kv_h) * HEAD_DIM;
        float s = 0.0f;
        for (int i = 0; i < PER_LANE; ++i) s += qr[i] * k_cache[base + lane + i * 32];
        for (int offset = 16; offset > 0; offset >>= 1) s += __shfl_xor_sync(0xffffffff, s, offset);
        const float m_new = fmaxf(m, s);
        const float correction = __expf(m - m_new);
        const float p = __expf(s - m_new);
        l = l * correction + p;
        for (int i = 0; i < PER_LANE; ++i) acc[i] = acc[i] * correction + p * v_cache[base + lane + i * 32];
        m = m_new;
    }
    const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
    float* oh = out + ((size_t)b * num_heads + h) * HEAD_DIM;
    for (int i = 0; i < PER_LANE; ++i) oh[lane + i * 32] = acc[i] * inv_l;
}

void paged_decode(const float* q, const float* k_cache, const float* v_cache, const int* block_table,
                  const int* context_lens, float* out, int batch, int num_heads, int num_kv_heads,
                  int page_size, int max_pages, float scale, cudaStream_t stream) {
    dim3 grid(num_heads, batch);
    paged_decode_kernel<64><<<grid, 32, 0, stream>>>(q, k_cache, v_cache, block_table, context_lens,
                                                     out, num_heads, num_kv_heads, page_size, max_pages,
                                                     scale);
}
