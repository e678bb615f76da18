package backup_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riffdb/riffdb/backup"
)

// BenchmarkCommitDuringBackup measures command commit throughput while
// backups run back to back against the same database without them, in the
// same run: each iteration commits benchCommits commands from benchClients
// concurrent clients twice, once alone and once while a goroutine takes
// backups in a loop (each removed once written, so the disk does not fill;
// the backup in flight at the end of a round is waited for outside the
// measured time), alternating which goes first, so that both see the same
// growing database and the same machine noise. It reports both throughputs,
// their ratio (the target is ≥ 0.8) and the backups taken per
// second. Run it with many iterations (-benchtime 20x or more): one round
// lasts a fraction of a second.
func BenchmarkCommitDuringBackup(b *testing.B) {
	const (
		benchClients = 16
		benchCommits = 1000
	)
	e := newEnv(b)
	e.opts.Logger = nil
	db := e.open()
	var next atomic.Int64
	commit := func() time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		var left atomic.Int64
		left.Store(benchCommits)
		for c := 0; c < benchClients; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for left.Add(-1) >= 0 {
					in := json.RawMessage(fmt.Sprintf(`{"x":%d}`, next.Add(1)))
					if _, err := db.Execute(context.Background(), "put", in, ""); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return time.Since(start)
	}
	var backups int64
	withBackups := func() time.Duration {
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
				}
				m, err := backup.Create(context.Background(), db, e.root, backup.Options{})
				if err != nil {
					b.Error(err)
					return
				}
				atomic.AddInt64(&backups, 1)
				if err := os.RemoveAll(filepath.Join(e.root, m.Name)); err != nil {
					b.Error(err)
					return
				}
			}
		}()
		d := commit()
		close(stop)
		<-done // outside the measured time
		return d
	}
	commit() // warm up: the store's first memtables and WAL files
	var alone, during time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			alone += commit()
			during += withBackups()
		} else {
			during += withBackups()
			alone += commit()
		}
	}
	b.StopTimer()
	n := float64(b.N * benchCommits)
	base, load := n/alone.Seconds(), n/during.Seconds()
	b.ReportMetric(base, "commits/s-alone")
	b.ReportMetric(load, "commits/s-during-backup")
	b.ReportMetric(load/base, "ratio")
	b.ReportMetric(float64(backups)/during.Seconds(), "backups/s")
}
