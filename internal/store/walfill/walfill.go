// Package walfill makes Pebble's write-ahead log files cheap to sync by
// writing zeros ahead of the log, and keeps the disk they take close to the
// log they hold.
//
// # Why zeros
//
// On ext4 and XFS, a synced commit that appends to a file, or that writes
// into space reserved with fallocate (unwritten extents), changes metadata:
// the file size, or the extent's written state. fdatasync then has to write
// that metadata (through the filesystem journal, where there is one) as
// well as the data.
// Once the space has really been written, overwriting it changes no metadata
// and fdatasync writes only the data. On this project's 2-vCPU ext4 machines
// a 1 KiB write+fdatasync into written space runs at about 1.35x the rate of
// one into fallocated or appended space. PostgreSQL zero-fills new WAL
// segments for the same reason (wal_init_zero).
//
// That holds for a few streams of syncs, not for many. Measured here
// (bench.BenchmarkParallelSync: 128-byte write+fdatasync loops, one file
// each, interleaved in time), overwriting written space ran at 1.1-2.1x of
// appending with one writer, 0.74-1.17x with 4 (runs differ), and
// 0.69-0.83x with 16 and 0.76-0.79x with 32. On a journaled ext4 the likely
// reason is that an fdatasync that must commit metadata waits for a journal
// commit, which ext4 shares among every file being synced at that moment
// (one cache flush for all of them), while an fdatasync into written space
// skips the journal and flushes on its own. But the machines these figures
// come from run ext4 without a journal (perf shows their fdatasync in the
// kernel's ext4_fsync_nojournal, which writes the inode's block with
// sync_dirty_buffer before the cache flush): there the metadata of an
// append is one more synchronous block write per sync, nothing is shared
// through a journal, and why appends keep up better with many streams is
// not established.
// Delivery, measured the same way (bench.BenchmarkMultiDB, the build with
// zeros for every WAL against the build with zeros for one database's,
// alternating), delivered 0.86-1.91x (median 1.32x, 7 pairs) with 4
// databases, 1.13-2.0x with 8, 0.76-1.60x with 16 and 0.92-1.01x with 32.
// So zeros are written only while at most MaxFilledLogs WAL files are open
// for writing in the server (eight databases: a primary and an archive
// each); with more, a WAL is appended to like any other file. A server
// counts its own WALs (Group); other servers' syncs on the same disk, in
// this process or another, are not seen.
//
// # Where a WAL's disk goes, and what this package changes
//
// Pebble sizes a WAL file's space three ways; each is listed with what it
// costs and what riffdb's stores do about it.
//
//   - Reservation. Pebble calls Preallocate on a WAL in blocks of 1.1x
//     Options.MemTableSize (fallocate with FALLOC_FL_KEEP_SIZE: the blocks
//     are allocated, the file size does not move). A 32 MiB memtable
//     reserves 35.2 MiB the moment a WAL takes its second write, however
//     little is ever logged in it. This package does not pass that
//     reservation on: it records how far Pebble reserved and only ever
//     allocates by writing zeros (below), so a WAL's allocated space is its
//     log plus at most Step bytes. Pebble ignores the error of its own
//     reservation, so the reservation never promised that a later log write
//     finds space; nothing that held is lost.
//   - Zero-fill. Before a write goes past the written space, zeros are
//     written from there to as far past the write's end as the log already
//     reaches, at least MinStep and at most Step bytes (never past Pebble's
//     reservation; only while at most MaxFilledLogs WALs are open, see
//     above). The log then always lands in written space. A step costs one
//     memory copy and one larger sync, instead of one large write that
//     would stall the first commits of a new WAL. Growing the step with the
//     log keeps the zeros of a WAL that logged little as small as its log:
//     a new store rotates through WALs of 256 KiB, 512 KiB, 1 MiB, ... of
//     log (Pebble starts a new store's memtables small and doubles them),
//     and keeps them all until they add up to a memtable and are flushed.
//     With a whole Step ahead of each, a database that had taken 3,000
//     one-event commands held four such WALs per store and allocated 6 MiB
//     for 1 MiB of data (server.TestYoungDatabasesStayWithinTwiceTheirData).
//   - Recycling. By default Pebble keeps up to
//     MemTableStopWritesThreshold+1 (3) obsolete WAL files, each at the
//     size it reached (about a memtable of log), to reuse their written
//     space for later WALs. Zero-fill already gives a new WAL written space,
//     so Cleaner turns recycling off: an obsolete WAL is deleted once its
//     memtable is flushed. A store keeps only the WALs of memtables not yet
//     flushed (Pebble flushes once they add up to a memtable, so about one
//     to two memtables of log in all), each with zeros ahead of its log of
//     at most the log's own size, and never more than Step nor, for a WAL
//     that logged less than MinStep, more than MinStep.
//
// Zeros are a clean end of log for Pebble's WAL reader, exactly like the
// tail of a preallocated or recycled file: a zeroed chunk with no valid
// chunk after it ends the log (an unclean but tolerated end for the newest
// WAL, after the EOF trailer for older ones).
//
// Only files with a real file descriptor are filled; Pebble never asks an
// in-memory file to preallocate.
package walfill

