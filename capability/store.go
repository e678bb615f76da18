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
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/riffdb/riffdb/internal/alias"
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

// Store file versions. This build writes storeVersion, whose files carry an
// integrity tag. Earlier builds wrote legacyVersion files, without one: they
// are read as they are and sealed by the next write (Create or Revoke).
const (
	storeVersion  = 2
	legacyVersion = 1
)

// integrityDomain starts the input of the store file's integrity tag. The
// key also hashes tokens; no token contains a NUL byte, so no token hash can
// be taken for a tag, nor a tag for a token hash.
const integrityDomain = "riffdb credential store integrity\x00version "

// restoreAdvice ends every ErrCorrupt message. A damaged store is never
// repaired in place: guessing would grant or deny the wrong tokens.
const restoreAdvice = "restore the credential directory (the key file and the store file together) from a backup, " +
	"or move it aside and create new capabilities"

// Store is a credential store in one directory. It is safe for concurrent
// use by many goroutines, and by several processes sharing the directory
// (see the package documentation).
type Store struct {
	dir     string
	key     []byte
	now     func() time.Time
	every   time.Duration
	compare func(a, b []byte) bool // hmac.Equal; tests observe it

	mu        sync.Mutex
	records   []record
	ident     fileIdent
	lastCheck time.Time
	reads     int // store-file reads, for tests
}

// record is one capability as stored: its description (whose fields
// encoding/json flattens into the record) plus what only the store keeps.
type record struct {
	Capability
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	TokenHash string     `json:"token_hash"` // hex HMAC-SHA-256(key, token)

	hash []byte
}

// document is the content of the store file, as held in memory.
type document struct {
	Capabilities []record
}

// storeFileJSON is the store file as stored. Capabilities stays raw
// because the integrity tag covers its bytes as they are in the file
// (compacted), not a re-encoding of what was decoded: a damaged byte is
// noticed even where decoding would hide it (invalid UTF-8 in a name decodes
// as U+FFFD). decodeTop reads it; the tags serve encoding.
type storeFileJSON struct {
	Version      int             `json:"version"`
	Capabilities json.RawMessage `json:"capabilities"`
	// Integrity is hex HMAC-SHA-256(key, integrityDomain ‖ version ‖ NUL ‖
	// compacted capabilities); absent in legacyVersion files.
	Integrity string `json:"integrity,omitempty"`
}

// fileIdent identifies one version of the store file. Writers replace the
// file by rename, so the inode changes on every write; times and size guard
// against inode reuse.
type fileIdent struct {
	dev, ino, size int64
	mtime, ctime   unix.Timespec
}

// Open opens the credential store in dir, creating dir (mode 0700) and, on
// first use, the HMAC key and an empty store. dir must then be a directory
// with mode exactly 0700 owned by the effective uid, not a symbolic link.
// Errors wrap ErrInsecure or ErrCorrupt where those apply and never contain
// the path.
func Open(dir string) (*Store, error) {
	return OpenWith(dir, Options{})
}

// OpenWith is Open with options.
func OpenWith(dir string, o Options) (*Store, error) {
	s := &Store{
		dir:     dir,
		now:     o.Now,
		every:   cmp.Or(o.RefreshInterval, DefaultRefreshInterval),
		compare: hmac.Equal,
	}
	if o.Now == nil {
		s.now = time.Now
	}
	if err := prepareDir(dir); err != nil {
		return nil, err
	}
	err := s.locked(func() error {
		if err := s.initialize(); err != nil {
			return err
		}
		return s.reload()
	})
	if err != nil {
		return nil, err
	}
	s.lastCheck = s.now()
	return s, nil
}

func prepareDir(dir string) error {
	var st unix.Stat_t
	err := unix.Lstat(dir, &st)
	if errors.Is(err, unix.ENOENT) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("capability: creating the credential directory: %w", pathless(err))
		}
		// The umask may have narrowed the mode; the check below wants 0700.
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("capability: setting the credential directory's mode: %w", pathless(err))
		}
		err = unix.Lstat(dir, &st)
	}
	if err != nil {
		return fmt.Errorf("capability: examining the credential directory: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("%w: the credential path must be a directory, not a symbolic link or file", ErrInsecure)
	}
	if perm := st.Mode & 0o7777; perm != 0o700 {
		return fmt.Errorf("%w: the credential directory has mode %04o, want 0700", ErrInsecure, perm)
	}
	if int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%w: the credential directory is not owned by the server's user", ErrInsecure)
	}
	return nil
}

