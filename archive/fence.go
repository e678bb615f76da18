package archive

import (
	"errors"
	"io"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// instanceFS is the filesystem of one Pebble instance of a Store: the
// store's filesystem behind a fence, with the instance's directory lock
// kept so that it can be released without the instance.
//
// Why: a fatal storage-engine error (a WAL or MANIFEST write or sync that
// failed) ends the Pebble goroutine that met it (pebbleLogger.Fatalf calls
// runtime.Goexit; the default would exit the process). That goroutine may
// hold Pebble's commit pipeline lock or leave a flush marked in progress,
// and DB.Close then waits for it forever, so the instance never releases
// the directory lock and the archive could not be opened again until the
// process restarts: a repaired disk would not resume delivery in place.
// When Close does not return within the transaction timeout, the Store
// abandons the instance instead: the fence makes every later file
// operation of that instance fail (its background goroutines can no longer
// create, write, rename or delete anything in the store directory), and
// only then the lock is released for a new instance. The abandoned
// instance's memory and goroutines leak until the process exits; that is
// the price of one fatal fault per episode, not of normal operation.
type instanceFS struct {
	*errorfs.FS
	fenced atomic.Bool

	mu   sync.Mutex
	lock io.Closer
}

// errFenced is what an abandoned instance gets from every file operation.
var errFenced = errors.New("archive: this storage engine instance was abandoned after a fatal error")

func newInstanceFS(fs vfs.FS) *instanceFS {
	f := &instanceFS{}
	f.FS = errorfs.Wrap(fs, fenceInjector{f})
	return f
}

type fenceInjector struct{ f *instanceFS }

func (i fenceInjector) MaybeError(errorfs.Op) error {
	if i.f.fenced.Load() {
		return errFenced
	}
	return nil
}

func (fenceInjector) String() string { return "fence" }

// Lock implements vfs.FS, keeping the lock's closer (made idempotent: the
// abandoned instance may still close it one day).
func (f *instanceFS) Lock(name string) (io.Closer, error) {
	c, err := f.FS.Lock(name)
	if err != nil {
		return nil, err
	}
	oc := &onceCloser{c: c}
	f.mu.Lock()
	f.lock = oc
	f.mu.Unlock()
	return oc, nil
}

// abandon fences the instance, then releases its directory lock.
func (f *instanceFS) abandon() {
	f.fenced.Store(true)
	f.mu.Lock()
	lock := f.lock
	f.mu.Unlock()
	if lock != nil {
		_ = lock.Close()
	}
}

type onceCloser struct {
	once sync.Once
	c    io.Closer
	err  error
}

func (o *onceCloser) Close() error {
	o.once.Do(func() { o.err = o.c.Close() })
	return o.err
}
