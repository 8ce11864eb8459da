package gpu

// SetReplaySegment sets the calls per graph of d's replayed regions, so a
// test's short region spans several graphs.
func SetReplaySegment(d *Device, n int) { d.replaySeg = n }
