// Package pace bounds the rate of background I/O, so that work such as an
// online backup's copying and checksumming leaves the disk and the CPU to
// the commits that share them.
//
// A Limiter counts the bytes it was told about since its first use and
// sleeps whenever they run ahead of the rate: over any stretch of work it
// keeps the average at or below the rate, without a background goroutine.
package pace

import (
	"context"
	"io"
	"time"
)

// ChunkSize is how many bytes Copy moves between two waits.
const ChunkSize = 1 << 20

// Limiter paces work to BytesPerSecond. A nil *Limiter, or one with a rate
// of 0, does not pace. A Limiter is not safe for concurrent use.
type Limiter struct {
	rate  float64
	start time.Time
	done  float64
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
}

// New returns a Limiter for bytesPerSecond (0: unpaced).
func New(bytesPerSecond int64) *Limiter {
	return &Limiter{rate: float64(bytesPerSecond), now: time.Now, sleep: sleepCtx}
}

// Wait records n more bytes of work and sleeps until the work done so far
// is no longer ahead of the rate. It returns context.Cause(ctx) if ctx ends
// first.
func (l *Limiter) Wait(ctx context.Context, n int) error {
	if err := context.Cause(ctx); err != nil {
		return err
	}
	if l == nil || l.rate <= 0 {
		return nil
	}
	now := l.now()
	if l.start.IsZero() {
		l.start = now
	}
	l.done += float64(n)
	due := l.start.Add(time.Duration(l.done / l.rate * float64(time.Second)))
	if d := due.Sub(now); d > 0 {
		return l.sleep(ctx, d)
	}
	return nil
}

// Copy copies src to dst like io.Copy, in chunks of ChunkSize, waiting on l
// after each chunk.
func Copy(ctx context.Context, dst io.Writer, src io.Reader, l *Limiter) (int64, error) {
	buf := make([]byte, ChunkSize)
	var written int64
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			m, werr := dst.Write(buf[:n])
			written += int64(m)
			if werr != nil {
				return written, werr
			}
			if m != n {
				return written, io.ErrShortWrite
			}
			if err := l.Wait(ctx, n); err != nil {
				return written, err
			}
		}
		if rerr == io.EOF {
			return written, nil
		}
		if rerr != nil {
			return written, rerr
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
