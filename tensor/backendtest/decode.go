package backendtest

import "math"

// DecodeAttention is the float64 brute force of tensor.Backend's
// DecodeAttention: for q [heads, n, headDim] and caches k, v [kvHeads,
// maxLen, headDim], row i of query head h attends to the first m_i keys of
// kv head h/(heads/kvHeads), m_i = length−n+i+1 with causal and length
// without; it returns out [heads, n, headDim].
func DecodeAttention[T float32 | float64](q []T, heads, n, headDim int, k, v []T, kvHeads, maxLen, length int, causal bool, scale float64) []float64 {
	out := make([]float64, heads*n*headDim)
	for h := range heads {
		g := h / (heads / kvHeads)
		for i := range n {
			m := length
			if causal {
				m = length - n + i + 1
			}
			s := make([]float64, m)
			mx := math.Inf(-1)
			for j := range s {
				for d := range headDim {
					s[j] += float64(q[(h*n+i)*headDim+d]) * float64(k[(g*maxLen+j)*headDim+d])
				}
				s[j] *= scale
				mx = max(mx, s[j])
			}
			var z float64
			for j := range s {
				s[j] = math.Exp(s[j] - mx)
				z += s[j]
			}
			for j := range s {
				for d := range headDim {
					out[(h*n+i)*headDim+d] += s[j] / z * float64(v[(g*maxLen+j)*headDim+d])
				}
			}
		}
	}
	return out
}
