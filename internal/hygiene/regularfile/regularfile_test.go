//go:build unix

package regularfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/riffdb/riffdb/internal/hygiene/regularfile"
)

// TestReadRefusesWhatIsNotARegularFile checks that a FIFO (without a
// writer, so a blocking open would wait for ever), a directory and, with
// NoFollow, a symbolic link are refused at once, without the path in the
// error, and that the size bound holds.
func TestReadRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("12345"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		path  string
		links regularfile.Links
		limit int64
		want  error
	}{
		{"fifo", fifo, regularfile.Follow, 10, regularfile.ErrNotRegular},
		{"directory", dir, regularfile.Follow, 10, regularfile.ErrNotRegular},
		{"link not followed", link, regularfile.NoFollow, 10, regularfile.ErrNotRegular},
		{"too large", file, regularfile.Follow, 4, regularfile.ErrTooLarge},
		{"missing", filepath.Join(dir, "absent"), regularfile.Follow, 10, os.ErrNotExist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, _, err := regularfile.Read(tc.path, tc.limit, tc.links)
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, tc.want) {
					t.Fatalf("got %v, want %v", err, tc.want)
				}
				if strings.Contains(err.Error(), dir) {
					t.Fatalf("the error names the path: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Read blocked")
			}
		})
	}
	for _, links := range []regularfile.Links{regularfile.Follow, regularfile.NoFollow} {
		b, fi, err := regularfile.Read(file, 5, links)
		if err != nil || string(b) != "12345" || fi.Size() != 5 {
			t.Fatalf("Read(file, %v) = %q, %v", links, b, err)
		}
	}
	if b, _, err := regularfile.Read(link, 5, regularfile.Follow); err != nil || string(b) != "12345" {
		t.Fatalf("Read(link, Follow) = %q, %v", b, err)
	}
}
