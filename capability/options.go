package capability

import (
	"time"

	"github.com/riffdb/riffdb/internal/process/clock"
)

// TokenPrefix starts every token, so that leaked tokens are recognizable.
const TokenPrefix = "riffdb_"

// DefaultRefreshInterval is how often, at most, Authenticate checks whether
// another process changed the store file.
const DefaultRefreshInterval = 250 * time.Millisecond

// Options tunes a Store. The zero value selects the defaults.
type Options struct {
	// Clock is the clock for creation times and refresh throttling
	// (default clock.Real).
	Clock clock.Clock
	// RefreshInterval bounds how often Authenticate stats the store file
	// (default DefaultRefreshInterval).
	RefreshInterval time.Duration
	// Anchor keeps the store's generation outside its directory (default:
	// none). With it, Open refuses a store older than the anchor
	// (ErrRolledBack), and every write raises it.
	Anchor Anchor
}