// locked runs f under the exclusive lock of the store directory.
func (s *Store) locked(f func() error) error {
	path := filepath.Join(s.dir, lockFile)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err == nil {
		// Created now: the umask may have narrowed the mode.
		if err := unix.Fchmod(fd, 0o600); err != nil {
			unix.Close(fd)
			return fmt.Errorf("capability: setting the lock file's mode: %w", err)
		}
	} else if errors.Is(err, unix.EEXIST) {
		fd, err = unix.Open(path, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return fmt.Errorf("%w: the lock file is a symbolic link", ErrInsecure)
		}
		return fmt.Errorf("capability: opening the lock file: %w", err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("capability: examining the lock file: %w", err)
	}
	if err := checkPrivate(&st, "lock file"); err != nil {
		return err
	}
	for {
		err = unix.Flock(fd, unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("capability: locking the credential store: %w", err)
	}
	defer unix.Flock(fd, unix.LOCK_UN) //nolint:errcheck // closing releases it anyway
	return f()
}

// checkPrivate requires a regular 0600 file owned by the effective uid with
// one link.
func checkPrivate(st *unix.Stat_t, what string) error {
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("%w: the %s is not a regular file", ErrInsecure, what)
	case st.Mode&0o7777 != 0o600:
		return fmt.Errorf("%w: the %s has mode %04o, want 0600", ErrInsecure, what, st.Mode&0o7777)
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%w: the %s is not owned by the server's user", ErrInsecure, what)
	case st.Nlink != 1:
		return fmt.Errorf("%w: the %s has %d hard links, want 1", ErrInsecure, what, st.Nlink)
	}
	return nil
}

// readPrivate reads a private file of the store without following links.
// It returns fs.ErrNotExist (wrapped) when the file is absent.
func readPrivate(path, what string) ([]byte, fileIdent, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fileIdent{}, fmt.Errorf("%w: the %s is a symbolic link", ErrInsecure, what)
		}
		if errors.Is(err, unix.ENOENT) {
			return nil, fileIdent{}, fmt.Errorf("capability: the %s is missing: %w", what, fs.ErrNotExist)
		}
		return nil, fileIdent{}, fmt.Errorf("capability: opening the %s: %w", what, err)
	}
	f := os.NewFile(uintptr(fd), what)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fileIdent{}, fmt.Errorf("capability: examining the %s: %w", what, err)
	}
	if err := checkPrivate(&st, what); err != nil {
		return nil, fileIdent{}, err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fileIdent{}, fmt.Errorf("capability: reading the %s: %w", what, pathless(err))
	}
	return data, identOf(&st), nil
}

func identOf(st *unix.Stat_t) fileIdent {
	return fileIdent{dev: int64(st.Dev), ino: int64(st.Ino), size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
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
	if err := s.write(document{Capabilities: []record{}}); err != nil {
		s.key = nil
		return err
	}
	if err := writeAtomic(s.dir, keyFile, key); err != nil {
		s.key = nil
		return err
	}
	return nil
}

// reload reads the store file unconditionally and replaces the cache. The
// caller holds s.mu or has exclusive access.
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
	s.records = doc.Capabilities
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
	s.lastCheck = now
	if ident == s.ident {
		return nil
	}
	return s.reload()
}

