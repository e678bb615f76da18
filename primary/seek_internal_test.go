package primary

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestSeekGEFindsWhatSeekGEFinds compares seekGE, on one iterator reused
// across a sequence of keys, with a fresh iterator's SeekGE for each key:
// ascending keys one, two or many apart (where it steps with Next), equal
// and descending ones (where it seeks), keys absent and beyond the last,
// over a store whose keys lie in the memtable, in tables, and deleted.
func TestSeekGEFindsWhatSeekGEFinds(t *testing.T) {
	t.Parallel()
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	key := func(i int) []byte { return binary.BigEndian.AppendUint32([]byte{'c'}, uint32(i)) }
	rng := rand.New(rand.NewPCG(1, 2))
	// Every third key of 0..3000 in a table, some deleted again, the rest
	// of the even ones in the memtable: present keys come in runs with
	// gaps of one and more.
	for i := 0; i < 3000; i += 3 {
		if err := db.Set(key(i), []byte{byte(i)}, pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3000; i += 2 {
		if err := db.Set(key(i), []byte{byte(i)}, pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		if rng.IntN(5) == 0 {
			if err := db.Delete(key(i+1), pebble.NoSync); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := func(k []byte) (bool, []byte) {
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{'c'}, UpperBound: []byte{'d'}})
		if err != nil {
			t.Fatal(err)
		}
		defer it.Close()
		if !it.SeekGE(k) {
			return false, nil
		}
		return bytes.Equal(it.Key(), k), bytes.Clone(it.Key())
	}
	for round := range 200 {
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{'c'}, UpperBound: []byte{'d'}})
		if err != nil {
			t.Fatal(err)
		}
		i := rng.IntN(3100)
		for range 40 {
			switch r := rng.IntN(10); {
			case r < 5:
				i += 1 + rng.IntN(3) // ascending, close
			case r < 7:
				i += rng.IntN(50) // ascending, far, or the same key
			case r < 9:
				i -= rng.IntN(20) // descending
			default:
				i = 3000 + rng.IntN(200) // beyond the last key
			}
			i = max(i, 0)
			k := key(i)
			found, at := want(k)
			got := seekGE(it, k)
			var gotAt []byte
			if it.Valid() {
				gotAt = it.Key()
			}
			if got != found || !bytes.Equal(gotAt, at) {
				t.Fatalf("round %d, key %d: seekGE = %v at %x; SeekGE finds %v at %x", round, i, got, gotAt, found, at)
			}
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
