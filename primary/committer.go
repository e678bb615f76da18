package primary

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/primary/contract"
)

// Group commit.
//
// Every command commit goes through one committer goroutine. It takes all
// commits waiting at that moment (up to maxGroup), assigns their sequences in
// order, writes all of them into one Pebble batch and hands that batch to
// Pebble's commit pipeline without waiting for the sync; then it goes on with
// the next group while the syncer goroutine waits for the fsync and answers
// the group. Pebble's WAL writer syncs everything queued at once, so many
// groups can share an fsync, and one batch per group pays Pebble's per-batch
// cost (the commit pipeline, its mutexes and goroutine handoffs) once per
// group instead of once per commit.
//
// One goroutine applies every group, in sequence order, so WAL order equals
// sequence order and the durable sequences never have gaps; the syncer
// answers groups in the same order, so after a group's sync every sequence
// up to its last is durable and the publication frontier moves there.

// maxGroup and maxGroupBytes bound a group: at most maxGroup commits, and
// no commit joins a group whose events already hold maxGroupBytes (a single
// commit may exceed it: 16 events of up to 1 MiB each).
const (
	maxGroup      = 256
	maxGroupBytes = 1 << 20
)

// commitReq is one command commit waiting for the committer.
type commitReq struct {
	plan   *contract.Plan
	drafts []contract.Draft
	hash   [32]byte
	key    string
	tp     string
	size   int // bytes of its events' types and payloads

	c    Commit
	err  error
	done chan struct{} // signalled (one send) when c and err are set
}

// commitReqs holds commit requests, each with its done channel (room for
// one signal), between commits: submit returns a request to it once it
// received the request's one signal, when nothing refers to it any more.
var commitReqs = sync.Pool{New: func() any { return &commitReq{done: make(chan struct{}, 1)} }}

// signal answers r: c and err are set.
func (r *commitReq) signal() { r.done <- struct{}{} }

// syncJob is an applied group waiting for its fsync.
type syncJob struct {
	b       *pebble.Batch
	last    uint64 // the group's last sequence; 0 if it committed nothing
	members []*commitReq
}

// startCommitter starts the committer and syncer goroutines.
func (db *DB) startCommitter() {
	db.commitQ = make(chan *commitReq, maxGroup)
	db.syncQ = make(chan syncJob, 64)
	db.commitStop = make(chan struct{})
	db.commitDone = make(chan struct{})
	syncDone := make(chan struct{})
	go func() {
		defer close(syncDone)
		db.runSyncer()
	}()
	go func() {
		defer func() {
			<-syncDone
			close(db.commitDone)
		}()
		db.runCommitter()
	}()
}

// stopCommitter stops the goroutines once no commit is in flight.
func (db *DB) stopCommitter() {
	if db.commitStop == nil {
		return
	}
	close(db.commitStop)
	<-db.commitDone
}

// submit hands a commit to the committer and waits for its answer. r
// comes from commitReqs; submit puts it back unless the committer may
// still answer it.
func (db *DB) submit(r *commitReq) (Commit, error) {
	select {
	case db.commitQ <- r:
	case <-db.failCh:
		commitReqs.Put(r)
		return Commit{}, ErrFailed
	}
	select {
	case <-r.done:
		c, err := r.c, r.err
		*r = commitReq{done: r.done}
		commitReqs.Put(r)
		return c, err
	case <-db.failCh:
		// The committer ended inside Pebble's Fatalf, or a write failed:
		// the outcome is unknown and the server stops.
		return Commit{}, ErrFailed
	}
}

// runCommitter applies groups until stopped. If Pebble's Fatalf ends this
// goroutine (see guard), the deferred call fails the DB, which answers every
// waiting commit with ErrFailed.
func (db *DB) runCommitter() {
	returned := false
	defer func() {
		if !returned {
			db.fail(errors.New("store write ended without returning"))
		}
		close(db.syncQ)
	}()
	group := make([]*commitReq, 0, maxGroup)
	var carry *commitReq // taken from the queue, but for the next group
	for {
		if carry != nil {
			group = append(group[:0], carry)
			carry = nil
		} else {
			select {
			case r := <-db.commitQ:
				group = append(group[:0], r)
			case <-db.commitStop:
				returned = true
				return
			}
		}
		// Let the commits that are about to arrive join this group: yield
		// while the queue keeps growing (at most three times). Under load
		// this turns groups of one or two into groups of tens, and so many
		// fewer trips through Pebble's commit pipeline; with nothing else
		// runnable Gosched returns at once and adds no latency.
		for range 3 {
			n := len(db.commitQ)
			runtime.Gosched()
			if len(db.commitQ) == n {
				break
			}
		}
		group, carry = fillGroup(group, db.commitQ)
		job, err := db.applyGroup(group)
		if err != nil {
			for _, r := range group {
				if r.err == nil {
					r.err = err
				}
				r.signal()
			}
			returned = true
			return
		}
		db.tel.groupSize.Record(context.Background(), int64(len(group)), db.tel.groupAttrs...)
		db.syncQ <- job
	}
}

// fillGroup adds the commits waiting in q to group (which holds its first
// commit) within the bounds maxGroup and maxGroupBytes, without blocking. A
// commit taken from q that would cross the byte bound is returned as carry,
// the first commit of the next group.
func fillGroup(group []*commitReq, q <-chan *commitReq) (_ []*commitReq, carry *commitReq) {
	bytes := 0
	for _, r := range group {
		bytes += r.size
	}
	for len(group) < maxGroup && bytes < maxGroupBytes {
		select {
		case r := <-q:
			if bytes+r.size > maxGroupBytes {
				return group, r
			}
			group = append(group, r)
			bytes += r.size
		default:
			return group, nil
		}
	}
	return group, nil
}

