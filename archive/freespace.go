package archive

import "time"

// freeSpaceMaxAge bounds how old the free-space measurement may be that the
// free-space guard admits a write against (see checkFreeSpace).
const freeSpaceMaxAge = 100 * time.Millisecond

// freeSpace is the free-space guard's last measurement of the store's
// filesystem: avail bytes were available at time at, and the guard has
// admitted charged bytes since. The zero value holds no measurement.
// Callers hold the store's s.mu (or are Open), as every caller of
// checkFreeSpace does.
type freeSpace struct {
	at      time.Time
	avail   int64
	charged int64
	// unsupported is set once the filesystem could not measure its free
	// space (an in-memory one): the guard then admits every write.
	unsupported bool
}

// stale reports whether a write of need bytes beyond what must stay free
// (MinFreeBytes + charge) has to be checked against a new measurement: there
// is none, it is freeSpaceMaxAge old (or from the future of a clock that
// went back), or the estimate avail − charged is below 2 × need.
func (g *freeSpace) stale(now time.Time, need int64) bool {
	if g.at.IsZero() || now.Before(g.at) || now.Sub(g.at) >= freeSpaceMaxAge {
		return true
	}
	return g.avail-g.charged-need < need
}
