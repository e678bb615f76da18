//go:build linux

package archive

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// StoreDirName is the only entry allowed in the configured outbox directory.
const StoreDirName = "archive.pebble"

// ErrCustody marks every custody violation (symlink, owner, mode, extra entry,
// link count, file type). The outbox worker classifies it as destination
// refusal. Messages wrapping it name what is wrong but never a path or a file
// name.
var ErrCustody = errors.New("archive: custody violation")

// ErrUnsupportedPlatform is returned by everything on a non-Linux platform.
var ErrUnsupportedPlatform = errors.New("archive: this implementation requires Linux")

const (
	dirMode  = 0o700 // the outbox directory and the store directory
	fileMode = 0o600 // every file in the store
)

// custodyErr returns an error wrapping ErrCustody with a path-free reason.
func custodyErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCustody}, args...)...)
}

// openDirAt opens name below the directory fd at with O_NOFOLLOW|O_DIRECTORY.
// what names the directory in errors ("a component of the archive directory").
// A symbolic link or a non-directory is a custody violation; a missing entry
// wraps os.ErrNotExist and a permission failure wraps its errno.
func openDirAt(at int, name, what string) (int, error) {
	for {
		fd, err := unix.Openat(at, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == nil {
			return fd, nil
		}
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
			var st unix.Stat_t
			if serr := unix.Fstatat(at, name, &st, unix.AT_SYMLINK_NOFOLLOW); serr == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				return -1, custodyErr("%s is a symbolic link", what)
			}
			return -1, custodyErr("%s is not a directory", what)
		case errors.Is(err, unix.ENOENT):
			return -1, fmt.Errorf("archive: %s does not exist: %w", what, err)
		default:
			return -1, fmt.Errorf("archive: cannot open %s: %w", what, err)
		}
	}
}

// readNames lists the directory open at fd. It takes ownership of fd and
// closes it.
func readNames(fd int, what string) ([]string, error) {
	// The *os.File owns fd from here on: it is closed exactly once, by Close.
	f := os.NewFile(uintptr(fd), what)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		var errno unix.Errno
		if errors.As(err, &errno) {
			return nil, fmt.Errorf("archive: cannot list %s: %w", what, errno)
		}
		return nil, fmt.Errorf("archive: cannot list %s", what)
	}
	return names, nil
}

// checkDir verifies the owner and mode of an open directory, leaving its
// fstat in *out when out is not nil.
func checkDir(fd int, what string, out *unix.Stat_t) error {
	var st unix.Stat_t
	if out != nil {
		defer func() { *out = st }()
	}
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("archive: cannot stat %s: %w", what, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return custodyErr("%s is not a directory", what)
	}
	if int(st.Uid) != os.Geteuid() {
		return custodyErr("%s is owned by uid %d, not by the server's effective uid %d", what, st.Uid, os.Geteuid())
	}
	if m := st.Mode & 0o7777; m != dirMode {
		return custodyErr("%s mode is %04o; it must be 0700", what, m)
	}
	return nil
}

// checkStoreFile verifies one entry of the store directory from its lstat;
// euid is the process's effective uid (os.Geteuid is a system call, made
// once per audit rather than once per file).
func checkStoreFile(st *unix.Stat_t, euid int) error {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFLNK:
		return custodyErr("the store holds a symbolic link")
	case unix.S_IFDIR:
		return custodyErr("the store holds a directory")
	default:
		return custodyErr("the store holds an entry that is not a regular file")
	}
	if int(st.Uid) != euid {
		return custodyErr("a store file is owned by uid %d, not by the server's effective uid %d", st.Uid, euid)
	}
	if m := st.Mode & 0o7777; m != fileMode {
		return custodyErr("a store file has mode %04o; it must be 0600", m)
	}
	if st.Nlink != 1 {
		return custodyErr("a store file has %d hard links", st.Nlink)
	}
	return nil
}