// runSyncer waits for each applied group's fsync, in order, advances the
// publication frontier and answers the group's commits.
func (db *DB) runSyncer() {
	for job := range db.syncQ {
		var err error
		if job.b != nil {
			if err = job.b.SyncWait(); err != nil {
				err = db.writeFailed(err)
			}
			_ = job.b.Close()
		}
		if err == nil && job.last != 0 {
			db.frontier.advance(job.last)
		}
		for _, r := range job.members {
			if err != nil && r.err == nil {
				r.err = err
			}
			r.signal()
		}
	}
}

// applyGroup assigns sequences to the group's commits and applies them as
// one batch, without waiting for the sync. Commits that are refused
// (idempotency replays and conflicts) get their answer in r.c or r.err and
// add nothing to the batch. An error return means the store failed.
func (db *DB) applyGroup(group []*commitReq) (syncJob, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	job := syncJob{members: append([]*commitReq(nil), group...)}
	var (
		b     *pebble.Batch
		now   = db.clock()
		seq   = db.last
		cum   = db.lastCum
		count = db.durableCount
		keys  map[string]idemRecord // keys committed earlier in this group
	)
	for i, r := range group {
		var ik []byte // the idempotency record's key, for the lookup and the write (which copies it)
		if r.key != "" {
			db.ik = appendIdemKey(db.ik[:0], r.key)
			ik = db.ik
			rec, found, err := db.lookupIdem(r.key, ik, keys)
			if err != nil {
				r.err = err
				continue
			}
			if found {
				if rec.InputHash != r.hash {
					r.err = ErrIdempotencyConflict
				} else {
					r.c = Commit{Seq: rec.Seq, Events: eventIDs(rec.Seq, rec.Events), Replayed: true}
				}
				continue
			}
		}
		if b == nil {
			b = db.store.NewBatch()
		}
		seq++
		n := uint32(len(r.drafts))
		var size uint64
		for i, d := range r.drafts {
			id := event.ID{Seq: seq, Pos: uint32(i)}
			// Drafts were checked against the event limits before
			// submission (checkDrafts), so NewStored cannot fail here.
			st, _ := event.NewStored(id, d.Type, d.Payload)
			db.enc = st.AppendEncoding(db.enc[:0])
			encLen := len(db.enc)
			ek := eventKey(id)
			_ = b.Set(ek, db.enc, nil)
			size += uint64(len(ek) + encLen)
			db.enc = appendIntent(db.enc[:0], Intent{
				Event: id, State: IntentPending, CommittedAt: now, TraceParent: r.tp, EncodedLen: encLen,
			})
			_ = b.Set(intentKey(id), db.enc, nil)
		}
		h := historyRecord{Seq: seq, CommittedAt: now, PlanID: r.plan.ID, IdemKey: r.key, InputHash: r.hash, Events: n}
		hk := historyKey(seq)
		size += uint64(len(hk) + historyLen(h))
		cum += size
		h.Cum = cum
		db.enc = appendHistory(db.enc[:0], h)
		_ = b.Set(hk, db.enc, nil)
		if r.key != "" {
			rec := idemRecord{Seq: seq, Events: n, InputHash: r.hash}
			db.enc = appendIdem(db.enc[:0], rec)
			_ = b.Set(ik, db.enc, nil)
			if i < len(group)-1 { // only later members of the group look here
				if keys == nil {
					keys = make(map[string]idemRecord)
				}
				keys[r.key] = rec
			}
		}
		count += uint64(n)
		r.c = Commit{Seq: seq, Events: eventIDs(seq, n)}
	}
	if b == nil {
		return job, nil
	}
	_ = b.Set(keyCount, encodeU64(count), nil)
	if err := db.store.ApplyNoSyncWait(b, pebble.Sync); err != nil {
		_ = b.Close()
		return syncJob{}, db.writeFailed(err)
	}
	for _, r := range group { // committed members are in ascending sequence order
		if r.err == nil && !r.c.Replayed {
			db.idx.add(r.c.Seq, uint32(len(r.drafts)))
		}
	}
	db.last, db.lastCum, db.durableCount = seq, cum, count
	db.lastApplied.Store(seq)
	db.cumulativeBytes.Store(cum)
	db.idx.count.Store(count)
	job.b, job.last = b, seq
	return job, nil
}

// lookupIdem finds an idempotency key among the group's earlier commits or
// in the store (under ik, its record's key).
func (db *DB) lookupIdem(key string, ik []byte, group map[string]idemRecord) (idemRecord, bool, error) {
	if rec, ok := group[key]; ok {
		return rec, true, nil
	}
	v, err := db.get(ik)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		return idemRecord{}, false, nil
	case err != nil:
		return idemRecord{}, false, fmt.Errorf("primary: read idempotency key: %w", err)
	}
	rec, err := decodeIdem(v)
	if err != nil {
		return idemRecord{}, false, err
	}
	return rec, true, nil
}

// checkDrafts applies the event limits that event.NewStored enforces, before
// a commit is submitted, so that a group never holds a commit that cannot be
// encoded.
func checkDrafts(drafts []contract.Draft) (size int, err error) {
	for _, d := range drafts {
		if err := event.CheckLimits(d.Type, d.Payload); err != nil {
			return 0, err
		}
		size += len(d.Type) + len(d.Payload)
	}
	return size, nil
}
