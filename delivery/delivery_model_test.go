package delivery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"pgregory.net/rapid"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/outbox"
	"github.com/riffdb/riffdb/primary"
	"github.com/riffdb/riffdb/primary/contract"
)

type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}
func (c *manualClock) After(time.Duration) <-chan time.Time { return nil }
func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

const modelContract = `
[commands.put]
input = { k = "string", pad = "string?" }
emits = ["put"]

[commands.pair]
input = { k = "string" }
emits = ["a", "b"]
`

// crashPoint wraps a destination and, when armed, crash-clones both
// filesystems right after the n-th Accept returns: the "power cut" lands
// between archive acceptance and source completion.
type crashPoint struct {
	outbox.Destination
	arm     atomic.Int64 // crash after this many more accepts; 0 = disarmed
	onCrash func()
}

func (c *crashPoint) Accept(ctx context.Context, k event.Key, r []byte) (deliverytype.Outcome, error) {
	o, err := c.Destination.Accept(ctx, k, r)
	if c.arm.Load() > 0 && c.arm.Add(-1) == 0 {
		c.onCrash()
	}
	return o, err
}

// deliveryModel is the system under test plus the model of what it must hold.
type deliveryModel struct {
	t        *rapid.T
	clock    *manualClock
	c        *contract.Contract
	srcFS    *vfs.MemFS
	dstFS    *vfs.MemFS
	faulty   atomic.Bool
	db       *primary.DB
	dest     *Destination
	cp       *crashPoint
	w        *outbox.Worker
	quota    int64
	crashed  []*vfs.MemFS // set by a crash point: the clones to restart from
	acked    map[event.ID][]byte
	everSeen map[event.Key][]byte // every value any archive key ever held
	n        int
}

func (m *deliveryModel) open(srcFS, dstFS *vfs.MemFS) {
	m.srcFS, m.dstFS = srcFS, dstFS
	db, err := primary.Open(context.Background(), primary.Options{Path: "/db", Contract: m.c, FS: srcFS, Clock: m.clock})
	if err != nil {
		m.t.Fatalf("reopen primary: %v", err)
	}
	m.db = db
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if m.faulty.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return &os.PathError{Op: "inject", Path: op.Path, Err: syscall.EIO}
		}
		return nil
	})
	m.dest = newDestination("/outbox", archive.Options{Database: db.Identity(), QuotaEncodedBytes: m.quota,
		FS: errorfs.Wrap(dstFS, inj), MinFreeBytes: -1, TxnTimeout: 2 * time.Second, Clock: m.clock})
	m.cp = &crashPoint{Destination: m.dest}
	m.cp.onCrash = func() {
		m.crashed = []*vfs.MemFS{m.srcFS.CrashClone(vfs.CrashCloneCfg{}), m.dstFS.CrashClone(vfs.CrashCloneCfg{})}
	}
	w, err := outbox.New(outbox.Options{Alias: "default", Source: m.dest.anchoredTo(db), Destination: m.cp, Clock: m.clock})
	if err != nil {
		m.t.Fatal(err)
	}
	m.w = w
}

func (m *deliveryModel) close() {
	_ = m.w.Close()
	_ = m.dest.Close()
	_ = m.db.Close()
}

func (m *deliveryModel) commit(t *rapid.T) {
	cmd := rapid.SampledFrom([]string{"put", "pair"}).Draw(t, "command")
	in := map[string]string{"k": fmt.Sprint(m.n)}
	if cmd == "put" {
		in["pad"] = strings.Repeat("x", rapid.IntRange(0, 2000).Draw(t, "pad"))
	}
	m.n++
	b, _ := json.Marshal(in)
	c, err := m.db.Execute(context.Background(), cmd, b, "")
	if err != nil {
		t.Fatalf("execute: %v", err)
	}
	for _, id := range c.Events {
		raw, err := m.db.LoadEvent(context.Background(), id)
		if err != nil {
			t.Fatalf("load acknowledged event: %v", err)
		}
		m.acked[id] = raw
	}
}

// restart reopens both stores from the crash clones (or from the current
// filesystems after a clean close) and starts a new worker, as a process
// restart would.
func (m *deliveryModel) restart(src, dst *vfs.MemFS) {
	m.close()
	m.faulty.Store(false)
	m.open(src, dst)
}

func (m *deliveryModel) deliver(t *rapid.T) {
	if rapid.IntRange(0, 4).Draw(t, "crash?") == 0 {
		m.cp.arm.Store(int64(rapid.IntRange(1, 20).Draw(t, "crash after accepts")))
	}
	_, _ = m.w.RunOnce(context.Background()) // primary errors are not expected; failures are in health
	m.cp.arm.Store(0)
	if m.crashed != nil {
		clones := m.crashed
		m.crashed = nil
		m.restart(clones[0], clones[1])
	}
}

