package backup_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riffdb/riffdb/backup"
)

// BenchmarkCommitDuringBackup measures command commit throughput while one
// online backup runs against the same database without one, in the same
// run. The database is first filled to benchStoreBytes (commands with a
// 4 KiB input), so that a backup copies a store of some size rather than
// mostly its WAL. Each iteration then takes one backup (paced at
// backup.DefaultBytesPerSecond) while benchClients clients commit small
// commands for as long as it runs, and lets the same clients commit for the
// same time without a backup, alternating which goes first, so that both
// see the same growing database and the same machine noise. It reports both
// throughputs, their ratio (the target is ≥ 0.8), and the backup's
// duration and size.
func BenchmarkCommitDuringBackup(b *testing.B) {
	const (
		benchClients    = 16
		benchStoreBytes = 64 << 20
		padBytes        = 4 << 10
	)
	e := newEnv(b)
	e.opts.Logger = nil
	db := e.open()
	var next atomic.Int64
	// Incompressible pads: the store's tables compress, and a backup
	// should copy benchStoreBytes, not a fraction of it.
	rnd := rand.New(rand.NewPCG(1, 2))
	padOf := func() string {
		var sb strings.Builder
		for range padBytes {
			sb.WriteByte(byte('a' + rnd.IntN(26)))
		}
		return sb.String()
	}
	fill := func(n int) {
		var wg sync.WaitGroup
		var left atomic.Int64
		left.Store(int64(n))
		pads := make([]string, 64)
		for i := range pads {
			pads[i] = padOf()
		}
		for c := 0; c < benchClients; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for left.Add(-1) >= 0 {
					x := next.Add(1)
					in := json.RawMessage(fmt.Sprintf(`{"x":%d,"pad":%q}`, x, pads[x%int64(len(pads))]))
					if _, err := db.Execute(context.Background(), "fill", in, ""); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	fill(benchStoreBytes / padBytes)
	// commitFor commits small commands from benchClients clients until stop
	// is closed, and returns how many it committed.
	commitFor := func(stop <-chan struct{}) int64 {
		var wg sync.WaitGroup
		var n atomic.Int64
		for c := 0; c < benchClients; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					in := json.RawMessage(fmt.Sprintf(`{"x":%d}`, next.Add(1)))
					if _, err := db.Execute(context.Background(), "put", in, ""); err != nil {
						b.Error(err)
						return
					}
					n.Add(1)
				}
			}()
		}
		wg.Wait()
		return n.Load()
	}
	var (
		backupTime, aloneTime time.Duration
		duringN, aloneN       int64
		backupBytes           int64
	)
	during := func() {
		stop := make(chan struct{})
		counted := make(chan int64)
		go func() { counted <- commitFor(stop) }()
		start := time.Now()
		m, err := backup.Create(context.Background(), db, e.root, backup.Options{})
		d := time.Since(start)
		close(stop)
		duringN += <-counted
		backupTime += d
		if err != nil {
			b.Fatal(err)
		}
		for _, f := range m.Files {
			backupBytes += f.Size
		}
		if err := os.RemoveAll(filepath.Join(e.root, m.Name)); err != nil {
			b.Fatal(err)
		}
	}
	alone := func(d time.Duration) {
		stop := make(chan struct{})
		t := time.AfterFunc(d, func() { close(stop) })
		defer t.Stop()
		start := time.Now()
		aloneN += commitFor(stop)
		aloneTime += time.Since(start)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			before := backupTime
			during()
			alone(backupTime - before)
		} else {
			// The previous backup's duration stands in for this one's.
			alone(backupTime / time.Duration(i))
			during()
		}
	}
	b.StopTimer()
	base, load := float64(aloneN)/aloneTime.Seconds(), float64(duringN)/backupTime.Seconds()
	b.ReportMetric(base, "commits/s-alone")
	b.ReportMetric(load, "commits/s-during-backup")
	b.ReportMetric(load/base, "ratio")
	b.ReportMetric(backupTime.Seconds()/float64(b.N), "s/backup")
	b.ReportMetric(float64(backupBytes)/float64(b.N)/(1<<20), "MiB/backup")
}
