package backup_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/riffdb/riffdb/primary"
	"github.com/riffdb/riffdb/primary/contract"
)

const testContract = `
[commands.put]
input = { x = "int" }
emits = ["put"]

[commands.fill]
input = { x = "int", pad = "string" }
emits = ["fill"]
`

func compile(tb testing.TB) *contract.Contract {
	tb.Helper()
	c, err := contract.Compile([]byte(testContract))
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// fakeClock is a clock that tests advance.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// env is a database on disk with a backup_root beside it.
type env struct {
	t     testing.TB
	opts  primary.Options
	root  string
	clock *fakeClock
}

func newEnv(t testing.TB) *env {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "backups")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	c := compile(t)
	return &env{
		t: t,
		opts: primary.Options{
			Path:     filepath.Join(base, "data", "db"),
			Contract: c,
			Logger:   zaptest.NewLogger(t),
		},
		root:  root,
		clock: &fakeClock{now: time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)},
	}
}

func (e *env) open() *primary.DB {
	e.t.Helper()
	if err := os.MkdirAll(filepath.Dir(e.opts.Path), 0o700); err != nil {
		e.t.Fatal(err)
	}
	db, err := primary.Open(context.Background(), e.opts)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = db.Close() })
	return db
}

func commitN(t testing.TB, db *primary.DB, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		if _, err := db.Execute(context.Background(), "put", json.RawMessage(fmt.Sprintf(`{"x":%d}`, i)), ""); err != nil {
			t.Fatal(err)
		}
	}
}

// tree renders every entry under each dir: relative name, type and mode,
// size, and the SHA-256 of files. Pebble's LOCK files are included.
func tree(t testing.TB, dirs ...string) string {
	t.Helper()
	var lines []string
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := os.Lstat(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(filepath.Dir(dir), p)
			line := fmt.Sprintf("%s %v %d", rel, fi.Mode(), fi.Size())
			if fi.Mode().IsRegular() {
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				sum := sha256.Sum256(b)
				line += " " + hex.EncodeToString(sum[:8])
			} else {
				line = fmt.Sprintf("%s %v", rel, fi.Mode())
			}
			lines = append(lines, line)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
