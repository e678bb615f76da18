//go:build unix

package capability

import (
	"bytes"
	"cmp"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/riffdb/riffdb/internal/hygiene/alias"

	"github.com/riffdb/riffdb/internal/process/clock"
)

// File names inside the credential directory.
const (
	keyFile   = "key"
	storeFile = "capabilities.json"
	lockFile  = "lock"
)

const (
	keySize      = 32
	tokenBytes   = 32
	idBytes      = 8
	maxNameBytes = 128
)

// Store is a credential store in one directory. It is safe for concurrent
// use by many goroutines, and by several processes sharing the directory
// (see the package documentation).
type Store struct {
	dir     string
	key     []byte
	now     func() time.Time
	every   time.Duration
	compare func(a, b []byte) bool // hmac.Equal; tests observe it
	macs    sync.Pool              // *macState of key, for mac and Authenticate

	// anchor keeps the generation outside the directory (nil: none); see
	// anchor.go. It is set once Open has checked the store against it.
	anchor Anchor

	mu         sync.Mutex
	records    []record
	generation uint64 // the generation of records
	floor      uint64 // the lowest generation the store may be read at; see admit
	accepted   Acceptance
	ident      fileIdent
	lastCheck  time.Time
	reads      int // store-file reads, for tests
}

// Open opens the credential store in dir, creating dir (mode 0700) and, on
// first use, the HMAC key and an empty store. dir must then be a directory
// with mode exactly 0700 owned by the effective uid, not a symbolic link.
// Errors wrap ErrInsecure or ErrCorrupt where those apply and never contain
// the path.
func Open(dir string) (*Store, error) {
	return OpenWith(dir, Options{})
}

// OpenWith is Open with options. With o.Anchor it refuses a store older
// than its anchor with ErrRolledBack (see the package documentation).
func OpenWith(dir string, o Options) (*Store, error) {
	return open(dir, o, false)
}

// open opens the store; accept lowers the anchor to a rolled-back store's
// generation instead of refusing it (AcceptRestored).
func open(dir string, o Options, accept bool) (*Store, error) {
	s := &Store{
		dir:     dir,
		now:     clock.Or(o.Clock).Now,
		every:   cmp.Or(o.RefreshInterval, DefaultRefreshInterval),
		compare: hmac.Equal,
	}
	if err := prepareDir(dir); err != nil {
		return nil, err
	}
	err := s.locked(func() error {
		if err := s.initialize(); err != nil {
			return err
		}
		if err := s.reload(); err != nil {
			return err
		}
		return s.checkAnchor(o.Anchor, accept)
	})
	if err != nil {
		return nil, err
	}
	s.lastCheck = s.now()
	return s, nil
}

// statIdent returns the identity of the store file without reading it.
func (s *Store) statIdent() (fileIdent, error) {
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(s.dir, storeFile), &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return fileIdent{}, corrupt("the store file is missing")
		}
		return fileIdent{}, fmt.Errorf("capability: examining the store file: %w", err)
	}
	return identOf(&st), nil
}