func (m *deliveryModel) check(t *rapid.T) {
	ctx := context.Background()
	intents, err := m.db.ScanIntents(ctx, nil, 1<<20)
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	undelivered := map[event.ID]bool{}
	for _, in := range intents {
		undelivered[in.Event] = true
	}
	if n, st := m.db.UndeliveredCount(); st != primary.IndexReady || n != uint64(len(intents)) {
		t.Fatalf("undelivered count %d (%v) != %d intents in the index", n, st, len(intents))
	}
	// Read the whole archive (reopening it if a fault closed it).
	if err := m.dest.Probe(ctx); err != nil {
		t.Fatalf("probe after faults cleared: %v", err)
	}
	m.dest.mu.Lock()
	store := m.dest.store
	r := store.NewReader()
	archived := map[event.Key][]byte{}
	var total int64
	var cur archive.Cursor
	for {
		p, err := r.ReadPage(ctx, cur)
		if err != nil {
			m.dest.mu.Unlock()
			t.Fatalf("read archive: %v", err)
		}
		for _, rec := range p.Records {
			enc := rec.Event.Encode()
			archived[rec.Key] = enc
			total += rec.Charge
		}
		if p.Next == nil {
			break
		}
		cur = p.Next
	}
	_ = r.Close()
	u := store.Usage()
	m.dest.mu.Unlock()
	if u.Records != int64(len(archived)) || u.EncodedBytes != total {
		t.Fatalf("archive accounting %d records / %d bytes, content %d / %d", u.Records, u.EncodedBytes, len(archived), total)
	}
	for k, v := range archived {
		if old, ok := m.everSeen[k]; ok && !bytes.Equal(old, v) {
			t.Fatalf("archive key %v held two values", k.Event)
		}
		m.everSeen[k] = v
	}
	for id, raw := range m.acked {
		k := event.Key{Database: m.db.Identity(), Incarnation: m.db.Incarnation(), Event: id}
		if v, ok := archived[k]; ok {
			if !bytes.Equal(v, raw) {
				t.Fatalf("event %v archived with different bytes", id)
			}
			continue
		}
		if !undelivered[id] {
			t.Fatalf("acknowledged event %v is neither undelivered nor archived", id)
		}
	}
}

// TestDeliveryModel drives random interleavings of commands, delivery passes,
// injected archive I/O failures, crashes between acceptance and completion,
// clean restarts and clock moves, and checks after every step that each
// acknowledged event is undelivered in the index or in the archive with
// identical bytes, that no archive key ever held two values, that archive
// accounting equals its records, and that the undelivered count equals the
// index.
func TestDeliveryModel(t *testing.T) {
	c, err := contract.Compile([]byte(modelContract))
	if err != nil {
		t.Fatal(err)
	}
	rapid.Check(t, func(t *rapid.T) {
		src, dst := vfs.NewCrashableMem(), vfs.NewCrashableMem()
		if err := dst.MkdirAll("/outbox", 0o700); err != nil {
			t.Fatal(err)
		}
		root, err := dst.OpenDir("/") // the operator's precreated directory is durable
		if err != nil {
			t.Fatal(err)
		}
		if err := errors.Join(root.Sync(), root.Close()); err != nil {
			t.Fatal(err)
		}
		m := &deliveryModel{t: t, c: c, clock: &manualClock{now: time.Unix(1_800_000_000, 0)},
			quota: int64(rapid.SampledFrom([]int{4 << 10, 64 << 10, 1 << 30}).Draw(t, "quota")),
			acked: map[event.ID][]byte{}, everSeen: map[event.Key][]byte{}}
		m.open(src, dst)
		defer m.close()
		t.Repeat(map[string]func(*rapid.T){
			"":        m.check,
			"commit":  m.commit,
			"deliver": m.deliver,
			"fault": func(t *rapid.T) {
				m.faulty.Store(true)
				m.deliver(t)
				m.faulty.Store(false)
			},
			"advance": func(t *rapid.T) {
				m.clock.advance(time.Duration(rapid.SampledFrom([]int{1, 11, 60}).Draw(t, "seconds")) * time.Second)
			},
			"restart": func(t *rapid.T) {
				m.restart(m.srcFS, m.dstFS)
			},
			"crash now": func(t *rapid.T) {
				m.restart(m.srcFS.CrashClone(vfs.CrashCloneCfg{}), m.dstFS.CrashClone(vfs.CrashCloneCfg{}))
			},
		})
	})
}
