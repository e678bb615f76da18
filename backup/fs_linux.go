//go:build linux

package backup

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/riffdb/riffdb/internal/hygiene/pathless"
)

// checkRoot refuses a backup_root that is not an existing real directory
// (a symbolic link is refused), owned by the effective uid, mode 0700.
func checkRoot(root string) error {
	if root == "" {
		return ErrNoRoot
	}
	fi, err := os.Lstat(root)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrRootUnusable, pathless.Error(err))
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("%w: it is a symbolic link", ErrRootUnusable)
	case !fi.IsDir():
		return fmt.Errorf("%w: it is not a directory", ErrRootUnusable)
	case !ok || int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%w: it is not owned by this process's user", ErrRootUnusable)
	case fi.Mode().Perm() != 0o700 || fi.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky) != 0:
		return fmt.Errorf("%w: its mode is %04o, not 0700", ErrRootUnusable, fi.Mode().Perm())
	}
	return nil
}

// device returns the filesystem (st_dev) that name is on.
func device(name string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(name, &st); err != nil {
		return 0, &os.PathError{Op: "stat", Path: name, Err: err}
	}
	return uint64(st.Dev), nil
}

// renameExchange swaps a and b atomically (both must exist).
func renameExchange(a, b string) error {
	if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
		return &os.LinkError{Op: "renameat2 exchange", Old: a, New: b, Err: err}
	}
	return nil
}

// renameNoReplace renames a to b, failing when b exists.
func renameNoReplace(a, b string) error {
	if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_NOREPLACE); err != nil {
		return &os.LinkError{Op: "renameat2", Old: a, New: b, Err: err}
	}
	return nil
}
