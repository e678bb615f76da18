package server

import (
	"go.uber.org/zap"

	"fmt"

	"github.com/riffdb/riffdb/capability"
	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/primary"
)

// CredentialAnchor keeps the credential store's generation in the directory
// of every database of a configuration (primary.ReadCredentialAnchor), so
// that an older copy of the credential directory put back is refused
// (capability.ErrRolledBack). The server and the offline capability
// commands use the same anchor: every write of the store raises it, from
// whichever process. The recorded generation is the highest over the
// databases, so a database restored from a backup (its anchor missing or
// older) does not lower it while another database still holds it.
type CredentialAnchor struct {
	dbs []config.Database
}

var _ capability.Anchor = CredentialAnchor{}

// NewCredentialAnchor returns the credential anchor of cfg's databases.
func NewCredentialAnchor(cfg *config.Config) CredentialAnchor {
	return CredentialAnchor{dbs: cfg.Databases}
}

// Load returns the highest generation recorded by any database, and the
// acceptance recorded with it. A database not created yet records none.
func (a CredentialAnchor) Load() (capability.Acceptance, error) {
	var out capability.Acceptance
	for _, db := range a.dbs {
		r, err := primary.ReadCredentialAnchor(db.Path)
		if err != nil {
			return capability.Acceptance{}, fmt.Errorf("database %q: %w", db.Alias, err)
		}
		switch {
		case r.Generation > out.Generation:
			out = capability.Acceptance{Generation: r.Generation, AcceptedFrom: r.AcceptedFrom}
		case r.Generation == out.Generation:
			out.AcceptedFrom = max(out.AcceptedFrom, r.AcceptedFrom)
		}
	}
	return out, nil
}

// Raise records generation in every database whose record is lower.
func (a CredentialAnchor) Raise(generation uint64) error {
	for _, db := range a.dbs {
		r, err := primary.ReadCredentialAnchor(db.Path)
		if err != nil {
			return fmt.Errorf("database %q: %w", db.Alias, err)
		}
		if r.Generation >= generation {
			continue
		}
		if _, err := primary.WriteCredentialAnchor(db.Path, primary.CredentialAnchor{Generation: generation}); err != nil {
			return fmt.Errorf("database %q: %w", db.Alias, err)
		}
	}
	return nil
}

// Accept records acc in every database, lowering higher records.
func (a CredentialAnchor) Accept(acc capability.Acceptance) error {
	for _, db := range a.dbs {
		rec := primary.CredentialAnchor{Generation: acc.Generation, AcceptedFrom: acc.AcceptedFrom}
		if _, err := primary.WriteCredentialAnchor(db.Path, rec); err != nil {
			return fmt.Errorf("database %q: %w", db.Alias, err)
		}
	}
	return nil
}

// logAcceptedCredentials logs, at warn level, that the credential store runs
// at a generation an operator accepted after a rollback (capability
// accept-restored), at every start until the next write of the store
// records a higher generation.
func (s *Server) logAcceptedCredentials() {
	if a := s.creds.Accepted(); a.AcceptedFrom != 0 {
		s.log.Warn("the credential store was accepted after a rollback: an operator accepted this older copy "+
			"(capability accept-restored), so capabilities revoked after it was taken are live again",
			zap.Uint64("generation", a.Generation), zap.Uint64("recorded_generation", a.AcceptedFrom))
	}
}
