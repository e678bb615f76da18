package statsapi_test

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/riffdb/riffdb/capability"
	"github.com/riffdb/riffdb/statsapi"
)

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}
func (c *fakeClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// brokenAuth is a credential store that cannot be read.
type brokenAuth struct{ err error }

func (b brokenAuth) Authenticate(string) (capability.Capability, error) {
	return capability.Capability{}, b.err
}

const storeFailure = statsapi.StoreFailureMessage

// TestFailureLogRateLimits: the first failure is logged at once, further
// ones within the interval are counted, and the next line says how many
// it stands for. Lines never carry a path.
func TestFailureLogRateLimits(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	fl := statsapi.NewFailureLog(zap.New(core), clk, time.Minute)
	err := fmt.Errorf("capability: reading the store file: %w", &fs.PathError{Op: "open", Path: "/srv/secret-dir/capabilities.json", Err: fs.ErrPermission})
	for range 100 {
		fl.Error(err)
	}
	clk.advance(59 * time.Second)
	fl.Error(err)
	if n := logs.FilterMessage(storeFailure).Len(); n != 1 {
		t.Fatalf("%d lines within the interval, want 1", n)
	}
	clk.advance(time.Second)
	fl.Error(err)
	lines := logs.FilterMessage(storeFailure).All()
	if len(lines) != 2 {
		t.Fatalf("%d lines after the interval, want 2", len(lines))
	}
	for i, l := range lines {
		if l.Level != zapcore.ErrorLevel {
			t.Errorf("line %d at level %v", i, l.Level)
		}
		for _, f := range l.Context {
			if strings.Contains(f.String, "/srv") || strings.Contains(f.String, "capabilities.json") {
				t.Errorf("line %d names a path: %+v", i, f)
			}
		}
	}
	if got := lines[0].ContextMap()["suppressed"]; got != int64(0) {
		t.Errorf("first line suppressed = %v, want 0", got)
	}
	if got := lines[1].ContextMap()["suppressed"]; got != int64(100) {
		t.Errorf("second line suppressed = %v, want 100", got)
	}
	if got := lines[1].ContextMap()["error"]; got != "capability: reading the store file: open: permission denied" {
		t.Errorf("error field %q", got)
	}
	// Recovery is logged once, and another kind of failure is logged at
	// once.
	fl.Clear()
	fl.Clear()
	if n := logs.FilterMessage(storeFailure + " cleared").Len(); n != 1 {
		t.Fatalf("%d recovery lines, want 1", n)
	}
	fl.Error(errors.New("capability: credential store is corrupt: damaged"))
	if n := logs.FilterMessage(storeFailure).Len(); n != 3 {
		t.Fatalf("%d failure lines after recovery, want 3", n)
	}
}

// TestStoreFailureIs500AndLogged: the stats and health endpoints answer a
// credential store failure with a bare 500 and log it once.
func TestStoreFailureIs500AndLogged(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	h := statsapi.NewHandler(statsapi.Options{
		Auth:   brokenAuth{err: errors.New("capability: credential store is corrupt: the store file's integrity tag does not match")},
		Stats:  func() statsapi.Stats { return statsapi.Stats{} },
		Health: func() statsapi.HealthReport { return statsapi.HealthReport{} },
		Logger: zap.New(core),
	})
	for _, path := range []string{"/v1/stats", "/v1/health", "/v1/stats"} {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Authorization", "Bearer riffdb_whatever")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusInternalServerError || strings.Contains(rec.Body.String(), "integrity") {
			t.Fatalf("%s: %d %s", path, rec.Code, rec.Body)
		}
	}
	if n := logs.FilterMessageSnippet(storeFailure).Len(); n != 1 {
		t.Fatalf("%d log lines, want 1", n)
	}
}
