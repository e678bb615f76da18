package gctune

import (
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, headroom uint64
		want           int
	}{
		{0, 64 * mib, MaxPercent},
		{1 * mib, 64 * mib, MaxPercent}, // under headroom / 10: at most 11 × live
		{6 * mib, 64 * mib, MaxPercent},
		{7 * mib, 64 * mib, 915}, // 64/7 = 9.14..., rounded up
		{16 * mib, 64 * mib, 400},
		{17 * mib, 64 * mib, 377},
		{32 * mib, 64 * mib, 200},
		{64 * mib, 64 * mib, 100},
		{500 * mib, 64 * mib, 100}, // a large live heap keeps the default
	} {
		if got := Percent(c.live, c.headroom); got != c.want {
			t.Errorf("Percent(%d MiB, %d MiB) = %d, want %d", c.live/mib, c.headroom/mib, got, c.want)
		}
	}
	// From a tenth of the headroom, the heap may grow by the headroom or
	// the live heap, whichever is more: by less than the headroom more
	// than with GOGC=100.
	for live := uint64(64*mib/10) + 1; live <= 128*mib; live += mib / 2 {
		growth := live * uint64(Percent(live, 64*mib)) / 100
		if growth < max(live, 64*mib) || growth-live >= 64*mib+mib/100 {
			t.Errorf("live %d: the heap may grow by %d", live, growth)
		}
	}
	// Under it, by at most MaxPercent of the live heap.
	for live := uint64(1); live < 64*mib/10; live += mib / 4 {
		if p := Percent(live, 64*mib); p != MaxPercent {
			t.Errorf("live %d: GOGC %d, want %d", live, p, MaxPercent)
		}
	}
}

func gogc() int64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// TestStartTunesAfterEachCollection runs the tuner in this test process:
// after a collection that leaves a small live heap, GOGC is high;
// once a collection leaves a live heap larger than Headroom, it is back at
// 100; then small again.
func TestStartTunesAfterEachCollection(t *testing.T) {
	t.Setenv("GOGC", "") // restored after the test; unset for Start below
	unsetenv(t, "GOGC")
	if s := Start(); !strings.Contains(s, "by the live heap") {
		t.Fatalf("Start() = %q, want the tuning", s)
	}
	if again := Start(); again != setting {
		t.Fatalf("second Start() = %q, want %q", again, setting)
	}
	waitFor := func(what string, ok func(gogc int64) bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			runtime.GC()
			if ok(gogc()) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("GOGC = %d after collections, want %s", gogc(), what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	small := func(p int64) bool { return p == MaxPercent } // a test's live heap is under 6.4 MiB
	waitFor("MaxPercent", small)
	func() {
		big := make([]byte, Headroom+(8<<20))
		for i := range big {
			big[i] = byte(i) // live and touched
		}
		waitFor("100", func(p int64) bool { return p == MinPercent })
		runtime.KeepAlive(big)
	}()
	waitFor("MaxPercent", small)
}

// TestStartLeavesGOGC runs Start in a child process with GOGC set: it
// reports the operator's setting and never changes it.
func TestStartLeavesGOGC(t *testing.T) {
	if os.Getenv("RIFFDB_GCTUNE_CHILD") != "" {
		if s := Start(); s != "left to GOGC=150" {
			t.Fatalf("Start() = %q, want it left to GOGC=150", s)
		}
		for range 5 {
			runtime.GC()
			time.Sleep(10 * time.Millisecond)
		}
		if got := gogc(); got != 150 {
			t.Fatalf("GOGC = %d after collections, want the operator's 150", got)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestStartLeavesGOGC$", "-test.v")
	cmd.Env = append(os.Environ(), "RIFFDB_GCTUNE_CHILD=1", "GOGC=150")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestStartLeavesGOGC") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func unsetenv(t *testing.T, key string) {
	t.Helper()
	if err := os.Unsetenv(key); err != nil {
		t.Fatal(err)
	}
}
