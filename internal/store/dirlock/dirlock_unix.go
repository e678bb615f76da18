//go:build unix

package dirlock

import (
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// held is the table of the lock files this process holds, by cleaned name,
// with the descriptor that holds each.
var held struct {
	sync.Mutex
	files map[string]*os.File
}

// Lock takes an exclusive lock on the file name (an open file description
// lock on Linux, see the package doc), creating it (mode 0600) when it is
// missing but never truncating it. The lock is released by closing the
// returned Closer, and by nothing else this process does.
func Lock(name string) (io.Closer, error) { return lock(name, os.O_CREATE) }

// LockExisting is Lock for a reader that must create nothing: it opens the
// existing file without O_CREATE and without O_TRUNC, so neither the
// directory nor the file changes (opening for writing, which a write lock
// needs, changes no timestamp). A missing file is an error wrapping
// os.ErrNotExist; a symbolic link is refused (ELOOP).
func LockExisting(name string) (io.Closer, error) { return lock(name, unix.O_NOFOLLOW) }

func lock(name string, flags int) (io.Closer, error) {
	key := filepath.Clean(name)
	held.Lock()
	defer held.Unlock()
	if held.files[key] != nil {
		return nil, ErrHeld
	}
	f, err := os.OpenFile(name, os.O_RDWR|flags|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	if err := setLock(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	if held.files == nil {
		held.files = map[string]*os.File{}
	}
	held.files[key] = f
	return &fileLock{key: key, f: f}, nil
}

// busyWait bounds how long setLock retries a lock that another open file
// description holds.
const busyWait = 100 * time.Millisecond

// setLock takes the write lock on f. A lock that another holder has is
// tried again for up to busyWait before EAGAIN (or EACCES) is returned: a
// lock its holder just released can still be held for a moment by a copy of
// the holder's descriptor in a child process between its fork and its exec
// (see the package doc), and a start or a restore should not be refused for
// that moment.
func setLock(f *os.File) error {
	deadline := time.Now().Add(busyWait)
	for pause := time.Millisecond; ; pause = min(2*pause, 20*time.Millisecond) {
		lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart}
		err := unix.FcntlFlock(f.Fd(), setLockCmd, &lk)
		if err == nil || (err != unix.EAGAIN && err != unix.EACCES) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(pause)
	}
}

// ReadHeld returns a reader of the whole of the file name when this process
// holds its lock, reading through the held descriptor (pread: the
// descriptor's offset does not move), and ok false when it does not. A
// caller that must read a LOCK file it may hold uses it instead of opening
// the file, because closing a second descriptor of a held file drops a
// record lock (and this package's rule is that nothing does so).
func ReadHeld(name string) (r *io.SectionReader, ok bool, err error) {
	held.Lock()
	f := held.files[filepath.Clean(name)]
	held.Unlock()
	if f == nil {
		return nil, false, nil
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, true, err
	}
	return io.NewSectionReader(f, 0, fi.Size()), true, nil
}

type fileLock struct {
	once sync.Once
	key  string
	f    *os.File
}

func (l *fileLock) Close() error {
	var err error
	l.once.Do(func() {
		// The descriptor is closed before the name leaves the table, so
		// that a Lock of the name in this process never meets the lock
		// still held by the descriptor being closed.
		held.Lock()
		defer held.Unlock()
		err = l.f.Close()
		delete(held.files, l.key)
	})
	return err
}
