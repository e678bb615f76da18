// Package lsmshape summarises what a Pebble store's compactions did, for
// the stores' compaction tests and benchmarks: how many bytes compactions
// wrote for the bytes flushed, and how many tables lie where.
package lsmshape

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// Shape is a store's compaction work and table files.
type Shape struct {
	// Compacted is the bytes compactions wrote into every level, Flushed
	// the bytes flushes wrote into L0.
	Compacted, Flushed uint64
	// Tables counts the table files of every level, L0 those of L0.
	Tables, L0 int64
	// Debt is Pebble's estimated compaction debt, in bytes.
	Debt uint64
}

// Of reads the shape from a store's metrics.
func Of(m *pebble.Metrics) Shape {
	s := Shape{Flushed: m.Levels[0].TableBytesFlushed, L0: m.Levels[0].TablesCount, Debt: m.Compact.EstimatedDebt}
	for _, lm := range m.Levels {
		s.Compacted += lm.TableBytesCompacted
		s.Tables += lm.TablesCount
	}
	return s
}

// Amplification is the bytes compacted over the bytes flushed.
func (s Shape) Amplification() float64 {
	if s.Flushed == 0 {
		return 0
	}
	return float64(s.Compacted) / float64(s.Flushed)
}

// Report reports the shape as a benchmark's metrics: compacted/flushed,
// tables, tables_L0 and debt_MiB.
func (s Shape) Report(b *testing.B) {
	b.ReportMetric(s.Amplification(), "compacted/flushed")
	b.ReportMetric(float64(s.Tables), "tables")
	b.ReportMetric(float64(s.L0), "tables_L0")
	b.ReportMetric(float64(s.Debt)/(1<<20), "debt_MiB")
}
