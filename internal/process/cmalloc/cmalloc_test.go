//go:build linux && cgo

package cmalloc

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// TestOneArenaWhateverThreadAllocates allocates from eight OS threads at
// once, which under glibc's default gives each of them an arena of its own
// (up to eight per core), and requires that they all share one.
func TestOneArenaWhateverThreadAllocates(t *testing.T) {
	if Setting() != OneArena {
		t.Skipf("the C allocator was not limited here: %s", Setting())
	}
	n := arenasAfterEightThreads()
	if n != 1 {
		t.Fatalf("glibc reports %d malloc arenas after eight threads allocated at once, want 1", n)
	}
}

// arenasAfterEightThreads has eight OS threads allocate at once and returns
// the number of arenas glibc reports while they hold their threads.
func arenasAfterEightThreads() int {
	var ready, done sync.WaitGroup
	release := make(chan struct{})
	for range 8 {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			runtime.LockOSThread() // hold a thread of its own until released
			defer runtime.UnlockOSThread()
			hold(1, 64<<10).dropAll() // an allocation made on this thread
			ready.Done()
			<-release
		}()
	}
	ready.Wait()
	n := arenas()
	close(release)
	done.Wait()
	return n
}

// TestOperatorChoiceIsKept: with MALLOC_ARENA_MAX or a glibc.malloc.arena_max
// tunable in the environment, the process keeps the operator's setting
// (more than one arena here) and says so. Each case runs this test binary
// again with the variable set, since the setting is made when it loads.
func TestOperatorChoiceIsKept(t *testing.T) {
	if os.Getenv("RIFF_CMALLOC_REPORT") != "" {
		fmt.Printf("setting=%q arenas=%d\n", Setting(), arenasAfterEightThreads())
		return
	}
	if Setting() != OneArena {
		t.Skipf("the C allocator was not limited here: %s", Setting())
	}
	for _, c := range []struct{ env, setting string }{
		{"MALLOC_ARENA_MAX=4", "malloc arenas left to MALLOC_ARENA_MAX"},
		{"GLIBC_TUNABLES=glibc.malloc.arena_max=4", "malloc arenas left to GLIBC_TUNABLES"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestOperatorChoiceIsKept$", "-test.count=1")
		cmd.Env = append(os.Environ(), "RIFF_CMALLOC_REPORT=1", c.env)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.env, err, out)
		}
		var setting string
		var n int
		line := string(out)
		if i := strings.Index(line, "setting="); i >= 0 {
			line = line[i:]
		}
		if _, err := fmt.Sscanf(line, "setting=%q arenas=%d", &setting, &n); err != nil {
			t.Fatalf("%s: no report in %q: %v", c.env, out, err)
		}
		if setting != c.setting || n < 2 {
			t.Errorf("%s: setting %q with %d arenas, want %q with more than one", c.env, setting, n, c.setting)
		}
	}
}

// TestReadStatsFollowsAllocations: 64 MiB of 16 KiB blocks (below glibc's
// mmap threshold) count as in use in the heap; freeing every other one
// moves 32 MiB to free, which stays in the heap between live blocks; one
// 64 MiB allocation (above the largest threshold) counts as mapped.
func TestReadStatsFollowsAllocations(t *testing.T) {
	if Setting() != OneArena {
		t.Skipf("the C allocator was not limited here: %s", Setting())
	}
	read := func() Stats {
		t.Helper()
		s, ok := ReadStats()
		if !ok {
			t.Fatal("ReadStats: glibc's malloc statistics cannot be read")
		}
		return s
	}
	const n, size, mib = 4096, 16 << 10, 1 << 20
	s0 := read()
	b := hold(n, size)
	defer b.dropAll()
	s1 := read()
	if d := s1.HeapInUse - s0.HeapInUse; d < 64*mib {
		t.Fatalf("64 MiB of 16 KiB blocks raised HeapInUse by %d KiB (%+v → %+v)", d>>10, s0, s1)
	}
	b.drop(0, 2)
	s2 := read()
	if d := s1.HeapInUse - s2.HeapInUse; d < 32*mib {
		t.Errorf("freeing every other block lowered HeapInUse by %d KiB, want 32 MiB (%+v → %+v)", d>>10, s1, s2)
	}
	if d := s2.HeapFree - s1.HeapFree; d < 32*mib {
		t.Errorf("freeing every other block raised HeapFree by %d KiB, want 32 MiB (%+v → %+v)", d>>10, s1, s2)
	}
	big := hold(1, 64*mib)
	defer big.dropAll()
	s3 := read()
	if d := s3.Mapped - s2.Mapped; d < 64*mib {
		t.Errorf("one 64 MiB allocation raised Mapped by %d KiB (%+v → %+v)", d>>10, s2, s3)
	}
	if s3.HeapInUse-s2.HeapInUse > mib {
		t.Errorf("one 64 MiB allocation raised HeapInUse by %d KiB: it should be mapped on its own", (s3.HeapInUse-s2.HeapInUse)>>10)
	}
}
