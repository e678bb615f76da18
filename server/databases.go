package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/delivery"
	"github.com/riffdb/riffdb/internal/hygiene/regularfile"
	"github.com/riffdb/riffdb/internal/observe/attrkey"
	"github.com/riffdb/riffdb/internal/process/cmalloc"
	"github.com/riffdb/riffdb/internal/store/stall"
	"github.com/riffdb/riffdb/outbox"
	"github.com/riffdb/riffdb/primary"
	"github.com/riffdb/riffdb/primary/contract"
	"github.com/riffdb/riffdb/telemetry"
)

type database struct {
	alias     string
	cfg       config.Database
	db        *primary.DB
	dest      *delivery.Destination // nil without an outbox section
	worker    *outbox.Worker        // nil without an outbox section
	quota     int64
	unobserve func() error

	unobserveArchive func() error
	unobserveQuota   func() error // the archive quota gauges (archive.Monitor.ObserveQuota)
	// unobserveValidation unregisters the last full validation's gauges
	// (archive.Monitor.ObserveValidation).
	unobserveValidation func() error
	// monitor serves the archive's last committed accounting, allocated
	// bytes and engine metrics to stats and scrapes without waiting on an
	// archive transaction; nil without an outbox section.
	monitor *archive.Monitor
}

// maxContractBytes bounds what is read of a contract file, like the
// configuration file's bound.
const maxContractBytes = 4 << 20

// openDatabase compiles the contract of dc and opens its primary store and,
// with an outbox, its archive and worker. The contract file must be a
// regular file (a symbolic link to one is followed) of at most
// maxContractBytes; it is opened without blocking, so a FIFO is refused
// (ErrContract), not waited on.
func (s *Server) openDatabase(ctx context.Context, dc config.Database) (*database, *StartupError) {
	data, _, err := regularfile.Read(dc.Contract, maxContractBytes, regularfile.Follow)
	if err != nil {
		return nil, newStartupError(s.cfg, fmt.Sprintf("database %q: the contract file cannot be read", dc.Alias), err, ErrContract)
	}
	c, err := contract.Compile(data)
	if err != nil {
		return nil, newStartupError(s.cfg, fmt.Sprintf("database %q: the contract is invalid", dc.Alias), err, ErrContract)
	}
	log := s.log.With(zap.String("database", dc.Alias))
	stalls := stall.New(log, "primary", nil)
	db, err := primary.Open(ctx, primary.Options{
		Alias: dc.Alias, Path: dc.Path, Contract: c, HistoryRetention: dc.HistoryRetention, Logger: log,
		TracerProvider: s.tel.TracerProvider, MeterProvider: s.tel.MeterProvider, IndexGate: s.indexGate,
		Cache: s.cache, FileCache: s.fileCache, MemTableSize: s.memory.PrimaryMemTable, WALGroup: &s.walGroup,
		WriteStalls: stalls,
	})
	if err != nil {
		return nil, s.primaryError(dc.Alias, err)
	}
	d := &database{alias: dc.Alias, cfg: dc, db: db}
	if err := s.attach(d, log); err != nil {
		if cerr := d.close(); cerr != nil {
			log.Warn("closing the database after the failed start", zap.Error(cerr))
		}
		return nil, newStartupError(s.cfg, fmt.Sprintf("database %q: the outbox cannot be prepared", dc.Alias), err)
	}
	return d, nil
}

// attach adds the open primary store's metrics and, with an outbox section,
// its archive destination and worker to d. On error d still records what was
// attached, for d.close.
func (s *Server) attach(d *database, log *zap.Logger) error {
	dc := d.cfg
	if un, err := telemetry.ObservePebble(s.tel.MeterProvider, "primary", dc.Alias, d.db.Metrics, d.db.WriteStalls()); err == nil {
		d.unobserve = un
	} else {
		log.Warn("pebble metrics unavailable", zap.Error(err))
	}
	if dc.Outbox == nil {
		log.Warn("no outbox destination configured: intents stay pending and outbox health is degraded")
		return nil
	}
	d.quota = dc.Outbox.QuotaEncodedBytes
	d.monitor = new(archive.Monitor)
	archiveStalls := stall.New(log, "archive", nil)
	source, dest := delivery.Connect(d.db, dc.Outbox.Directory, archive.Options{
		Alias: dc.Alias, Database: d.db.Identity(), QuotaEncodedBytes: dc.Outbox.QuotaEncodedBytes, Logger: log.Named("archive"),
		FullValidationInterval: dc.Outbox.EffectiveFullValidationInterval(),
		TracerProvider:         s.tel.TracerProvider, MeterProvider: s.tel.MeterProvider, Monitor: d.monitor,
		Cache: s.archiveCache, FileCache: s.fileCache, MemTableSize: s.memory.ArchiveMemTable, WALGroup: &s.walGroup,
		WriteStalls: archiveStalls,
	}, dc.Outbox.ScrubPagesPerSecond)
	d.dest = dest
	if un, err := telemetry.ObservePebble(s.tel.MeterProvider, "archive", dc.Alias, d.monitor.Metrics, archiveStalls); err == nil {
		d.unobserveArchive = un
	} else {
		log.Warn("archive pebble metrics unavailable", zap.Error(err))
	}
	reg, err := d.monitor.ObserveQuota(s.tel.MeterProvider, dc.Alias)
	if err != nil {
		return err
	}
	d.unobserveQuota = reg.Unregister
	vreg, err := d.monitor.ObserveValidation(s.tel.MeterProvider, dc.Alias)
	if err != nil {
		return err
	}
	d.unobserveValidation = vreg.Unregister
	newWorker := s.newWorker
	if newWorker == nil {
		newWorker = outbox.New
	}
	w, err := newWorker(outbox.Options{
		Alias: dc.Alias, Source: source, Destination: d.dest, Logger: s.log.Named("outbox"), // the worker adds the alias
		TracerProvider: s.tel.TracerProvider, MeterProvider: s.tel.MeterProvider,
		MaxAttempts: dc.Outbox.EffectiveMaxDeliveryAttempts(),
	})
	if err != nil {
		return err
	}
	d.worker = w
	return nil
}

