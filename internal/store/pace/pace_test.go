package pace

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
)

// fakeClock advances only when the Limiter sleeps.
type fakeClock struct {
	t     time.Time
	slept time.Duration
}

func (c *fakeClock) limiter(rate int64) *Limiter {
	l := New(rate)
	l.now = func() time.Time { return c.t }
	l.sleep = func(_ context.Context, d time.Duration) error { c.t = c.t.Add(d); c.slept += d; return nil }
	return l
}

func TestWaitKeepsTheAverageAtTheRate(t *testing.T) {
	c := &fakeClock{t: time.Unix(1000, 0)}
	l := c.limiter(10 << 20) // 10 MiB/s
	for i := 0; i < 50; i++ {
		if err := l.Wait(context.Background(), 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	if want := 5 * time.Second; c.slept != want {
		t.Fatalf("50 MiB at 10 MiB/s slept %v, want %v", c.slept, want)
	}
	// Time that passed doing other work counts: no sleep is owed.
	c.t = c.t.Add(2 * time.Second)
	if err := l.Wait(context.Background(), 10<<20); err != nil {
		t.Fatal(err)
	}
	if want := 5 * time.Second; c.slept != want {
		t.Fatalf("slept %v after 2 s of other work for 1 s worth of bytes, want still %v", c.slept, want)
	}
}

func TestUnpacedAndCanceled(t *testing.T) {
	var nilL *Limiter
	if err := nilL.Wait(context.Background(), 1<<30); err != nil {
		t.Fatal(err)
	}
	c := &fakeClock{t: time.Unix(1000, 0)}
	if err := c.limiter(0).Wait(context.Background(), 1<<30); err != nil || c.slept != 0 {
		t.Fatalf("rate 0: err %v, slept %v", err, c.slept)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("stop")
	cancel(stop)
	if err := New(1).Wait(ctx, 1); !errors.Is(err, stop) {
		t.Fatalf("canceled Wait = %v, want the cause", err)
	}
	// A real sleep ends with the context.
	ctx, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel2()
	if err := New(1).Wait(ctx, 1<<20); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past the deadline = %v", err)
	}
}

func TestCopyPacesEveryChunk(t *testing.T) {
	c := &fakeClock{t: time.Unix(1000, 0)}
	src := bytes.Repeat([]byte("x"), 3*ChunkSize+5)
	var dst bytes.Buffer
	n, err := Copy(context.Background(), &dst, bytes.NewReader(src), c.limiter(ChunkSize))
	if err != nil || n != int64(len(src)) || !bytes.Equal(dst.Bytes(), src) {
		t.Fatalf("Copy = %d, %v; copied equal: %v", n, err, bytes.Equal(dst.Bytes(), src))
	}
	if c.slept < 3*time.Second || c.slept > 3*time.Second+time.Millisecond {
		t.Fatalf("3 chunks and 5 bytes at one chunk per second slept %v, want about 3 s", c.slept)
	}
}
