package primary

import (
	"bytes"

	"github.com/cockroachdb/pebble/v2"
)

// nextTries is how many steps seekGE takes with Next before it seeks: the
// events of consecutive one-event commits are two keys apart (each commit's
// history record lies between), the members of a run or a completion group
// one intent apart, or a few when the index holds intents that are not due.
const nextTries = 4

// seekGE positions it at the first key at or after k, as it.SeekGE(k) does,
// and reports whether that key is k. When the iterator is already at a key
// before k it first steps forward with Next, at most nextTries times: the
// first key at or after k that Next reaches is the one SeekGE would find.
// The loads and compare-and-set checks of a delivery ask for ascending keys
// a key or two apart, and a step costs a fraction of a seek, which
// repositions every level of the LSM (about 2 µs under a four-database
// delivery, docs/benchmarks/2026-12-01-multidb.md). Any other order just seeks.
func seekGE(it *pebble.Iterator, k []byte) bool {
	if it.Valid() && bytes.Compare(it.Key(), k) < 0 {
		for range nextTries {
			if !it.Next() {
				break
			}
			if c := bytes.Compare(it.Key(), k); c >= 0 {
				return c == 0
			}
		}
		if it.Error() != nil {
			return false
		}
	}
	return it.SeekGE(k) && bytes.Equal(it.Key(), k)
}
