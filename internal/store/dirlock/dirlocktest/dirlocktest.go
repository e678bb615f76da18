//go:build linux

// Package dirlocktest is test support: it asks another process whether a
// store's LOCK file can be locked, the way a server starting beside the
// test would try it.
//
// A test package that uses Free calls Main first thing in its TestMain: the
// probe is the test binary itself, run again with an environment variable
// that makes Main try the locks and exit.
//
// A test that calls Free must not run in parallel with tests that take and
// release store locks in the same process: between its fork and its exec
// the probe holds copies of every descriptor of the test process, and an
// open file description lock lasts as long as any copy of its descriptor,
// so a lock released meanwhile stays held for that moment.
package dirlocktest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

const probeEnv = "RIFFDB_DIRLOCK_PROBE"

// Exit codes of the probe.
const (
	refused = 0 // every kind of lock was refused: someone holds the file
	took    = 3 // the probe took a lock
	failed  = 4 // the probe could not try (the file is missing, …)
)

// Main runs the probe and exits when this process is one; otherwise it
// returns at once.
func Main() {
	name := os.Getenv(probeEnv)
	if name == "" {
		return
	}
	os.Exit(probe(name))
}

// probe tries both kinds of lock a server may take on name: the record lock
// of Pebble's own vfs (F_SETLK) and riffdb's open file description lock
// (F_OFD_SETLK). It opens the file without O_CREATE or O_TRUNC, so it
// changes nothing.
func probe(name string) int {
	for _, cmd := range []int{unix.F_SETLK, unix.F_OFD_SETLK} {
		f, err := os.OpenFile(name, os.O_RDWR|unix.O_NOFOLLOW, 0)
		if err != nil {
			fmt.Fprintln(os.Stderr, "dirlocktest:", err)
			return failed
		}
		lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart}
		err = unix.FcntlFlock(f.Fd(), cmd, &lk)
		_ = f.Close()
		switch {
		case err == nil:
			return took
		case !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES):
			fmt.Fprintln(os.Stderr, "dirlocktest:", err)
			return failed
		}
	}
	return refused
}

// Free reports whether another process could take a lock on the file name
// now. It fails the test when the probe cannot try (a missing file, say).
func Free(t testing.TB, name string) bool {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), probeEnv+"="+name)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return false
	case errors.As(err, &exit) && exit.ExitCode() == took:
		return true
	}
	t.Fatalf("dirlocktest: the probe could not try the lock: %v %s", err, out)
	return false
}
