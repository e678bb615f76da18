package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/riffdb/riffdb/internal/store/walfill"
	"github.com/riffdb/riffdb/outbox"
)

// floor is the storage work of -store: what any server must do to commit a
// command durably and deliver its event as the spec's chain does, on bare
// Pebble with no riffdb code (the stores are opened as the benchmarks' bare
// stores are). Each request commits its body as an event and an 80-byte
// intent in one synced batch on the primary; one goroutine delivers them in
// runs of up to outbox.MaxRun: a synced claim batch rewriting the run's
// intents, then per event one synced archive batch (the event under its own
// key and an 8-byte quota key), then an unsynced completion batch deleting
// the run's intents; before it waits for more, a sync makes the last
// completion durable. No JSON, no authentication beyond the null server's
// token check, no telemetry, no custody or quota checks.
type floor struct {
	primary, archive *pebble.DB
	mu               sync.Mutex
	next             uint64              // the next event sequence to assign
	inflight         map[uint64]struct{} // assigned, commit not returned yet
	notify           chan struct{}
	stop             chan struct{}
	done             chan error
	cursor           atomic.Uint64 // the first event not delivered
}

func openFloor(dir string) (*floor, error) {
	open := func(name string) (*pebble.DB, error) {
		return pebble.Open(filepath.Join(dir, name), &pebble.Options{
			FS: walfill.New(vfs.Default), Cleaner: walfill.Cleaner{}, FormatMajorVersion: pebble.FormatValueSeparation, MemTableSize: 2 << 20})
	}
	p, err := open("primary")
	if err != nil {
		return nil, err
	}
	a, err := open("archive")
	if err != nil {
		return nil, errors.Join(err, p.Close())
	}
	f := &floor{primary: p, archive: a, next: 1, inflight: map[uint64]struct{}{},
		notify: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan error, 1)}
	f.cursor.Store(1)
	go func() { f.done <- f.deliver() }()
	return f, nil
}

func floorKey(prefix byte, seq uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{prefix}, seq)
}

var (
	intentPending = make([]byte, 80)
	intentClaimed = append(make([]byte, 79), 1)
)

// commit stores body as the next event with its pending intent, synced,
// and returns the event's sequence.
func (f *floor) commit(body []byte) (uint64, error) {
	f.mu.Lock()
	seq := f.next
	f.next++
	f.inflight[seq] = struct{}{}
	f.mu.Unlock()
	b := f.primary.NewBatch()
	err := errors.Join(b.Set(floorKey('e', seq), body, nil), b.Set(floorKey('i', seq), intentPending, nil))
	if err == nil {
		err = b.Commit(pebble.Sync)
	}
	err = errors.Join(err, b.Close())
	f.mu.Lock()
	delete(f.inflight, seq)
	f.mu.Unlock()
	select {
	case f.notify <- struct{}{}:
	default:
	}
	return seq, err
}

// committed returns the sequence below which every event is committed.
func (f *floor) committed() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.next
	for s := range f.inflight {
		w = min(w, s)
	}
	return w
}

// deliver is the delivering goroutine: it delivers every committed event
// in order, once, until stop is closed.
func (f *floor) deliver() error {
	cursor := f.cursor.Load()
	var quota uint64
	for {
		select {
		case <-f.stop:
			return nil
		case <-f.notify:
		}
		for {
			end := min(f.committed(), cursor+outbox.MaxRun)
			if end == cursor {
				break
			}
			events, err := f.load(cursor, end)
			if err != nil {
				return err
			}
			if err := f.intents(cursor, end, intentClaimed, pebble.Sync); err != nil {
				return err
			}
			for k, body := range events {
				quota += uint64(len(body))
				b := f.archive.NewBatch()
				err := errors.Join(b.Set(floorKey('a', cursor+uint64(k)), body, nil), b.Set([]byte("q"), binary.BigEndian.AppendUint64(nil, quota), nil))
				if err == nil {
					err = b.Commit(pebble.Sync)
				}
				if err = errors.Join(err, b.Close()); err != nil {
					return err
				}
			}
			if err := f.intents(cursor, end, nil, pebble.NoSync); err != nil {
				return err
			}
			cursor = end
			f.cursor.Store(cursor)
		}
		if err := f.primary.LogData(nil, pebble.Sync); err != nil {
			return err
		}
	}
}

// load reads the bodies of events [from, to) with one iterator.
func (f *floor) load(from, to uint64) ([][]byte, error) {
	it, err := f.primary.NewIter(&pebble.IterOptions{LowerBound: floorKey('e', from), UpperBound: floorKey('e', to)})
	if err != nil {
		return nil, err
	}
	out := make([][]byte, 0, to-from)
	for ok := it.First(); ok; ok = it.Next() {
		out = append(out, append([]byte(nil), it.Value()...))
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return nil, err
	}
	if len(out) != int(to-from) {
		return nil, fmt.Errorf("events %d..%d: found %d", from, to-1, len(out))
	}
	return out, nil
}

// intents rewrites (value) or deletes (nil) the intents of [from, to) in
// one batch.
func (f *floor) intents(from, to uint64, value []byte, opts *pebble.WriteOptions) error {
	b := f.primary.NewBatch()
	var err error
	for s := from; s < to && err == nil; s++ {
		if value != nil {
			err = b.Set(floorKey('i', s), value, nil)
		} else {
			err = b.Delete(floorKey('i', s), nil)
		}
	}
	if err == nil {
		err = b.Commit(opts)
	}
	return errors.Join(err, b.Close())
}

// pending returns the number of events committed and not delivered yet.
func (f *floor) pending() uint64 { return f.committed() - f.cursor.Load() }

// close stops the delivering goroutine and closes the stores.
func (f *floor) close() error {
	close(f.stop)
	err := <-f.done
	return errors.Join(err, f.primary.Close(), f.archive.Close())
}