// decode parses and checks a store file. A storeVersion file must carry an
// integrity tag, which is verified against key; key is nil only when the key
// file is missing, and the result then cannot be trusted beyond its length.
// A legacyVersion file has no tag and is accepted as it is.
func decode(data, key []byte) (document, error) {
	f, err := decodeTop(data)
	if err != nil {
		return document{}, err
	}
	switch f.Version {
	case storeVersion:
		if err := verify(f, key); err != nil {
			return document{}, err
		}
	case legacyVersion:
		// A legacy file has no tag: a single damaged byte cannot add one,
		// so a legacy file with a tag is damaged too.
		if f.Integrity != "" {
			return document{}, corrupt("the store file has version %d, which has no integrity tag, but carries one", legacyVersion)
		}
	default:
		return document{}, corrupt("the store file has version %d, want %d", f.Version, storeVersion)
	}
	var doc document
	if len(f.Capabilities) > 0 {
		dec := json.NewDecoder(bytes.NewReader(f.Capabilities))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&doc.Capabilities); err != nil {
			return document{}, corrupt("the store file is not valid: %v", err)
		}
	}
	if doc.Capabilities == nil {
		return document{}, corrupt("the store file has no capabilities list")
	}
	ids := make(map[string]bool, len(doc.Capabilities))
	for i := range doc.Capabilities {
		r := &doc.Capabilities[i]
		if !validID(r.ID) || ids[r.ID] {
			return document{}, corrupt("record %d of the store file has a missing, malformed or duplicate id", i)
		}
		ids[r.ID] = true
		h, err := hex.DecodeString(r.TokenHash)
		if err != nil || len(h) != sha256.Size {
			return document{}, corrupt("capability %s has a malformed token hash", r.ID)
		}
		r.hash = h
		if len(r.Permissions) == 0 {
			return document{}, corrupt("capability %s has no permissions", r.ID)
		}
		for _, p := range r.Permissions {
			if _, err := ParsePermission(string(p)); err != nil {
				return document{}, corrupt("capability %s has an unknown permission", r.ID)
			}
		}
		if r.Database != "" && !alias.Valid(r.Database) {
			return document{}, corrupt("capability %s has a malformed database alias", r.ID)
		}
	}
	return doc, nil
}

// decodeTop decodes the top level of a store file. Its field names must be
// spelled exactly: encoding/json would match "Version" to "version", hiding
// a damaged byte outside the part the integrity tag covers.
func decodeTop(data []byte) (storeFileJSON, error) {
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&fields); err != nil {
		return storeFileJSON{}, corrupt("the store file is not valid: %v", err)
	}
	if dec.More() {
		return storeFileJSON{}, corrupt("the store file has trailing data")
	}
	var f storeFileJSON
	for name, raw := range fields {
		var err error
		switch name {
		case "version":
			err = json.Unmarshal(raw, &f.Version)
		case "capabilities":
			f.Capabilities = raw
		case "integrity":
			err = json.Unmarshal(raw, &f.Integrity)
		default:
			return storeFileJSON{}, corrupt("the store file has an unknown field %q", truncate(name, 64))
		}
		if err != nil {
			return storeFileJSON{}, corrupt("the store file's %s is not valid: %v", name, err)
		}
	}
	return f, nil
}

// verify checks the integrity tag of a storeVersion file against key (only
// the tag's form when key is nil). A mismatch cannot tell which file is
// damaged: the key file, the store file, or both, or they come from
// different copies of the directory.
func verify(f storeFileJSON, key []byte) error {
	tag, err := hex.DecodeString(f.Integrity)
	if err != nil || len(tag) != sha256.Size || strings.ToLower(f.Integrity) != f.Integrity {
		return corrupt("the store file's integrity tag is missing or malformed")
	}
	if key == nil {
		return nil
	}
	var caps bytes.Buffer
	if err := json.Compact(&caps, f.Capabilities); err != nil {
		return corrupt("the store file is not valid: %v", err)
	}
	if !hmac.Equal(seal(key, f.Version, caps.Bytes()), tag) {
		return corrupt("the store file's integrity check fails against the key file: " +
			"one of them is damaged, or they are not from the same copy of the credential directory")
	}
	return nil
}

// seal returns the integrity tag of a store file's version and compacted
// capabilities.
func seal(key []byte, version int, capabilities []byte) []byte {
	h := hmac.New(sha256.New, key)
	fmt.Fprintf(h, "%s%d\x00", integrityDomain, version)
	h.Write(capabilities)
	return h.Sum(nil)
}

