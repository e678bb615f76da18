package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/riffdb/riffdb/internal/hygiene/regularfile"
	"github.com/riffdb/riffdb/internal/hygiene/strictjson"
	"github.com/riffdb/riffdb/internal/store/dirlock"
	"github.com/riffdb/riffdb/internal/store/dirsync"
	"github.com/riffdb/riffdb/internal/store/pace"
)

// Manifest is manifest.json in a backup directory (format 1). Moved-aside
// data (replaced-… entries) carries one too, in the same format.
type Manifest struct {
	Format             int       `json:"format"`               // 1
	Name               string    `json:"name"`                 // the entry's directory name under backup_root
	DatabaseID         string    `json:"database_id"`          // 32 lowercase hex
	HistoryIncarnation uint64    `json:"history_incarnation"`  // of the copied store
	LastCommitSequence uint64    `json:"last_commit_sequence"` // of the copied store
	CreatedAt          time.Time `json:"created_at"`           // UTC
	Files              []File    `json:"files"`                // every file of the store copy, sorted by name
	// Damaged is set by List (never written) for a backup entry whose
	// manifest cannot be read; only Name is known then.
	Damaged bool `json:"damaged,omitempty"`
	// Removed is set by Create (never written): the older backups of the
	// database that its retention removed, oldest first.
	Removed []string `json:"-"`
}

// File is one file of a store copy.
type File struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"` // 64 lowercase hex
}

// Layout of an entry under backup_root.
const (
	manifestFormat = 1
	manifestName   = "manifest.json"
	storeDirName   = "store"
	// partialSuffix marks a backup being written; partialMarker, a file
	// written first into it, proves it is one of ours.
	partialSuffix  = ".partial"
	partialMarker  = "riffdb-backup-partial"
	backupPrefix   = "backup-"
	replacedPrefix = "replaced-"
	// maxManifest bounds what a manifest read takes.
	maxManifest = 64 << 20
	// maxMarker bounds what a partial marker read takes (it holds a
	// database identity).
	maxMarker = 4096
	// nameTime is the time part of entry names: UTC, sortable.
	nameTime = "20060102T150405.000000Z"
)

// checkName reports whether name is a plain entry name.
func checkName(name string) error {
	switch {
	case name == "", name == ".", name == "..", len(name) > 255,
		strings.ContainsAny(name, "/\\\x00"), strings.HasPrefix(name, "."),
		strings.HasSuffix(name, partialSuffix):
		return fmt.Errorf("%w: it must be a backup's entry name under backup_root, without '/', not starting with '.'", ErrInvalidName)
	}
	return nil
}

// readManifest reads and checks the manifest of the entry dir: strict JSON
// (internal/hygiene/strictjson: no repeated key, exact UTF-8, one value) with no
// unknown field, then its fields (Manifest.check). The manifest
// must be a regular file (not a symbolic link): it is opened without
// blocking, so a FIFO is refused as damage instead of holding the caller.
func readManifest(dir string) (Manifest, error) {
	b, _, err := regularfile.Read(filepath.Join(dir, manifestName), maxManifest, regularfile.NoFollow)
	if errors.Is(err, regularfile.ErrTooLarge) {
		return Manifest{}, fmt.Errorf("%w: its manifest is too large", ErrBackupDamaged)
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("%w: its manifest cannot be read: %w", ErrBackupDamaged, err)
	}
	// encoding/json keeps the last of two equal keys and takes invalid
	// UTF-8 as U+FFFD: strictjson refuses both, so the manifest read is the
	// one written.
	if err := strictjson.Validate(b); err != nil {
		return Manifest{}, fmt.Errorf("%w: its manifest is not valid: %w", ErrBackupDamaged, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil || dec.More() {
		return Manifest{}, fmt.Errorf("%w: its manifest is not valid", ErrBackupDamaged)
	}
	if err := m.check(); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// check validates a decoded manifest's fields.
func (m Manifest) check() error {
	bad := func(what string) error { return fmt.Errorf("%w: its manifest has %s", ErrBackupDamaged, what) }
	switch {
	case m.Format != manifestFormat:
		return bad(fmt.Sprintf("format %d, not %d", m.Format, manifestFormat))
	case m.Damaged:
		return bad("a damaged flag")
	case len(m.DatabaseID) != 32 || strings.ToLower(m.DatabaseID) != m.DatabaseID:
		return bad("an invalid database identity")
	case m.HistoryIncarnation == 0:
		return bad("history incarnation 0")
	case len(m.Files) == 0:
		return bad("no files")
	}
	if _, err := hex.DecodeString(m.DatabaseID); err != nil {
		return bad("an invalid database identity")
	}
	for i, f := range m.Files {
		if checkName(f.Name) != nil || f.Size < 0 || len(f.SHA256) != 64 || strings.ToLower(f.SHA256) != f.SHA256 {
			return bad("an invalid file entry")
		}
		if _, err := hex.DecodeString(f.SHA256); err != nil {
			return bad("an invalid file checksum")
		}
		if i > 0 && m.Files[i-1].Name >= f.Name {
			return bad("files out of order or repeated")
		}
	}
	return nil
}

// writeManifest writes m as dir's manifest.json (0600), atomically and
// durably (dirsync.WriteFile).
func writeManifest(dir string, m Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return dirsync.WriteFile(vfs.Default, dir, manifestName, append(b, '\n'))
}

// writeFileSync writes a new file (0600) and syncs it.
func writeFileSync(name string, b []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	return errors.Join(err, f.Sync(), f.Close())
}

// syncDir makes the entries of the directory dir durable.
func syncDir(dir string) error { return dirsync.Sync(vfs.Default, dir) }

// hashDir returns the size and SHA-256 of every regular file of dir, sorted
// by name. Entries of other types are refused when strict, else skipped.
// Reading is paced by limit (nil: unpaced).
func hashDir(ctx context.Context, dir string, strict bool, limit *pace.Limiter) ([]File, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []File
	for _, e := range entries {
		if err := context.Cause(ctx); err != nil {
			return nil, err
		}
		if !e.Type().IsRegular() {
			if strict {
				return nil, fmt.Errorf("the store holds an entry that is not a regular file (%v)", e.Type())
			}
			continue
		}
		f, err := hashFile(ctx, filepath.Join(dir, e.Name()), limit)
		if err != nil {
			return nil, err
		}
		f.Name = e.Name()
		files = append(files, f)
	}
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Name, b.Name) })
	return files, nil
}

// hashFile returns the size and SHA-256 of the file name. A lock file this
// process holds (the LOCK of the database a restore replaces) is read
// through the descriptor that holds it: opening and closing it again would
// drop a record lock (internal/store/dirlock). Anything else must be a regular
// file, opened without blocking.
func hashFile(ctx context.Context, name string, limit *pace.Limiter) (File, error) {
	var r io.Reader
	if held, ok, err := dirlock.ReadHeld(name); err != nil {
		return File{}, err
	} else if ok {
		r = held
	} else {
		f, _, err := regularfile.Open(name, regularfile.NoFollow)
		if err != nil {
			return File{}, err
		}
		defer f.Close()
		r = f
	}
	h := sha256.New()
	n, err := pace.Copy(ctx, h, r, limit)
	if err != nil {
		return File{}, err
	}
	return File{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}
