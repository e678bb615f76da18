package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// TestFloorDeliversEveryCommitOnce: bodies committed by concurrent clients
// are each archived once under their event's key, every intent is gone, and
// the quota key holds the bytes archived: the floor does the work it stands
// for, so BenchmarkFastCommands' baseline is not cheaper than the job.
func TestFloorDeliversEveryCommitOnce(t *testing.T) {
	dir := t.TempDir()
	f, err := openFloor(dir)
	if err != nil {
		t.Fatal(err)
	}
	const clients, each = 8, 150
	bodies := make(map[uint64][]byte)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := range each {
				body := fmt.Appendf(nil, `{"client":%d,"i":%d}`, c, i)
				seq, err := f.commit(body)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				bodies[seq] = body
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for deadline := time.Now().Add(30 * time.Second); f.pending() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d events still pending", f.pending())
		}
	}
	var quota uint64
	for seq, body := range bodies {
		quota += uint64(len(body))
		got, closer, err := f.archive.Get(floorKey('a', seq))
		if err != nil {
			t.Fatalf("event %d not archived: %v", seq, err)
		}
		if !bytes.Equal(got, body) {
			t.Fatalf("event %d archived as %q, want %q", seq, got, body)
		}
		_ = closer.Close()
		if _, closer, err := f.primary.Get(floorKey('i', seq)); err != pebble.ErrNotFound {
			if err == nil {
				_ = closer.Close()
			}
			t.Fatalf("event %d's intent is still there (%v)", seq, err)
		}
	}
	if len(bodies) != clients*each {
		t.Fatalf("%d sequences for %d commits", len(bodies), clients*each)
	}
	q, closer, err := f.archive.Get([]byte("q"))
	if err != nil {
		t.Fatal(err)
	}
	if got := binary.BigEndian.Uint64(q); got != quota {
		t.Fatalf("quota key %d, want %d", got, quota)
	}
	_ = closer.Close()
	it, err := f.archive.NewIter(&pebble.IterOptions{LowerBound: []byte{'a'}, UpperBound: []byte{'b'}})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if n != clients*each {
		t.Fatalf("%d archive records, want %d", n, clients*each)
	}
	if err := f.close(); err != nil {
		t.Fatal(err)
	}
}