import (
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Step is the farthest ahead of the log that zeros are written, and MinStep
// the least: in between, as far as the log already reaches (see the package
// documentation).
const (
	Step    = 1 << 20
	MinStep = 64 << 10
)

// ahead returns how far past a write ending at end zeros are written.
func ahead(end int64) int64 { return min(Step, max(MinStep, end)) }

// MaxFilledLogs is the most WAL files that may be open for writing in a
// Group for zeros still to be written ahead of them (see the package
// documentation): the two stores of each of eight databases.
const MaxFilledLogs = 16

// Group counts the files that Pebble reserved space in (its WALs) and has
// not closed yet, among the stores whose filesystems share it. A server
// gives every store it opens its own Group, so that it counts its own WALs
// wherever it runs; stores opened without one (NewIn with nil, New) share
// the process's.
type Group struct {
	live atomic.Int64
}

// Open returns how many WALs are open in g: files Pebble reserved space in
// and has not closed.
func (g *Group) Open() int { return int(g.live.Load()) }

// processGroup is the Group of stores opened without one.
var processGroup Group

var zeros [Step]byte

// FS wraps a vfs.FS so that the space Pebble reserves in its files is
// written with zeros ahead of the log, at most one Step at a time, and
// never allocated further ahead than that.
type FS struct {
	vfs.FS
	g *Group
}

// New returns fs with zero-filled reservations, its WALs counted in the
// process's Group.
func New(fs vfs.FS) vfs.FS { return NewIn(fs, nil) }

// NewIn returns fs with zero-filled reservations, its WALs counted in g
// (nil: the process's Group).
func NewIn(fs vfs.FS, g *Group) vfs.FS {
	if g == nil {
		g = &processGroup
	}
	return FS{FS: fs, g: g}
}

// Unwrap implements vfs.FS, so that vfs.Root sees the wrapped filesystem.
func (f FS) Unwrap() vfs.FS { return f.FS }

// Create implements vfs.FS.
func (f FS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	return f.wrap(f.FS.Create(name, cat))
}

// ReuseForWrite implements vfs.FS. A recycled WAL file is already written
// as far as its old size, so only space past that is filled.
func (f FS) ReuseForWrite(oldname, newname string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	return f.wrap(f.FS.ReuseForWrite(oldname, newname, cat))
}

func (f FS) wrap(file vfs.File, err error) (vfs.File, error) {
	if err != nil || file.Fd() == vfs.InvalidFd {
		return file, err
	}
	return &walFile{File: file, g: f.g}, nil
}

// walFile is a vfs.File that writes zeros into its reservation ahead of its
// writes. Pebble writes a WAL from one goroutine, appending with Write, and
// calls Preallocate from inside Write; file relies on both. Files Pebble
// never reserves space in (tables, manifests) pass straight through.
type walFile struct {
	vfs.File
	g        *Group
	off      int64 // where the next Write lands (the file offset)
	filled   int64 // [0, filled) holds data or zeros
	reserved int64 // end of the space reserved with Preallocate
	live     bool  // counted in g
}

// Preallocate implements vfs.File: it records the reservation, for filling,
// without allocating it (see the package documentation). At the first
// reservation it learns the file's size: a recycled WAL is already written
// that far.
func (f *walFile) Preallocate(offset, length int64) error {
	if !f.live {
		st, err := f.Stat()
		if err != nil {
			return err
		}
		f.filled = max(f.filled, st.Size())
		f.live = true
		f.g.live.Add(1)
	}
	f.reserved = max(f.reserved, offset+length)
	return nil
}

// Write implements vfs.File. Before writing past the filled space it
// writes zeros past the write's end (ahead: as far as the log reaches,
// between MinStep and Step bytes), within the reservation, unless more than MaxFilledLogs WALs are open in its Group
// (then the write appends). A failed zero write is ignored: the data write
// that follows reports the same condition, and a partly filled file is
// still a valid log.
func (f *walFile) Write(p []byte) (int, error) {
	if end := f.off + int64(len(p)); end > f.filled && f.filled < f.reserved && f.g.live.Load() <= MaxFilledLogs {
		f.fill(min(f.reserved, end+ahead(end)))
	}
	n, err := f.File.Write(p)
	f.off += int64(n)
	f.filled = max(f.filled, f.off)
	return n, err
}

// Close implements vfs.File.
func (f *walFile) Close() error {
	if f.live {
		f.live = false
		f.g.live.Add(-1)
	}
	return f.File.Close()
}

// fill writes zeros over [f.filled, to).
func (f *walFile) fill(to int64) {
	for f.filled < to {
		n, err := f.File.WriteAt(zeros[:min(int64(Step), to-f.filled)], f.filled)
		f.filled += int64(n)
		if err != nil {
			return
		}
	}
}

// Cleaner is the pebble.Cleaner of a store whose FS is this package's: it
// deletes obsolete files exactly as Pebble's default does (its Clean and
// String are pebble.DeleteCleaner's), and it turns off WAL recycling. Pebble
// v2 has no option for the latter: it keeps obsolete WALs for reuse unless
// its Cleaner needs the contents of the files it cleans, which Cleaner
// declares through a more deeply embedded pebble.ArchiveCleaner (whose
// Clean and String the shallower DeleteCleaner's hide). The tests of this
// package fail if a Pebble upgrade stops honouring that.
type Cleaner struct {
	pebble.DeleteCleaner
	needsContents
}

// needsContents carries pebble.ArchiveCleaner's marker method one level
// below Cleaner.
type needsContents struct {
	pebble.ArchiveCleaner
}
