// Package testutil holds small helpers shared by the tests of several
// packages. It needs only the standard library, golang.org/x/sys and
// Pebble's vfs (SlowTables), and is imported only from _test.go files.
package testutil

import (
	"bytes"
	"log"
	"sync"
	"testing"
	"time"
)

// SyncBuffer is a bytes.Buffer safe for the concurrent writes of a logger or
// a child process and the reads of a test. The zero value is ready to use.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p to the buffer.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns the buffer's contents so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// WaitFor polls cond every interval until it holds, failing the test with
// what if it does not within d. It is for observing processes the test
// cannot instrument (a child process, a server over HTTP); inside the
// module, prefer a hook or a testsignal.TestSignal that says when the step
// happened.
func WaitFor(tb testing.TB, d, interval time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(interval)
	}
}

// QuietPebbleLogger is a Pebble logger (pebble.Logger) for tests that open
// a Pebble store directly: it drops informational and error messages, and
// on a fatal one does what Pebble's own default logger does (log.Fatalf:
// the message, then exit status 1), as Pebble expects Fatalf not to return.
type QuietPebbleLogger struct{}

// Infof drops the message.
func (QuietPebbleLogger) Infof(string, ...any) {}

// Errorf drops the message.
func (QuietPebbleLogger) Errorf(string, ...any) {}

// Fatalf writes the message and exits with status 1.
func (QuietPebbleLogger) Fatalf(format string, args ...any) { log.Fatalf(format, args...) }
