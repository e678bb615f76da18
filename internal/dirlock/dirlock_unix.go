//go:build unix

package dirlock

import (
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

var held struct {
	sync.Mutex
	files map[string]bool
}

// Lock takes an exclusive fcntl lock on the file name, creating it (mode
// 0600) when it is missing but never truncating it. The lock is released by
// closing the returned Closer.
func Lock(name string) (io.Closer, error) { return lock(name, os.O_CREATE) }

// LockExisting is Lock for a reader that must create nothing: it opens the
// existing file without O_CREATE and without O_TRUNC, so neither the
// directory nor the file changes (opening for writing, which an fcntl write
// lock needs, changes no timestamp). A missing file is an error wrapping
// os.ErrNotExist; a symbolic link is refused (ELOOP).
func LockExisting(name string) (io.Closer, error) { return lock(name, unix.O_NOFOLLOW) }

func lock(name string, flags int) (io.Closer, error) {
	held.Lock()
	defer held.Unlock()
	if held.files[name] {
		return nil, ErrHeld
	}
	f, err := os.OpenFile(name, os.O_RDWR|flags|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart}
	if err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk); err != nil {
		_ = f.Close()
		return nil, err
	}
	if held.files == nil {
		held.files = map[string]bool{}
	}
	held.files[name] = true
	return &fileLock{name: name, f: f}, nil
}

type fileLock struct {
	once sync.Once
	name string
	f    *os.File
}

func (l *fileLock) Close() error {
	var err error
	l.once.Do(func() {
		held.Lock()
		delete(held.files, l.name)
		held.Unlock()
		err = l.f.Close()
	})
	return err
}
