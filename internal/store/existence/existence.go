// Package existence decides, from riffdb's own evidence, whether a Pebble
// store directory may be created (or created again), so that the decision
// is never left to Pebble.
//
// Pebble decides that a store exists when a marker.manifest.* file exists.
// If that 0-byte file is lost, a plain pebble.Open creates a brand-new store
// in the directory and deletes the old tables and logs as obsolete. riffdb
// therefore opens every store it knows it created with ErrorIfNotExists, and
// (re)creates a store only when the directory provably never held a
// committed write: NeverCommitted.
//
// The argument: every write Pebble has acknowledged lives in a table (*.sst)
// or in a write-ahead log (*.log) as a non-zero checksummed record; a WAL's
// unwritten tail is zeros (preallocation, riffdb's zero fill) or absent.
// A directory with no table and no non-zero byte in any WAL therefore holds
// nothing anybody was told is durable, and starting its creation over loses
// nothing. A store that riffdb marked as created (each store keeps its own
// marker) is never fresh, whatever its files say.
package existence

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/riffdb/riffdb/internal/store/dirsync"
)

// NeverCommitted reports whether dir provably holds no committed write: it
// holds no table file and no WAL file with a non-zero byte. A missing
// directory never held anything. It reads every WAL in full, so callers ask
// only on the rare path where their own creation marker is absent.
func NeverCommitted(fs vfs.FS, dir string) (bool, error) {
	names, err := fs.List(dir)
	if err != nil {
		if _, serr := fs.Stat(dir); errors.Is(serr, os.ErrNotExist) {
			return true, nil
		}
		return false, err
	}
	for _, name := range names {
		switch {
		case strings.HasSuffix(name, ".sst"), strings.HasSuffix(name, ".blob"):
			return false, nil
		case strings.HasSuffix(name, ".log"):
			zero, err := allZero(fs, fs.PathJoin(dir, name))
			if err != nil {
				return false, err
			}
			if !zero {
				return false, nil
			}
		}
	}
	return true, nil
}

func allZero(fs vfs.FS, name string) (bool, error) {
	f, err := fs.Open(name)
	if err != nil {
		return false, err
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := f.Read(buf)
		for _, b := range buf[:n] {
			if b != 0 {
				return false, nil
			}
		}
		if err == io.EOF {
			return true, nil
		}
		if err != nil {
			return false, err
		}
	}
}

// Reset removes every entry of dir except those named in keep (the lock
// file the caller holds), and syncs the directory, so that the store's
// creation can start over. Call it only on a directory found NeverCommitted,
// while holding the store's lock.
func Reset(fs vfs.FS, dir string, keep ...string) error {
	names, err := fs.List(dir)
	if err != nil {
		return err
	}
	for _, name := range names {
		if slices.Contains(keep, name) {
			continue
		}
		if err := fs.RemoveAll(fs.PathJoin(dir, name)); err != nil {
			return fmt.Errorf("remove a leftover of the interrupted creation: %w", err)
		}
	}
	return dirsync.Sync(fs, dir)
}