// registerGauges exports the pending count from the undelivered index, read
// at collection time (no scans), for every database, and the C allocator's
// memory by state (cmalloc.ReadStats) for the process.
func (s *Server) registerGauges() error {
	m := s.tel.MeterProvider.Meter("github.com/riffdb/riffdb/server")
	pending, err := m.Int64ObservableGauge("riffdb.outbox.pending", metric.WithUnit("{event}"),
		metric.WithDescription("Undelivered outbox intents (pending, scheduled retries, active deliveries and dead letters) from the commit-coupled index. Absent while the index is unbuilt or degraded."))
	if err != nil {
		return err
	}
	cmem, err := m.Int64ObservableGauge("riffdb.c_allocator.memory", metric.WithUnit("By"),
		metric.WithDescription("Memory held by the C allocator that Pebble's block caches and memtables use (glibc's mallinfo2), by state: heap_in_use, heap_free, mapped. Absent where the C allocator is not glibc's."))
	if err != nil {
		return err
	}
	s.meterReg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, d := range s.dbs {
			if n, st := d.db.UndeliveredCount(); st == primary.IndexReady {
				o.ObserveInt64(pending, int64(n), metric.WithAttributes(attrkey.Database.String(d.alias)))
			}
		}
		if st, ok := cmalloc.ReadStats(); ok {
			for _, v := range []struct {
				state string
				n     int64
			}{{"heap_in_use", st.HeapInUse}, {"heap_free", st.HeapFree}, {"mapped", st.Mapped}} {
				o.ObserveInt64(cmem, v.n, metric.WithAttributes(attrkey.CAllocatorState.String(v.state)))
			}
		}
		return nil
	}, pending, cmem)
	return err
}

// closeStores closes every database's stores, then releases the server's
// references to the shared block and table caches (each freed once no
// store holds one).
func (s *Server) closeStores() error {
	var errs []error
	for _, d := range s.dbs {
		errs = append(errs, d.close())
	}
	s.dbs = nil
	for _, c := range []**pebble.Cache{&s.cache, &s.archiveCache} {
		if *c != nil {
			(*c).Unref()
			*c = nil
		}
	}
	if s.fileCache != nil {
		s.fileCache.Unref()
		s.fileCache = nil
	}
	return errors.Join(errs...)
}

// close closes the database's archive, its metric observers and its primary
// store (releasing the store's lock). The worker must be stopped first.
func (d *database) close() error {
	var errs []error
	if d.dest != nil {
		errs = append(errs, d.dest.Close())
	}
	if d.unobserve != nil {
		errs = append(errs, d.unobserve())
	}
	if d.unobserveArchive != nil {
		errs = append(errs, d.unobserveArchive())
	}
	if d.unobserveQuota != nil {
		errs = append(errs, d.unobserveQuota())
	}
	if d.unobserveValidation != nil {
		errs = append(errs, d.unobserveValidation())
	}
	return errors.Join(append(errs, d.db.Close())...)
}

func (s *Server) database(alias string) *database {
	for _, d := range s.dbs {
		if d.alias == alias {
			return d
		}
	}
	return nil
}

// aliases returns the aliases of the server's databases.
func (s *Server) aliases() []string {
	out := make([]string, len(s.dbs))
	for i, d := range s.dbs {
		out[i] = d.alias
	}
	return out
}

// PruneInterval is how often a database with history_retention prunes.
const PruneInterval = 10 * time.Second

// watch stops the server when the database's primary store fails (it can no
// longer promise durability) and, with history retention configured, prunes
// history periodically below the undelivered low-water mark.
func (s *Server) watch(ctx context.Context, d *database) {
	defer s.background.Done()
	var tick <-chan time.Time
	if d.cfg.HistoryRetention > 0 {
		t := time.NewTicker(PruneInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.db.Failed():
			s.fail(fmt.Errorf("server: database %q: %w", d.alias, d.db.Err()))
			return
		case <-tick:
			if n, err := d.db.Prune(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("history pruning failed", zap.String("database", d.alias), zap.Error(err))
			} else if n > 0 {
				s.log.Debug("history pruned", zap.String("database", d.alias), zap.Int("commits", n))
			}
		}
	}
}
