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

// TestKeyRangeHoldsExactlyItsKeys: the bounds keyRange gives an iterator
// hold every key it was given, in any order, duplicates included, and no
// key of the same length below the least or above the greatest; the keys
// themselves are left as they were, and the upper bound goes into their
// array's spare capacity.
func TestKeyRangeHoldsExactlyItsKeys(t *testing.T) {
	t.Parallel()
	const l = intentKeyLen
	rng := rand.New(rand.NewPCG(3, 4))
	key := func(i uint64) []byte {
		return binary.BigEndian.AppendUint64(append([]byte{nsIntent}, make([]byte, l-9)...), i)
	}
	for round := range 500 {
		n := 1 + rng.IntN(20)
		keys := make([]byte, 0, n*l+l+1)
		var least, greatest uint64 = 1<<64 - 1, 0
		for range n {
			i := rng.Uint64N(1000) + 1
			if round%3 == 0 {
				i = rng.Uint64N(1<<63) | 1 // far apart
			}
			least, greatest = min(least, i), max(greatest, i)
			keys = append(keys, key(i)...)
		}
		given := bytes.Clone(keys)
		lo, hi := keyRange(keys, l)
		if !bytes.Equal(keys, given) {
			t.Fatalf("round %d: keyRange changed its keys", round)
		}
		if &hi[0] != &keys[:len(keys)+1][len(keys)] {
			t.Fatalf("round %d: the upper bound was not put in the keys' spare capacity", round)
		}
		if !bytes.Equal(lo, key(least)) {
			t.Fatalf("round %d: lower bound %x, want the least key %x", round, lo, key(least))
		}
		for i := 0; i < len(keys); i += l {
			if k := keys[i : i+l]; bytes.Compare(k, lo) < 0 || bytes.Compare(k, hi) >= 0 {
				t.Fatalf("round %d: key %x outside [%x, %x)", round, k, lo, hi)
			}
		}
		if bytes.Compare(key(least-1), lo) >= 0 {
			t.Fatalf("round %d: the key before the least is inside the bounds", round)
		}
		if bytes.Compare(key(greatest+1), hi) < 0 {
			t.Fatalf("round %d: the key after the greatest is inside the bounds", round)
		}
	}
}
