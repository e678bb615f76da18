//go:build unix

package capability

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"

	"github.com/riffdb/riffdb/internal/hygiene/pathless"
	"github.com/riffdb/riffdb/internal/store/dirsync"
)

// fileIdent identifies one version of the store file. Writers replace the
// file by rename, so the inode changes on every write; times and size guard
// against inode reuse.
type fileIdent struct {
	dev, ino, size int64
	mtime, ctime   unix.Timespec
}

func prepareDir(dir string) error {
	var st unix.Stat_t
	err := unix.Lstat(dir, &st)
	if errors.Is(err, unix.ENOENT) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("capability: creating the credential directory: %w", withoutPath(err))
		}
		// The umask may have narrowed the mode; the check below wants 0700.
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("capability: setting the credential directory's mode: %w", withoutPath(err))
		}
		err = unix.Lstat(dir, &st)
	}
	if err != nil {
		return fmt.Errorf("capability: examining the credential directory: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("%w: the credential path must be a directory, not a symbolic link or file", ErrInsecure)
	}
	if perm := st.Mode & 0o7777; perm != 0o700 {
		return fmt.Errorf("%w: the credential directory has mode %04o, want 0700", ErrInsecure, perm)
	}
	if int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%w: the credential directory is not owned by the server's user", ErrInsecure)
	}
	return nil
}

// locked runs f under the exclusive lock of the store directory.
func (s *Store) locked(f func() error) error {
	path := filepath.Join(s.dir, lockFile)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err == nil {
		// Created now: the umask may have narrowed the mode.
		if err := unix.Fchmod(fd, 0o600); err != nil {
			unix.Close(fd)
			return fmt.Errorf("capability: setting the lock file's mode: %w", err)
		}
	} else if errors.Is(err, unix.EEXIST) {
		fd, err = unix.Open(path, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return fmt.Errorf("%w: the lock file is a symbolic link", ErrInsecure)
		}
		return fmt.Errorf("capability: opening the lock file: %w", err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("capability: examining the lock file: %w", err)
	}
	if err := checkPrivate(&st, "lock file"); err != nil {
		return err
	}
	for {
		err = unix.Flock(fd, unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("capability: locking the credential store: %w", err)
	}
	defer unix.Flock(fd, unix.LOCK_UN) //nolint:errcheck // closing releases it anyway
	return f()
}

// checkPrivate requires a regular 0600 file owned by the effective uid with
// one link.
func checkPrivate(st *unix.Stat_t, what string) error {
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("%w: the %s is not a regular file", ErrInsecure, what)
	case st.Mode&0o7777 != 0o600:
		return fmt.Errorf("%w: the %s has mode %04o, want 0600", ErrInsecure, what, st.Mode&0o7777)
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%w: the %s is not owned by the server's user", ErrInsecure, what)
	case st.Nlink != 1:
		return fmt.Errorf("%w: the %s has %d hard links, want 1", ErrInsecure, what, st.Nlink)
	}
	return nil
}

// readPrivate reads a private file of the store without following links.
// It returns fs.ErrNotExist (wrapped) when the file is absent.
func readPrivate(path, what string) ([]byte, fileIdent, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fileIdent{}, fmt.Errorf("%w: the %s is a symbolic link", ErrInsecure, what)
		}
		if errors.Is(err, unix.ENOENT) {
			return nil, fileIdent{}, fmt.Errorf("capability: the %s is missing: %w", what, fs.ErrNotExist)
		}
		return nil, fileIdent{}, fmt.Errorf("capability: opening the %s: %w", what, err)
	}
	f := os.NewFile(uintptr(fd), what)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fileIdent{}, fmt.Errorf("capability: examining the %s: %w", what, err)
	}
	if err := checkPrivate(&st, what); err != nil {
		return nil, fileIdent{}, err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fileIdent{}, fmt.Errorf("capability: reading the %s: %w", what, withoutPath(err))
	}
	return data, identOf(&st), nil
}

func identOf(st *unix.Stat_t) fileIdent {
	return fileIdent{dev: int64(st.Dev), ino: int64(st.Ino), size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
}

// writeAtomic replaces dir/name with data durably (dirsync.WriteFile: a
// synced 0600 temporary file, a rename and a sync of the directory). It
// runs under the store's lock, so no two writers share the temporary name.
func writeAtomic(dir, name string, data []byte) error {
	if err := dirsync.WriteFile(vfs.Default, dir, name, data); err != nil {
		return fmt.Errorf("capability: writing %s: %w", name, withoutPath(err))
	}
	return nil
}

// withoutPath strips the path from a *fs.PathError or *os.LinkError, so that
// messages never reveal where the store lives.
func withoutPath(err error) error {
	if op, cause, ok := pathless.PathCause(err); ok {
		return fmt.Errorf("%s: %w", op, cause)
	}
	if op, cause, ok := pathless.LinkCause(err); ok {
		return fmt.Errorf("%s: %w", op, cause)
	}
	return err
}