// initialize creates the key (and an empty store) on first use. It runs
// under the lock.
func (s *Store) initialize() error {
	key, _, err := readPrivate(filepath.Join(s.dir, keyFile), "key file")
	if err == nil {
		if len(key) != keySize {
			return corrupt("the key file holds %d bytes, want %d", len(key), keySize)
		}
		// Other damage to the key is found by the store file's integrity
		// check; a zero-filled key gets a message of its own.
		if bytes.Count(key, []byte{0}) == keySize {
			return corrupt("the key file is zero-filled")
		}
		s.key = key
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	// No key yet. A store with capabilities but no key means the key was
	// lost: refuse rather than silently invalidating every token.
	data, _, err := readPrivate(filepath.Join(s.dir, storeFile), "store file")
	switch {
	case err == nil:
		// Without the key the integrity tag cannot be checked; the
		// capabilities are only counted.
		doc, err := decode(data, nil)
		if err != nil {
			return err
		}
		if len(doc.Capabilities) > 0 {
			return corrupt("the key file is missing but the store file holds %d capabilities", len(doc.Capabilities))
		}
	case errors.Is(err, fs.ErrNotExist):
	default:
		return err
	}
	key = make([]byte, keySize)
	if _, err := rand.Read(key); err != nil {
		return fmt.Errorf("capability: generating the key: %w", err)
	}
	// The empty store, sealed with the new key, is written before the key,
	// so a crash in between leaves an empty store without a key, which the
	// next Open re-keys and completes.
	s.key = key
	if err := s.write(document{Generation: 1, Capabilities: []record{}}); err != nil {
		s.key = nil
		return err
	}
	if err := writeAtomic(s.dir, keyFile, key); err != nil {
		s.key = nil
		return err
	}
	return nil
}

// reload reads the store file unconditionally and replaces the cache, unless
// the file is older than the store may be read at (admit). The caller holds
// s.mu or has exclusive access.
func (s *Store) reload() error {
	data, ident, err := readPrivate(filepath.Join(s.dir, storeFile), "store file")
	if errors.Is(err, fs.ErrNotExist) {
		return corrupt("the store file is missing while its key file exists")
	}
	if err != nil {
		return err
	}
	s.reads++
	doc, err := decode(data, s.key)
	if err != nil {
		return err
	}
	if err := s.admit(doc.Generation); err != nil {
		return err
	}
	s.records, s.generation = doc.Capabilities, doc.Generation
	s.ident = ident
	return nil
}

// refresh re-reads the store file if its identity changed. Unless force is
// set, it checks at most once per refresh interval. The caller holds s.mu.
func (s *Store) refresh(force bool) error {
	now := s.now()
	if !force && now.Sub(s.lastCheck) < s.every && !now.Before(s.lastCheck) {
		return nil
	}
	ident, err := s.statIdent()
	if err != nil {
		return err
	}
	if ident != s.ident {
		// A failed reload is not a check: until one succeeds, every call
		// tries again and fails, instead of serving the old capabilities
		// for another interval.
		if err := s.reload(); err != nil {
			return err
		}
	}
	s.lastCheck = now
	return nil
}

// write replaces the store file atomically. It runs under the lock.
func (s *Store) write(doc document) error {
	data, err := s.encode(doc)
	if err != nil {
		return err
	}
	return writeAtomic(s.dir, storeFile, data)
}

// mutate runs f on a fresh copy of the store under the lock, writes the
// result, and updates the cache.
func (s *Store) mutate(f func(doc *document) error) error {
	return s.locked(func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if err := s.reload(); err != nil {
			return err
		}
		doc := document{Generation: s.generation + 1, Capabilities: slices.Clone(s.records)}
		if err := f(&doc); err != nil {
			return err
		}
		if err := s.write(doc); err != nil {
			// The file may or may not have been replaced; re-read next time.
			s.ident = fileIdent{}
			return err
		}
		ident, err := s.statIdent()
		if err != nil {
			s.ident = fileIdent{}
			return err
		}
		s.records, s.generation, s.ident, s.lastCheck = doc.Capabilities, doc.Generation, ident, s.now()
		s.floor = max(s.floor, doc.Generation)
		return s.raiseAnchor(doc.Generation)
	})
}

// Create adds a capability with perms, scoped to database ("" for global),
// and returns its token. The token is returned only here and is never
// stored. The capability does not expire. Errors wrap ErrInvalid for an
// empty or unknown permission, or a malformed name or database alias.
func (s *Store) Create(name string, perms []Permission, database string) (string, Capability, error) {
	return s.CreateExpiring(name, perms, database, 0)
}

// CreateExpiring is Create for a capability whose token stops
// authenticating lifetime after its creation, by the store's clock.
// lifetime 0 means never; otherwise it must be positive and at most
// MaxLifetime (ErrInvalid).
func (s *Store) CreateExpiring(name string, perms []Permission, database string, lifetime time.Duration) (string, Capability, error) {
	if lifetime < 0 || lifetime > MaxLifetime {
		return "", Capability{}, fmt.Errorf("%w: the lifetime must be positive and at most %v", ErrInvalid, MaxLifetime)
	}
	if err := validName(name); err != nil {
		return "", Capability{}, err
	}
	if database != "" && !alias.Valid(database) {
		return "", Capability{}, fmt.Errorf("%w: database alias %q is malformed", ErrInvalid, truncate(database, 64))
	}
	if len(perms) == 0 {
		return "", Capability{}, fmt.Errorf("%w: at least one permission is required", ErrInvalid)
	}
	var canonical []Permission
	for _, p := range perms {
		if _, err := ParsePermission(string(p)); err != nil {
			return "", Capability{}, err
		}
	}
	for _, p := range allPermissions {
		if slices.Contains(perms, p) {
			canonical = append(canonical, p)
		}
	}
	raw := make([]byte, tokenBytes)
	if _, err := rand.Read(raw); err != nil {
		return "", Capability{}, fmt.Errorf("capability: generating a token: %w", err)
	}
	token := TokenPrefix + base64.RawURLEncoding.EncodeToString(raw)
	var created record
	err := s.mutate(func(doc *document) error {
		id, err := newID(doc.Capabilities)
		if err != nil {
			return err
		}
		now := s.now().UTC().Round(0)
		created = record{Capability: Capability{
			ID: id, Name: name, Permissions: canonical, Database: database, CreatedAt: now,
		}, hash: s.mac(token)}
		if lifetime > 0 {
			created.ExpiresAt = now.Add(lifetime)
		}
		created.TokenHash = hex.EncodeToString(created.hash)
		doc.Capabilities = append(doc.Capabilities, created)
		return nil
	})
	if err != nil {
		return "", Capability{}, err
	}
	return token, created.capability(), nil
}

func newID(existing []record) (string, error) {
	for {
		b := make([]byte, idBytes)
		if _, err := rand.Read(b); err != nil {
			return "", fmt.Errorf("capability: generating an id: %w", err)
		}
		id := hex.EncodeToString(b)
		if !slices.ContainsFunc(existing, func(r record) bool { return r.ID == id }) {
			return id, nil
		}
	}
}

