// Package treestate is test support: it records every entry of a directory
// tree (names, types, sizes, modes and contents) and says what changed, so
// that a test can require a refused store to be left exactly as it was
// found. Timestamps are not recorded: taking a store's lock may bump its
// LOCK file's times, and nothing else about a file's times is evidence.
package treestate

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// Entry is one entry of the tree.
type Entry struct {
	Mode fs.FileMode // type and permission bits
	Size int64
	Sum  [sha256.Size]byte // contents of a regular file; the target of a symlink
}

// State maps each entry's slash-separated path below the root to it.
type State map[string]Entry

// Take records the tree at root. A missing root is an empty State.
func Take(root string) (State, error) {
	st := State{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root && os.IsNotExist(err) {
				return filepath.SkipDir
			}
			return err
		}
		if p == root {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		e := Entry{Mode: info.Mode()}
		switch {
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			e.Size, e.Sum = int64(len(b)), sha256.Sum256(b)
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			e.Sum = sha256.Sum256([]byte(target))
		}
		st[filepath.ToSlash(rel)] = e
		return nil
	})
	return st, err
}

// MustTake is Take for a test: an error fails it.
func MustTake(tb testing.TB, root string) State {
	tb.Helper()
	st, err := Take(root)
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

// Diff lists, sorted, every entry added, removed or changed from before to
// after; nil means the trees are identical.
func Diff(before, after State) []string {
	var out []string
	for name, b := range before {
		a, ok := after[name]
		switch {
		case !ok:
			out = append(out, "removed "+name)
		case a.Mode != b.Mode:
			out = append(out, fmt.Sprintf("mode of %s changed from %v to %v", name, b.Mode, a.Mode))
		case a.Size != b.Size:
			out = append(out, fmt.Sprintf("%s changed size from %d to %d bytes", name, b.Size, a.Size))
		case a.Sum != b.Sum:
			out = append(out, fmt.Sprintf("the contents of %s changed", name))
		}
	}
	for name := range after {
		if _, ok := before[name]; !ok {
			out = append(out, "added "+name)
		}
	}
	sort.Strings(out)
	return out
}
