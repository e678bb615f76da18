//go:build !unix

package capability

import (
	"errors"
	"time"
)

// errUnsupportedPlatform is returned by every Store operation on a platform
// without POSIX file locking and ownership: this implementation requires
// Linux, and refuses elsewhere instead of storing credentials insecurely.
var errUnsupportedPlatform = errors.New("capability: the credential store requires Linux")

// Store is the credential store. On this platform every operation refuses.
type Store struct{}

// Open refuses on this platform.
func Open(string) (*Store, error) { return nil, errUnsupportedPlatform }

// OpenWith refuses on this platform.
func OpenWith(string, Options) (*Store, error) { return nil, errUnsupportedPlatform }

// Create refuses on this platform.
func (*Store) Create(string, []Permission, string) (string, Capability, error) {
	return "", Capability{}, errUnsupportedPlatform
}

// CreateExpiring refuses on this platform.
func (*Store) CreateExpiring(string, []Permission, string, time.Duration) (string, Capability, error) {
	return "", Capability{}, errUnsupportedPlatform
}

// List refuses on this platform.
func (*Store) List() ([]Capability, error) { return nil, errUnsupportedPlatform }

// Revoke refuses on this platform.
func (*Store) Revoke(string) error { return errUnsupportedPlatform }

// Authenticate refuses on this platform.
func (*Store) Authenticate(string) (Capability, error) { return Capability{}, errUnsupportedPlatform }

// AcceptRestored refuses on this platform.
func AcceptRestored(string, Options) (*Store, error) { return nil, errUnsupportedPlatform }

// Generation returns 0 on this platform.
func (*Store) Generation() uint64 { return 0 }

// Accepted returns no acceptance on this platform.
func (*Store) Accepted() Acceptance { return Acceptance{} }

// RecordGeneration refuses on this platform.
func (*Store) RecordGeneration() error { return errUnsupportedPlatform }