// Audit checks the configured directory dir and, if present, the store
// directory inside it. It reports whether the store directory exists.
//
// Every component of dir is opened from "/" with O_NOFOLLOW|O_DIRECTORY, so a
// symbolic link anywhere in the path is refused. dir must be owned by the
// effective uid with mode 0700 and hold nothing but StoreDirName, which must be
// a real directory, owned by the effective uid, mode 0700, whose entries are
// all regular files with mode 0600, owned by the effective uid, with exactly
// one hard link.
//
// Audit opens no file inside the store (only directories, and fstatat with
// AT_SYMLINK_NOFOLLOW on the directory fd), because closing any fd on Pebble's
// LOCK drops its lock; it is therefore safe while the store is open. Files
// that disappear during the audit (Pebble deletes obsolete files) are skipped.
//
// Violations wrap ErrCustody; a missing directory wraps os.ErrNotExist; a
// permission failure wraps its errno. No message contains a path.
func Audit(dir string) (storeExists bool, err error) {
	a, err := audit(dir)
	return a.exists, err
}

// auditResult is what a passing audit saw: whether the store directory
// exists and, if it does, the allocated bytes of its entries (Σ
// st_blocks*512 from the same lstat that the custody checks read, the
// measure allocatedBytes takes).
type auditResult struct {
	exists    bool
	allocated int64
}

// audit is Audit, also returning the allocated bytes of the store's files,
// so that Open measures them without a second pass over the store (one
// fstatat per file, the cost of a start that grows with the archive's
// files).
func audit(dir string) (auditResult, error) {
	var a auditResult
	var err error
	a.exists, err = auditStore(dir, &a.allocated)
	return a, err
}

// auditStore is Audit, adding the allocated bytes of the store's entries
// to *allocated.
func auditStore(dir string, allocated *int64) (storeExists bool, err error) {
	sfd, _, err := openStoreDir(dir)
	if sfd == storeBadFd {
		return true, err
	}
	if err != nil || sfd < 0 {
		return false, err
	}
	defer unix.Close(sfd)
	return true, checkStoreEntries(sfd, allocated, nil)
}

// storeBadFd is what openStoreDir returns as its fd when the store
// directory exists but fails its own check (owner, mode).
const storeBadFd = -2

// openPath opens the absolute directory dir (O_NOFOLLOW|O_DIRECTORY),
// refusing a symbolic link in any component of its path. One openat2 with
// RESOLVE_NO_SYMLINKS resolves the whole path, refusing every symbolic link
// on the way, which is what the walk from "/" checks; when it fails (any
// error: a symbolic link, a missing component, a kernel without openat2, a
// seccomp filter refusing it), the walk runs, opening one component at a
// time, and reports the failure precisely (which component, and why). The
// audit runs before every claim: the walk cost two system calls per
// component there, and each costs microseconds on a busy VM.
func openPath(dir string) (int, error) {
	how := unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS,
	}
	for {
		fd, err := unix.Openat2(unix.AT_FDCWD, dir, &how)
		if err == nil {
			return fd, nil
		}
		if !errors.Is(err, unix.EINTR) {
			return walkPath(dir)
		}
	}
}

// walkPath is openPath one component at a time, from "/".
func walkPath(dir string) (int, error) {
	fd, err := openDirAt(unix.AT_FDCWD, "/", "the root directory")
	if err != nil {
		return -1, err
	}
	comps := strings.Split(filepath.Clean(dir), "/")
	for i, c := range comps {
		if c == "" {
			continue
		}
		what := "a component of the archive directory"
		if i == len(comps)-1 {
			what = "the archive directory"
		}
		next, err := openDirAt(fd, c, what)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// openStoreDir runs every check of the audit but the store directory's
// entries: the path from "/" (no symbolic link), the archive directory
// (owner, mode, nothing but StoreDirName) and the store directory itself
// (a real directory, owner, mode). It returns the store directory open
// (O_NOFOLLOW|O_DIRECTORY) with its fstat, or -1 when there is no store
// directory; on an error the fd is -1, or storeBadFd when the store
// directory exists but fails its own check. Its cost is one openat2 for the
// path (openPath) and one listing of the archive directory, whatever the
// number of store files.
func openStoreDir(dir string) (sfd int, st unix.Stat_t, err error) {
	sfd, st, _, err = openStoreDirAt(dir)
	return sfd, st, err
}

// openStoreDirAt is openStoreDir, also returning the archive directory's
// fstat (zero when its check failed).
func openStoreDirAt(dir string) (sfd int, st, ast unix.Stat_t, err error) {
	if !filepath.IsAbs(dir) {
		return -1, st, ast, custodyErr("the archive directory must be an absolute path")
	}
	fd, err := openPath(dir)
	if err != nil {
		return -1, st, ast, err
	}
	defer func() { unix.Close(fd) }()
	if err := checkDir(fd, "the archive directory", &ast); err != nil {
		ast = unix.Stat_t{}
		return -1, st, ast, err
	}
	listFd, err := unix.Dup(fd)
	if err != nil {
		return -1, st, ast, fmt.Errorf("archive: cannot list the archive directory: %w", err)
	}
	unix.CloseOnExec(listFd)
	names, err := readNames(listFd, "the archive directory")
	if err != nil {
		return -1, st, ast, err
	}
	for _, n := range names {
		if n != StoreDirName {
			return -1, st, ast, custodyErr("the archive directory holds an entry other than %s", StoreDirName)
		}
	}
	if len(names) == 0 {
		return -1, st, ast, nil
	}
	sfd, err = openDirAt(fd, StoreDirName, "the store directory")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) { // removed between listing and open
			return -1, st, ast, nil
		}
		return -1, st, ast, err
	}
	if err := checkDir(sfd, "the store directory", &st); err != nil {
		unix.Close(sfd)
		return storeBadFd, st, ast, err
	}
	return sfd, st, ast, nil
}