func validID(id string) bool {
	if len(id) != 2*idBytes {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil && strings.ToLower(id) == id
}

func validName(name string) error {
	if len(name) > maxNameBytes {
		return fmt.Errorf("%w: the name is longer than %d bytes", ErrInvalid, maxNameBytes)
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("%w: the name is not valid UTF-8", ErrInvalid)
	}
	if strings.IndexFunc(name, unicode.IsControl) >= 0 {
		return fmt.Errorf("%w: the name contains control characters", ErrInvalid)
	}
	return nil
}

// List returns every capability, revoked ones included, oldest first. It
// always checks the store file for changes.
func (s *Store) List() ([]Capability, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.refresh(true); err != nil {
		return nil, err
	}
	out := make([]Capability, len(s.records))
	for i, r := range s.records {
		out[i] = r.capability()
	}
	slices.SortStableFunc(out, func(a, b Capability) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	return out, nil
}

// Revoke revokes the capability with id. Revoking a revoked capability
// succeeds and changes nothing. It returns ErrNotFound for an unknown id.
func (s *Store) Revoke(id string) error {
	if !validID(id) {
		return fmt.Errorf("%w: no capability has id %q", ErrNotFound, truncate(id, 64))
	}
	return s.mutate(func(doc *document) error {
		for i := range doc.Capabilities {
			r := &doc.Capabilities[i]
			if r.ID != id {
				continue
			}
			if !r.Revoked {
				at := s.now().UTC().Round(0)
				r.Revoked, r.RevokedAt = true, &at
			}
			return nil
		}
		return fmt.Errorf("%w: no capability has id %q", ErrNotFound, id)
	})
}

// Authenticate returns the capability whose token is token. A malformed,
// unknown, revoked or expired token yields ErrUnauthenticated; a token is
// expired from its ExpiresAt on, by the store's clock. It sees changes made
// by other processes within the refresh interval; it stats the store file at
// most once per interval and reads it only when it changed. Any other error
// (a corrupt or insecure store) means the store cannot be trusted and the
// request must fail.
func (s *Store) Authenticate(token string) (Capability, error) {
	rest, ok := strings.CutPrefix(token, TokenPrefix)
	if !ok || len(rest) != base64.RawURLEncoding.EncodedLen(tokenBytes) {
		return Capability{}, fmt.Errorf("%w: malformed token", ErrUnauthenticated)
	}
	var raw [tokenBytes]byte
	if n, err := base64.RawURLEncoding.Strict().Decode(raw[:], []byte(rest)); err != nil || n != tokenBytes {
		return Capability{}, fmt.Errorf("%w: malformed token", ErrUnauthenticated)
	}
	st := s.macState()
	defer s.macs.Put(st)
	mac := st.sum(token)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.refresh(false); err != nil {
		return Capability{}, err
	}
	// Compare against every record without an early exit, so the time
	// taken does not depend on which record (if any) matches.
	match := -1
	for i := range s.records {
		if s.compare(mac, s.records[i].hash) {
			match = i
		}
	}
	if match < 0 {
		return Capability{}, fmt.Errorf("%w: unknown token", ErrUnauthenticated)
	}
	if s.records[match].Revoked {
		return Capability{}, fmt.Errorf("%w: revoked token", ErrUnauthenticated)
	}
	if s.records[match].Expired(s.now()) {
		return Capability{}, fmt.Errorf("%w: expired token", ErrUnauthenticated)
	}
	return s.records[match].capability(), nil
}

// mac returns the keyed hash of token, in a slice of its own.
func (s *Store) mac(token string) []byte {
	st := s.macState()
	defer s.macs.Put(st)
	return bytes.Clone(st.sum(token))
}

// macState is an HMAC state of the store's key with the buffers it hashes
// from and sums into, kept in s.macs: making a state hashes the key into
// both pads (two SHA-256 blocks) and allocated ten objects, and hashing
// the token through a new []byte of it and summing into a new slice two
// more, on the path of every authenticated request. The key is set once,
// while Open initializes the store, before any call.
type macState struct {
	h   hash.Hash
	in  []byte // the token's bytes
	out []byte // the sum; HMAC appends the inner sum and then the outer one here
}

func (s *Store) macState() *macState {
	st, _ := s.macs.Get().(*macState)
	if st == nil {
		return &macState{h: hmac.New(sha256.New, s.key), out: make([]byte, 0, 2*sha256.Size)}
	}
	st.h.Reset()
	return st
}

// sum returns the keyed hash of token, valid until st is used again.
func (st *macState) sum(token string) []byte {
	st.in = append(st.in[:0], token...)
	st.h.Write(st.in)
	st.out = st.h.Sum(st.out[:0])
	return st.out
}

func (r record) capability() Capability {
	c := r.Capability
	c.Permissions = slices.Clone(r.Permissions)
	return c
}
