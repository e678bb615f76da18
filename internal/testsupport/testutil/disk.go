//go:build linux

package testutil

import (
	"io/fs"
	"path/filepath"
	"syscall"
	"testing"
)

// DiskUsage walks dir and returns the blocks allocated to its files and
// their apparent sizes, in bytes.
func DiskUsage(tb testing.TB, dir string) (allocated, apparent int64) {
	tb.Helper()
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		apparent += info.Size()
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			allocated += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return allocated, apparent
}
