//go:build linux && cgo

package cmalloc

import (
	"runtime"
	"sync"
	"testing"
)

// TestOneArenaWhateverThreadAllocates allocates from eight OS threads at
// once, which under glibc's default gives each of them an arena of its own
// (up to eight per core), and requires that they all share one.
func TestOneArenaWhateverThreadAllocates(t *testing.T) {
	if Setting() != OneArena {
		t.Skipf("the C allocator was not limited here: %s", Setting())
	}
	var ready, done sync.WaitGroup
	release := make(chan struct{})
	for range 8 {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			runtime.LockOSThread() // hold a thread of its own until released
			defer runtime.UnlockOSThread()
			churn(64 << 10)
			ready.Done()
			<-release
		}()
	}
	ready.Wait()
	n := arenas()
	close(release)
	done.Wait()
	if n != 1 {
		t.Fatalf("glibc reports %d malloc arenas after eight threads allocated at once, want 1", n)
	}
}
