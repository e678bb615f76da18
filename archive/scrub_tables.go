package archive

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/sstable/block"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// The scrub's read of the disk.
//
// Pebble verifies a block's checksum when it loads the block from the file,
// not when it serves it from the block cache. A scrub that reads its pages
// through the store's iterators reads whatever the cache holds: with a
// cache that holds the archive (a small archive, or a large cache), every
// pass after the first validates copies in memory and never sees damage on
// the disk. So each scrub pass also reads every table of the store's
// version when the pass began straight from its file, with a table reader
// of its own that has no block cache, and verifies the checksum of every
// block (data, index, filter, properties, metaindex, range deletions and
// keys, value blocks) against the bytes on the disk. A table that a
// compaction removed during the pass is skipped: the compaction read it
// from the disk (compactions bypass the cache and verify every block), and
// its output is a newer table that the next pass reads.
//
// The reads are paced with the record pages: each Step verifies at most
// ScrubPageBytes of blocks (whole blocks, at least one), and a pass is
// complete once both its records and its tables are done.

// tableScrub is the disk read of one scrub pass.
type tableScrub struct {
	s      *Store
	tables []tableFile // not yet started, in order
	cur    *tableBlocks
	done   bool
}

// tableFile is one table file of the version a pass began with.
type tableFile struct {
	num  uint64
	size uint64
}

// tableBlocks is the table being verified: its file, open with a reader of
// no block cache, and its blocks not yet verified, by offset.
type tableBlocks struct {
	num    uint64
	f      vfs.File
	r      *sstable.Reader
	sum    block.ChecksumType
	blocks []block.Handle
	buf    []byte
}

// newTableScrub lists the table files of the store's current version.
func (s *Store) newTableScrub(ctx context.Context) (*tableScrub, error) {
	var tables []tableFile
	err := guarded(ctx, s.st, s.scrubTimeout, "listing the tables", false, func() error {
		var err error
		tables, err = s.liveTables()
		return err
	})
	if err != nil {
		return nil, err
	}
	return &tableScrub{s: s, tables: tables, done: len(tables) == 0}, nil
}

// liveTables returns the distinct table files of the current version.
func (s *Store) liveTables() ([]tableFile, error) {
	levels, err := s.db.SSTables()
	if err != nil {
		return nil, err
	}
	var out []tableFile
	for _, level := range levels {
		for _, t := range level {
			num := uint64(t.BackingSSTNum)
			if !slices.ContainsFunc(out, func(f tableFile) bool { return f.num == num }) {
				out = append(out, tableFile{num: num, size: t.Size})
			}
		}
	}
	return out, nil
}

// step verifies at most budget bytes of blocks (whole blocks, at least one
// when any remains).
func (ts *tableScrub) step(ctx context.Context, budget int64) error {
	if ts.done {
		return nil
	}
	s := ts.s
	var readErr error
	err := guarded(ctx, s.st, s.scrubTimeout, "verifying table blocks", false, func() error {
		readErr = ts.verify(budget)
		return nil
	})
	if err != nil {
		// The read timed out or ended without returning: the store is
		// unusable, and the goroutine that may still read owns the table.
		ts.cur, ts.tables, ts.done = nil, nil, true
		return err
	}
	if readErr != nil {
		ts.close()
		err = mapError("verifying table blocks", readErr)
		if errors.Is(err, ErrCorrupt) {
			s.corrupt(err)
		}
		return err
	}
	return nil
}

// verify is step's work, on the guarded goroutine.
func (ts *tableScrub) verify(budget int64) error {
	var read int64
	for read < budget || read == 0 {
		if ts.cur == nil {
			if len(ts.tables) == 0 {
				ts.done = true
				return nil
			}
			t := ts.tables[0]
			ts.tables = ts.tables[1:]
			cur, err := ts.s.openTable(t.num)
			if err != nil {
				return err
			}
			if cur == nil {
				continue // compacted away since the pass began
			}
			ts.cur = cur
		}
		c := ts.cur
		if len(c.blocks) == 0 {
			ts.closeTable()
			continue
		}
		bh := c.blocks[0]
		c.blocks = c.blocks[1:]
		n := int(bh.Length) + block.TrailerLen
		if cap(c.buf) < n {
			c.buf = make([]byte, n)
		}
		b := c.buf[:n]
		if _, err := c.f.ReadAt(b, int64(bh.Offset)); err != nil {
			return fmt.Errorf("reading table %06d: %w", c.num, err)
		}
		if err := block.ValidateChecksum(c.sum, b, bh); err != nil {
			return fmt.Errorf("table %06d on disk: %w", c.num, err)
		}
		read += int64(n)
	}
	return nil
}

// openTable opens table num from the disk with a reader of no block cache
// (its footer, metaindex and properties are verified as it opens, its
// index blocks as its layout is read) and lists its other blocks. It
// returns nil, nil when the table no longer exists and is no longer part
// of the current version.
func (s *Store) openTable(num uint64) (*tableBlocks, error) {
	name := s.inst.PathJoin(s.storeDir, fmt.Sprintf("%06d.sst", num))
	f, err := s.inst.Open(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			live, lerr := s.liveTables()
			if lerr != nil {
				return nil, lerr
			}
			if !slices.ContainsFunc(live, func(t tableFile) bool { return t.num == num }) {
				return nil, nil
			}
		}
		return nil, err
	}
	readable, err := sstable.NewSimpleReadable(f)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	r, err := sstable.NewReader(context.Background(), readable, tableReaderOptions())
	if err != nil {
		_ = readable.Close()
		return nil, fmt.Errorf("table %06d on disk: %w", num, err)
	}
	l, err := r.Layout()
	if err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("table %06d on disk: %w", num, err)
	}
	return &tableBlocks{num: num, f: f, r: r, sum: r.BlockReader().ChecksumType(), blocks: layoutBlocks(l)}, nil
}

// layoutBlocks returns every checksummed block of a table, by offset.
func layoutBlocks(l *sstable.Layout) []block.Handle {
	var hs []block.Handle
	for _, d := range l.Data {
		hs = append(hs, d.Handle)
	}
	hs = append(hs, l.Index...)
	for _, f := range l.Filter {
		hs = append(hs, f.Handle)
	}
	hs = append(hs, l.ValueBlock...)
	hs = append(hs, l.TopIndex, l.RangeDel, l.RangeKey, l.ValueIndex, l.Properties, l.MetaIndex, l.BlobReferenceIndex)
	hs = slices.DeleteFunc(hs, func(h block.Handle) bool { return h.Length == 0 })
	slices.SortFunc(hs, func(a, b block.Handle) int { return cmp.Compare(a.Offset, b.Offset) })
	return slices.CompactFunc(hs, func(a, b block.Handle) bool { return a.Offset == b.Offset })
}

// tableReaderOptions are the reader options of the archive's tables:
// Pebble's defaults (the archive sets no comparer, merger or key schema of
// its own) and no block cache.
func tableReaderOptions() sstable.ReaderOptions {
	o := &pebble.Options{}
	o.EnsureDefaults()
	return o.MakeReaderOptions()
}

func (ts *tableScrub) closeTable() {
	if ts.cur != nil {
		_ = ts.cur.r.Close() // closes the file
		ts.cur = nil
	}
}

// close releases the table being verified and ends the disk read.
func (ts *tableScrub) close() {
	ts.closeTable()
	ts.tables = nil
}