// encode returns the store file for doc, sealed with the store's key. It
// reads the result back before returning it, so that a store this build
// cannot verify is never written.
func (s *Store) encode(doc document) ([]byte, error) {
	if doc.Capabilities == nil {
		doc.Capabilities = []record{}
	}
	caps, err := json.Marshal(doc.Capabilities)
	if err != nil {
		return nil, fmt.Errorf("capability: encoding the store: %w", err)
	}
	data, err := json.MarshalIndent(storeFileJSON{
		Version:      storeVersion,
		Capabilities: caps,
		Integrity:    hex.EncodeToString(seal(s.key, storeVersion, caps)),
	}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("capability: encoding the store: %w", err)
	}
	data = append(data, '\n')
	if _, err := decode(data, s.key); err != nil {
		// Not ErrCorrupt: nothing on disk is damaged.
		return nil, fmt.Errorf("capability: encoding the store: the encoding does not read back: %v", err)
	}
	return data, nil
}

// corrupt returns an error wrapping ErrCorrupt that says what is wrong and
// what the operator can do.
func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s; %s", ErrCorrupt, fmt.Sprintf(format, args...), restoreAdvice)
}

// write replaces the store file atomically. It runs under the lock.
func (s *Store) write(doc document) error {
	data, err := s.encode(doc)
	if err != nil {
		return err
	}
	return writeAtomic(s.dir, storeFile, data)
}

// writeAtomic writes data to dir/name through a synced temporary file, a
// rename and a sync of the directory.
func writeAtomic(dir, name string, data []byte) (err error) {
	tmp, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return fmt.Errorf("capability: creating a temporary %s: %w", name, pathless(err))
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(0o600); err != nil {
		return fmt.Errorf("capability: setting the mode of a temporary %s: %w", name, pathless(err))
	}
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("capability: writing %s: %w", name, pathless(err))
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("capability: syncing %s: %w", name, pathless(err))
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("capability: closing %s: %w", name, pathless(err))
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("capability: replacing %s: %w", name, pathless(err))
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("capability: opening the credential directory: %w", pathless(err))
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("capability: syncing the credential directory: %w", pathless(err))
	}
	return nil
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
		doc := document{Capabilities: slices.Clone(s.records)}
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
		s.records, s.ident, s.lastCheck = doc.Capabilities, ident, s.now()
		return nil
	})
}

// Create adds a capability with perms, scoped to database ("" for global),
// and returns its token. The token is returned only here and is never
// stored. Errors wrap ErrInvalid for an empty or unknown permission, or a
// malformed name or database alias.
func (s *Store) Create(name string, perms []Permission, database string) (string, Capability, error) {
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
		created = record{Capability: Capability{
			ID: id, Name: name, Permissions: canonical, Database: database,
			CreatedAt: s.now().UTC().Round(0),
		}, hash: s.mac(token)}
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
// unknown or revoked token yields ErrUnauthenticated. It sees changes made
// by other processes within the refresh interval; it stats the store file at
// most once per interval and reads it only when it changed. Any other error
// (a corrupt or insecure store) means the store cannot be trusted and the
// request must fail.
func (s *Store) Authenticate(token string) (Capability, error) {
	rest, ok := strings.CutPrefix(token, TokenPrefix)
	if !ok || len(rest) != base64.RawURLEncoding.EncodedLen(tokenBytes) {
		return Capability{}, fmt.Errorf("%w: malformed token", ErrUnauthenticated)
	}
	if raw, err := base64.RawURLEncoding.Strict().DecodeString(rest); err != nil || len(raw) != tokenBytes {
		return Capability{}, fmt.Errorf("%w: malformed token", ErrUnauthenticated)
	}
	mac := s.mac(token)
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
	return s.records[match].capability(), nil
}

func (s *Store) mac(token string) []byte {
	h := hmac.New(sha256.New, s.key)
	h.Write([]byte(token))
	return h.Sum(nil)
}

func (r record) capability() Capability {
	c := r.Capability
	c.Permissions = slices.Clone(r.Permissions)
	return c
}

// pathless strips the path from a *fs.PathError or *os.LinkError, so that
// messages never reveal where the store lives.
func pathless(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return fmt.Errorf("%s: %w", le.Op, le.Err)
	}
	return err
}
