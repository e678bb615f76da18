package goexit_test

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/riffdb/riffdb/internal/store/goexit"
)

func TestRunReturned(t *testing.T) {
	t.Parallel()
	want := errors.New("write refused")
	got := goexit.Run(func() error { return want })
	if !got.Returned || !errors.Is(got.Err, want) || got.Panic != nil {
		t.Fatalf("Run = %+v, want returned with %v", got, want)
	}
	if got := goexit.Run(func() error { return nil }); !got.Returned || got.Err != nil {
		t.Fatalf("Run = %+v, want returned with nil", got)
	}
}

func TestRunGoexit(t *testing.T) {
	t.Parallel()
	got := goexit.Run(func() error {
		runtime.Goexit()
		return errors.New("unreachable")
	})
	if got.Returned || got.Err != nil || got.Panic != nil {
		t.Fatalf("Run = %+v, want ended without returning and no panic", got)
	}
}

func TestRunPanic(t *testing.T) {
	t.Parallel()
	got := goexit.Run(func() error { panic("wal rotation failed") })
	if got.Returned || got.Err != nil || got.Panic != "wal rotation failed" || len(got.Stack) == 0 {
		t.Fatalf("Run = %+v, want ended without returning with the panic and its stack", got)
	}
}

func TestRunPanicNil(t *testing.T) {
	t.Parallel()
	got := goexit.Run(func() error { panic(nil) })
	var pe *runtime.PanicNilError
	if got.Returned || !errors.As(asError(got.Panic), &pe) {
		t.Fatalf("Run = %+v, want a reported panic(nil)", got)
	}
}

func asError(v any) error {
	err, _ := v.(error)
	return err
}

// TestGoBuffered: a caller that stops waiting (a timeout) leaves the
// goroutine a place for its one Outcome, so it ends instead of leaking.
func TestGoBuffered(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	done := goexit.Go(func() error { <-release; return nil })
	if cap(done) != 1 {
		t.Fatalf("cap = %d, want 1", cap(done))
	}
	close(release)
	if got := <-done; !got.Returned {
		t.Fatalf("Go = %+v, want returned", got)
	}
}

// goid returns the calling goroutine's id, from its stack's header
// ("goroutine 42 [running]:").
func goid() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	f := strings.Fields(string(buf))
	if len(f) < 2 {
		return ""
	}
	return f[1]
}

// TestRunnerKeepsItsGoroutines: sequential calls run on the Runner's kept
// goroutines, not on one new goroutine each as with Go. (A call can find
// the goroutine of the previous one still on its way back to idle and
// start one more, so the bound allows a few.)
func TestRunnerKeepsItsGoroutines(t *testing.T) {
	t.Parallel()
	const calls = 200
	for _, tc := range []struct {
		name string
		run  func(func() error) <-chan goexit.Outcome
		max  int
	}{
		{"Go", goexit.Go, calls},
		{"Runner", goexit.NewRunner().Go, 10},
	} {
		ids := map[string]bool{}
		for range calls {
			var id string
			if o := <-tc.run(func() error { id = goid(); return nil }); !o.Returned || id == "" {
				t.Fatalf("%s: %+v, id %q", tc.name, o, id)
			}
			ids[id] = true
		}
		if tc.name == "Runner" && len(ids) > tc.max {
			t.Fatalf("Runner: %d calls ran on %d goroutines, want at most %d", calls, len(ids), tc.max)
		}
		if tc.name == "Go" && len(ids) != calls {
			t.Fatalf("Go: %d calls ran on %d goroutines, want one each", calls, len(ids))
		}
	}
}

// TestRunnerOutcomes: a Runner reports Goexit and panics as Go does, and
// a call after them still runs (on a goroutine of its own: the one that
// ran them ended).
func TestRunnerOutcomes(t *testing.T) {
	t.Parallel()
	r := goexit.NewRunner()
	defer r.Close()
	want := errors.New("write refused")
	if got := <-r.Go(func() error { return want }); !got.Returned || !errors.Is(got.Err, want) {
		t.Fatalf("returned: %+v", got)
	}
	if got := <-r.Go(func() error { runtime.Goexit(); return nil }); got.Returned || got.Panic != nil {
		t.Fatalf("Goexit: %+v, want ended without returning", got)
	}
	if got := <-r.Go(func() error { panic("wal rotation failed") }); got.Returned || got.Panic != "wal rotation failed" || len(got.Stack) == 0 {
		t.Fatalf("panic: %+v, want the panic and its stack", got)
	}
	if got := <-r.Go(func() error { return nil }); !got.Returned || got.Err != nil {
		t.Fatalf("after Goexit and panic: %+v, want returned", got)
	}
}

// TestRunnerClose: Close ends the idle goroutines, and calls after it
// still run.
func TestRunnerClose(t *testing.T) {
	// Not parallel: it counts the process's goroutines.
	before := runtime.NumGoroutine()
	r := goexit.NewRunner()
	var busy []<-chan goexit.Outcome
	release := make(chan struct{})
	for range 3 { // three goroutines: each call finds the others busy
		busy = append(busy, r.Go(func() error { <-release; return nil }))
	}
	if n := runtime.NumGoroutine(); n < before+3 {
		t.Fatalf("%d goroutines with 3 calls running, want at least %d", n, before+3)
	}
	close(release)
	for _, d := range busy {
		<-d
	}
	r.Close()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines 5 s after Close, want %d", runtime.NumGoroutine(), before)
		}
		time.Sleep(time.Millisecond)
	}
	if got := <-r.Go(func() error { return nil }); !got.Returned {
		t.Fatalf("after Close: %+v, want returned", got)
	}
}

// TestRunnerGoOnReusesTheChannel: GoOn returns the caller's channel and
// delivers each call's outcome on it, so one channel serves calls made one
// after another, whatever the earlier call's outcome was.
func TestRunnerGoOnReusesTheChannel(t *testing.T) {
	t.Parallel()
	r := goexit.NewRunner()
	defer r.Close()
	done := make(chan goexit.Outcome, 1)
	want := errors.New("write refused")
	calls := []struct {
		fn   func() error
		want func(goexit.Outcome) bool
	}{
		{func() error { return nil }, func(o goexit.Outcome) bool { return o.Returned && o.Err == nil }},
		{func() error { return want }, func(o goexit.Outcome) bool { return o.Returned && errors.Is(o.Err, want) }},
		{func() error { panic("wal rotation failed") }, func(o goexit.Outcome) bool { return !o.Returned && o.Panic == "wal rotation failed" }},
		{func() error { runtime.Goexit(); return nil }, func(o goexit.Outcome) bool { return !o.Returned && o.Panic == nil }},
		{func() error { return nil }, func(o goexit.Outcome) bool { return o.Returned && o.Err == nil }},
	}
	for i, c := range calls {
		got := r.GoOn(c.fn, done)
		if got != (<-chan goexit.Outcome)(done) {
			t.Fatalf("call %d: GoOn returned another channel than the one it was given", i)
		}
		if o := <-got; !c.want(o) {
			t.Fatalf("call %d: outcome %+v", i, o)
		}
		if len(done) != 0 {
			t.Fatalf("call %d: %d more outcomes on the channel, want none", i, len(done))
		}
	}
}
