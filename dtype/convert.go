package dtype

// Convert returns src with every element converted to To: exactly from
// float32 to float64, to the nearest float32 (ties to even) from float64.
func Convert[To, From float32 | float64](src []From) []To {
	dst := make([]To, len(src))
	for i, v := range src {
		dst[i] = To(v)
	}
	return dst
}