// checkStoreEntries lists the store directory open at sfd and checks
// every entry by fstatat (AT_SYMLINK_NOFOLLOW), adding the allocated bytes
// to *allocated; entries removed concurrently are skipped. With w, each
// entry is also watched (w.watchEntry, then checked again when the watch
// is new), so that a change of its inode made after the check (a hard
// link made from outside the store, which the directory's watch does not
// see) is reported.
func checkStoreEntries(sfd int, allocated *int64, w *auditWatch) error {
	listFd, err := unix.Dup(sfd)
	if err != nil {
		return fmt.Errorf("archive: cannot list the store directory: %w", err)
	}
	unix.CloseOnExec(listFd)
	names, err := readNames(listFd, "the store directory")
	if err != nil {
		return err
	}
	euid := os.Geteuid()
	for _, n := range names {
		var st unix.Stat_t
		gone, err := lstatStoreEntry(sfd, n, euid, w, &st)
		if err != nil {
			return err
		}
		if !gone {
			*allocated += st.Blocks * 512
		}
	}
	return nil
}

// checkStoreEntry checks the entry name of the store directory open at sfd
// (lstatStoreEntry); an entry that no longer exists passes.
func checkStoreEntry(sfd int, name string, euid int, w *auditWatch) error {
	var st unix.Stat_t
	_, err := lstatStoreEntry(sfd, name, euid, w, &st)
	return err
}

// lstatStoreEntry lstats the entry name of the store directory open at sfd
// into st and checks it (checkStoreFile); with w, it also watches the
// entry (w.watchEntry) and, when the watch is new, checks it again, so that
// a hard link made between the first check and the watch is seen. gone is
// true for an entry that no longer exists (Pebble deletes obsolete files).
func lstatStoreEntry(sfd int, name string, euid int, w *auditWatch, st *unix.Stat_t) (gone bool, err error) {
	check := func() (gone bool, err error) {
		if err := unix.Fstatat(sfd, name, st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return true, nil
			}
			return false, fmt.Errorf("archive: cannot stat a store file: %w", err)
		}
		return false, checkStoreFile(st, euid)
	}
	if gone, err = check(); err != nil || gone {
		return gone, err
	}
	if w != nil && w.watchEntry(sfd, name, st.Ino) {
		return check()
	}
	return false, nil
}

// allocatedBytes sums st_blocks*512 over the store directory's entries via
// fstatat on one directory fd (entries removed concurrently are skipped). It
// never opens a store file, so it is safe while the store is open.
func allocatedBytes(storeDir string) (int64, error) {
	fd, err := openDirAt(unix.AT_FDCWD, storeDir, "the store directory")
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	listFd, err := unix.Dup(fd)
	if err != nil {
		return 0, fmt.Errorf("archive: cannot list the store directory: %w", err)
	}
	unix.CloseOnExec(listFd)
	names, err := readNames(listFd, "the store directory")
	if err != nil {
		return 0, err
	}
	var total int64
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return 0, fmt.Errorf("archive: cannot stat a store file: %w", err)
		}
		total += st.Blocks * 512
	}
	return total, nil
}
