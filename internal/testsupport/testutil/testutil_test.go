package testutil

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestSyncBufferConcurrentWrites(t *testing.T) {
	t.Parallel()
	var buf SyncBuffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { fmt.Fprintf(&buf, "%d", i) })
	}
	wg.Go(func() { _ = buf.String() })
	wg.Wait()
	if n := len(buf.String()); n != 8 {
		t.Fatalf("%d bytes written, want 8", n)
	}
}

func TestWaitForReturnsOnceCondHolds(t *testing.T) {
	t.Parallel()
	calls := 0
	WaitFor(t, time.Minute, time.Nanosecond, "the third call", func() bool { calls++; return calls == 3 })
	if calls != 3 {
		t.Fatalf("cond called %d times, want 3", calls)
	}
}
