// MoE router: softmax over expert logits, then the TOPK largest probabilities per token,
// renormalized to sum to one (Mixtral-style). One thread per token.
//   logits: [num_tokens, num_experts]  ->  weights: [num_tokens, TOPK] (float), ids: [num_tokens, TOPK] (int)
#include <cuda_runtime.h>
#include <math.h>

template <int TOPK>
__global__ void topk_routing_kernel(const float* __restrict__ logits, float* __restrict__ weights,
                                    int* __restrict__ ids, int num_tokens, int num_experts) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= num_tokens) return;
    const float* row = logits + (size_t)t * num_experts;

    float m = -INFINITY;
    for (int e = 0; e < num_experts; ++e) m = fmaxf(m, row[e]);
    float denom = 0.0f;
    for (int e = 0; e < num_experts; ++e) denom += __expf(row[e] - m);

    int chosen[TOPK];
    float chosen_p[TOPK];
    float total = 0.0f;
    for (int k = 0; k < TOPK; ++k) {
        int best = -1;
        float best_logit = -INFINITY;
        for (int e = 0; e < num_experts; ++e) {
            bool taken = false;
            for (int j = 0; j < k; ++j) taken = taken || (chosen[j] == e);
            if (!taken && row[e] > best_logit) {
                best_logit = row[e];
                best = e;
            }
        }
        chosen[k] = best;
        chosen_p[k] = __expf(best_logit - m) / denom;
        total += chosen_p[k];
    }
    for (int k = 0; k < TOPK; ++k) {
        weights[t * TOPK + k] = chosen_p[k] / total;
        ids[t * TOPK + k] = chosen[k];
    }
}

void topk_routing(const float* logits, float* weights, int* ids, int num_tokens, int num_experts,
                  cudaStream_t stream) {
    const int threads = 128;
    const int blocks = (num_tokens + threads - 1) / threads;
    topk_routing_kernel<2><<<blocks, threads, 0, stream>>>(logits, weights, ids, num_tokens, num_experts);
}
