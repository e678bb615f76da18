package archive_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/riffdb/riffdb/archive"
)

// TestAuditRefusesAnOpenStoreWhoseDirectoryIsGone removes the store
// directory of an open store: its next audit must fail (unavailable), not
// pass because the outbox directory around it is in order. The server
// audits before every claim, so no claim writes into the unlinked store.
func TestAuditRefusesAnOpenStoreWhoseDirectoryIsGone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := privateDir(t)
	s, err := archive.Open(ctx, dir, archive.Options{Database: db, QuotaEncodedBytes: 1 << 20, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	k, r := stored(t, 1, "payload")
	if _, err := s.Accept(ctx, k, r); err != nil {
		t.Fatal(err)
	}
	if err := s.Audit(); err != nil {
		t.Fatalf("Audit of the open store: %v", err)
	}
	if err := os.RemoveAll(filepath.Join(dir, archive.StoreDirName)); err != nil {
		t.Fatal(err)
	}
	if err := s.Audit(); !errors.Is(err, archive.ErrUnavailable) {
		t.Fatalf("Audit after the store directory was removed: %v, want ErrUnavailable", err)
	}
}
