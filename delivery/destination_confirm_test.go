package delivery

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
)

// confirmSetup is an archive destination on the test's disk (the check
// compares the store directory's identity, so not on a memory filesystem)
// and a way to accept event seq.
type confirmSetup struct {
	dir    string
	d      *Destination
	accept func(seq uint64)
}

func newConfirmSetup(t *testing.T) *confirmSetup {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "outbox")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	id := event.DatabaseID{0x01, 0x93, 0x2a, 0x71, 0x01, 0x81, 0x70, 0x01, 0x81, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x03}
	d := newDestination(dir, archive.Options{Database: id, QuotaEncodedBytes: 1 << 30, MinFreeBytes: -1})
	d.setScrubRate(0)
	t.Cleanup(func() { _ = d.Close() })
	s := &confirmSetup{dir: dir, d: d}
	s.accept = func(seq uint64) {
		t.Helper()
		st, err := event.NewStored(event.ID{Seq: seq}, "put", []byte(`{"k":"v"}`))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Accept(context.Background(), event.Key{Database: id, Event: st.ID}, st.Encode()); err != nil {
			t.Fatalf("accept %d: %v", seq, err)
		}
	}
	return s
}

func (s *confirmSetup) storeDir() string { return filepath.Join(s.dir, archive.StoreDirName) }

// TestConfirmChecksTheStoreDirectory: acceptances are confirmed only while
// the store directory that took them is the one at the archive's path; a
// removed (moved away) directory is unavailable, a replaced one refused, and
// either way the store is closed so that the next call reopens it with a
// full audit and validation. Confirm with no acceptance since the last one
// checks nothing.
func TestConfirmChecksTheStoreDirectory(t *testing.T) {
	ctx := context.Background()
	t.Run("unchanged", func(t *testing.T) {
		s := newConfirmSetup(t)
		s.accept(1)
		s.accept(2)
		// The record count that becomes the delivery mark's archive
		// floor at the next completion counts confirmed acceptances only.
		if n := s.d.records(); n != 0 {
			t.Fatalf("records() = %d before Confirm, want 0", n)
		}
		if err := s.d.Confirm(ctx); err != nil {
			t.Fatal(err)
		}
		if n := s.d.records(); n != 2 {
			t.Fatalf("records() = %d after Confirm, want 2", n)
		}
		if err := s.d.Confirm(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("removed", func(t *testing.T) {
		s := newConfirmSetup(t)
		s.accept(1)
		if err := s.d.Confirm(ctx); err != nil {
			t.Fatal(err)
		}
		away := filepath.Join(filepath.Dir(s.dir), "away")
		if err := os.Rename(s.storeDir(), away); err != nil {
			t.Fatal(err)
		}
		s.accept(2) // the open store still writes, into the moved directory
		err := s.d.Confirm(ctx)
		if deliverytype.ClassOf(err) != deliverytype.Unavailable {
			t.Fatalf("Confirm after the store directory was moved away = %v, want ErrUnavailable", err)
		}
		if s.d.store != nil {
			t.Fatal("the store stayed open")
		}
		// The moved directory's count must not become the floor of the
		// archive at the path (it would look as if it lost a record).
		if n := s.d.records(); n != 1 {
			t.Fatalf("records() = %d after the failed Confirm, want 1 (the confirmed acceptance)", n)
		}
		if err := s.d.Confirm(ctx); err != nil {
			t.Fatalf("a second Confirm, with nothing accepted since = %v", err)
		}
	})
	t.Run("replaced", func(t *testing.T) {
		s := newConfirmSetup(t)
		s.accept(1)
		away := filepath.Join(filepath.Dir(s.dir), "away")
		if err := os.Rename(s.storeDir(), away); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(s.storeDir(), 0o700); err != nil {
			t.Fatal(err)
		}
		err := s.d.Confirm(ctx)
		if deliverytype.ClassOf(err) != deliverytype.Refused {
			t.Fatalf("Confirm after the store directory was replaced = %v, want ErrRefused", err)
		}
		if s.d.store != nil {
			t.Fatal("the store stayed open")
		}
	})
	t.Run("a directory on the path replaced", func(t *testing.T) {
		// The store's watches answer for its directory while nothing on
		// the path changed (archive.Store.DirectoryHeld); a directory
		// above the archive directory replaced, with a new archive and
		// store directory under it, is seen by neither of theirs.
		s := newConfirmSetup(t)
		if !archive.PathWatchable(s.dir) {
			t.Skip("a directory on the test directory's path is on a filesystem the archive's watch does not trust")
		}
		s.accept(1)
		deadline := time.Now().Add(10 * time.Second)
		for !s.d.store.DirectoryHeld(s.d.storeInfo) {
			if err := s.d.Probe(ctx); err != nil { // an audit, which watches the path
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Fatal("the store's watches never answered for its directory")
			}
			time.Sleep(time.Millisecond)
		}
		if err := s.d.Confirm(ctx); err != nil {
			t.Fatal(err)
		}
		s.accept(2)
		parent := filepath.Dir(s.dir)
		if err := os.Rename(parent, parent+"-away"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(parent + "-away") })
		for _, d := range []string{parent, s.dir, s.storeDir()} {
			if err := os.Mkdir(d, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		err := s.d.Confirm(ctx)
		if deliverytype.ClassOf(err) != deliverytype.Refused {
			t.Fatalf("Confirm after a directory on the path was replaced = %v, want ErrRefused", err)
		}
	})
	t.Run("acceptances in two stores", func(t *testing.T) {
		// The store is closed (as after an unavailability), its directory
		// moved away and replaced by a copy, which opens as a valid store
		// and takes an acceptance; then the copy is closed and removed and
		// the first directory moved back. The path holds the directory of
		// the first acceptance, but not the second.
		s := newConfirmSetup(t)
		drop := func() {
			s.d.mu.Lock()
			s.d.drop()
			s.d.mu.Unlock()
		}
		s.accept(1)
		drop()
		away, cp := filepath.Join(filepath.Dir(s.dir), "away"), filepath.Join(filepath.Dir(s.dir), "copy")
		if out, err := exec.Command("cp", "-a", s.storeDir(), cp).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v %s", err, out)
		}
		for _, mv := range [][2]string{{s.storeDir(), away}, {cp, s.storeDir()}} {
			if err := os.Rename(mv[0], mv[1]); err != nil {
				t.Fatal(err)
			}
		}
		s.accept(2)
		drop()
		if err := os.RemoveAll(s.storeDir()); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(away, s.storeDir()); err != nil {
			t.Fatal(err)
		}
		if err := s.d.Confirm(ctx); deliverytype.ClassOf(err) != deliverytype.Refused {
			t.Fatalf("Confirm of acceptances made in two store directories = %v, want ErrRefused", err)
		}
	})
}
