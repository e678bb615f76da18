//go:build linux

package archive

import (
	"fmt"
	"io"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// custodyFS is the vfs.FS wrapper returned by newCustodyFS.
type custodyFS struct {
	vfs.FS
	// osBacked is true when the wrapped FS is the operating system's, so that
	// paths name real files (Lock's chmod is by path).
	osBacked bool
	// watch makes the audit of the open store independent of its number
	// of files (auditOpen); it is closed with the store's lock.
	watch *auditWatch
}

// newCustodyFS wraps fs so that every file Pebble creates or opens is verified
// on the exact fd it will use (fchmod 0600 on create; fstat: regular,
// nlink==1, uid==euid, mode&077==0, same dev/ino as lstat(path)), directories
// are created 0700, Lock chmods LOCK to 0600 by path (never opening a second
// fd on it), and Link is refused so that Checkpoint copies. Files without a
// real fd (MemFS) are not checked.
//
// Files are created by the wrapped FS with mode 0666&^umask and fchmodded
// right after, so an Audit running at that instant can see a group- or
// world-readable file unless the process umask is 077.
func newCustodyFS(fs vfs.FS) vfs.FS {
	return custodyFS{FS: fs, osBacked: vfs.Root(fs) == vfs.Default, watch: newAuditWatch()}
}

// Create implements vfs.FS.
func (c custodyFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := c.FS.Create(name, cat)
	return verifyOpened(f, err, name, true)
}

// OpenReadWrite implements vfs.FS.
func (c custodyFS) OpenReadWrite(name string, cat vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := c.FS.OpenReadWrite(name, cat, opts...)
	return verifyOpened(f, err, name, true)
}

// ReuseForWrite implements vfs.FS.
func (c custodyFS) ReuseForWrite(oldname, newname string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := c.FS.ReuseForWrite(oldname, newname, cat)
	return verifyOpened(f, err, newname, true)
}

// Open implements vfs.FS.
func (c custodyFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := c.FS.Open(name, opts...)
	return verifyOpened(f, err, name, false)
}

// Link implements vfs.FS by refusing: a second hard link would break the
// single-link custody rule. The error is not a permission or existence error,
// so vfs.LinkOrCopy falls back to copying.
func (c custodyFS) Link(_, _ string) error {
	return custodyErr("hard links are refused in the archive store")
}

// MkdirAll implements vfs.FS, creating every missing directory with mode 0700.
func (c custodyFS) MkdirAll(dir string, _ os.FileMode) error {
	return c.FS.MkdirAll(dir, dirMode)
}

// Lock implements vfs.FS. After taking the lock it verifies LOCK by lstat and
// chmods it to 0600 by path: opening and closing another fd on LOCK would
// release the fcntl lock.
func (c custodyFS) Lock(name string) (io.Closer, error) {
	l, err := c.FS.Lock(name)
	if err != nil || !c.osBacked {
		return l, err
	}
	if c.watch != nil {
		l = watchCloser{Closer: l, w: c.watch}
	}
	var st unix.Stat_t
	if err := unix.Lstat(name, &st); err != nil {
		l.Close()
		return nil, fmt.Errorf("archive: cannot stat the store lock file: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		l.Close()
		return nil, custodyErr("the store lock file is not a regular file")
	}
	if st.Nlink != 1 {
		l.Close()
		return nil, custodyErr("a store file has %d hard links", st.Nlink)
	}
	if int(st.Uid) != os.Geteuid() {
		l.Close()
		return nil, custodyErr("a store file is owned by uid %d, not by the server's effective uid %d", st.Uid, os.Geteuid())
	}
	if st.Mode&0o7777 != fileMode {
		if err := unix.Chmod(name, fileMode); err != nil {
			l.Close()
			return nil, fmt.Errorf("archive: cannot make the store lock file private: %w", err)
		}
	}
	return l, nil
}

// Unwrap implements vfs.FS.
func (c custodyFS) Unwrap() vfs.FS { return c.FS }

// verifyOpened checks the file Pebble is about to use and closes it on
// failure.
func verifyOpened(f vfs.File, err error, path string, created bool) (vfs.File, error) {
	if err != nil {
		return f, err
	}
	if err := verifyFd(f, path, created); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// verifyFd checks the exact fd Pebble will use: with fix, it first fchmods the
// file to 0600; then the file must be regular, have one hard link, belong to
// the effective uid, have no group or other permission bits, and be the file
// that lstat(path) names (so a symbolic link at path is refused).
func verifyFd(f vfs.File, path string, fix bool) error {
	fd := f.Fd()
	if fd == vfs.InvalidFd {
		return nil
	}
	if fix {
		if err := unix.Fchmod(int(fd), fileMode); err != nil {
			return fmt.Errorf("archive: cannot make a store file private: %w", err)
		}
	}
	var st, lst unix.Stat_t
	if err := unix.Fstat(int(fd), &st); err != nil {
		return fmt.Errorf("archive: cannot stat a store file: %w", err)
	}
	if err := unix.Lstat(path, &lst); err != nil {
		return fmt.Errorf("archive: cannot stat a store file: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || lst.Mode&unix.S_IFMT != unix.S_IFREG ||
		st.Dev != lst.Dev || st.Ino != lst.Ino {
		return custodyErr("a store file is not a plain regular file")
	}
	if st.Nlink != 1 {
		return custodyErr("a store file has %d hard links", st.Nlink)
	}
	if int(st.Uid) != os.Geteuid() {
		return custodyErr("a store file is owned by uid %d, not by the server's effective uid %d", st.Uid, os.Geteuid())
	}
	if m := st.Mode & 0o7777; m&0o077 != 0 {
		return custodyErr("a store file has mode %04o; it must be 0600", m)
	}
	return nil
}
