package capability

import "time"

// TokenPrefix starts every token, so that leaked tokens are recognizable.
const TokenPrefix = "riffdb_"

// DefaultRefreshInterval is how often, at most, Authenticate checks whether
// another process changed the store file.
const DefaultRefreshInterval = 250 * time.Millisecond

// Options tunes a Store. The zero value selects the defaults.
type Options struct {
	// Now is the clock for creation times and refresh throttling
	// (default time.Now).
	Now func() time.Time
	// RefreshInterval bounds how often Authenticate stats the store file
	// (default DefaultRefreshInterval).
	RefreshInterval time.Duration
}
