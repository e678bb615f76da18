// Package walfill makes Pebble's new write-ahead log files cheap to sync by
// writing zeros into their reserved space ahead of the log.
//
// Pebble reserves the next ~1.1 memtables of a new WAL file with
// fallocate(FALLOC_FL_KEEP_SIZE). On ext4 and XFS that space is made of
// unwritten extents, so every synced commit into it converts extents and
// grows the file size, and fdatasync has to commit that metadata through the
// filesystem journal as well as write the data. Once the space has really
// been written, overwriting it changes no metadata and fdatasync writes
// only the data. Pebble gets the same effect from recycled WAL files, but a
// new store (and any store whose writes outrun recycling) has none. On this
// project's 2-vCPU ext4 machines a 1 KiB write+fdatasync into written space
// runs at about 1.35x the rate of one into fallocated or appended space.
// PostgreSQL zero-fills new WAL segments for the same reason
// (wal_init_zero).
//
// The zeros are written in steps of Step bytes ahead of the log, inside
// Pebble's reservation, rather than all at once: a 32 MiB memtable reserves
// 35 MiB, and writing that in one go would stall the first commits of a new
// store behind one large write and sync. A step costs one memory copy and
// one larger sync per Step bytes of log.
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
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Step is how far ahead of the log zeros are written.
const Step = 1 << 20

var zeros [Step]byte

// FS wraps a vfs.FS so that the space Pebble reserves in its files is
// written with zeros ahead of the log.
type FS struct {
	vfs.FS
}

// New returns fs with zero-filled reservations.
func New(fs vfs.FS) vfs.FS { return FS{FS: fs} }

// Unwrap implements vfs.FS, so that vfs.Root sees the wrapped filesystem.
func (f FS) Unwrap() vfs.FS { return f.FS }

// Create implements vfs.FS.
func (f FS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	return wrap(f.FS.Create(name, cat))
}

// ReuseForWrite implements vfs.FS. A recycled WAL file is already written
// as far as its old size, so only space past that is filled.
func (f FS) ReuseForWrite(oldname, newname string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	return wrap(f.FS.ReuseForWrite(oldname, newname, cat))
}

func wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil || f.Fd() == vfs.InvalidFd {
		return f, err
	}
	return &file{File: f}, nil
}

// file is a vfs.File that writes zeros into its reservation ahead of its
// writes. Pebble writes a WAL from one goroutine, appending with Write, and
// calls Preallocate from inside Write; file relies on both. Files Pebble
// never reserves space in (tables, manifests) pass straight through.
type file struct {
	vfs.File
	off      int64 // where the next Write lands (the file offset)
	filled   int64 // [0, filled) holds data or zeros
	reserved int64 // end of the space reserved with Preallocate
}

// Preallocate implements vfs.File: it reserves the space as the wrapped
// file does (so that ENOSPC shows up there) and records it for filling.
// At the first reservation it learns the file's size: a recycled WAL is
// already written that far.
func (f *file) Preallocate(offset, length int64) error {
	if f.reserved == 0 {
		st, err := f.Stat()
		if err != nil {
			return err
		}
		f.filled = max(f.filled, st.Size())
	}
	f.reserved = max(f.reserved, offset+length)
	return f.File.Preallocate(offset, length)
}

// Write implements vfs.File. Before writing past the filled space it
// writes zeros up to Step bytes past the write's end, within the
// reservation. A failed zero write is ignored: the data write that follows
// reports the same condition, and a partly filled file is still a valid
// log.
func (f *file) Write(p []byte) (int, error) {
	if end := f.off + int64(len(p)); end > f.filled && f.filled < f.reserved {
		f.fill(min(f.reserved, end+Step))
	}
	n, err := f.File.Write(p)
	f.off += int64(n)
	f.filled = max(f.filled, f.off)
	return n, err
}

// fill writes zeros over [f.filled, to).
func (f *file) fill(to int64) {
	for f.filled < to {
		n, err := f.File.WriteAt(zeros[:min(int64(Step), to-f.filled)], f.filled)
		f.filled += int64(n)
		if err != nil {
			return
		}
	}
}
