package loadtest_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/riffdb/riffdb/loadtest"
)

// idemServer is a fake command endpoint with idempotency keys: the first
// request with a key commits (sequence numbers in arrival order), a repeat
// is answered as a replay of that commit. lie, when set, chooses how the
// repeat of request seq is answered instead ("fresh": as a new commit,
// "other": a replay naming another commit, "500": an error).
type idemServer struct {
	*httptest.Server
	mu      sync.Mutex
	commits map[string]uint64
	sends   map[string]int
	last    uint64
	lie     func(seq int64) string
}

func newIdemServer(t *testing.T, lie func(int64) string) *idemServer {
	t.Helper()
	s := &idemServer{commits: map[string]uint64{}, sends: map[string]int{}, lie: lie}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			IdempotencyKey string `json:"idempotency_key"`
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &body); err != nil || body.IdempotencyKey == "" {
			t.Errorf("body %q: %v", b, err)
		}
		seq, _ := strconv.ParseInt(body.IdempotencyKey[strings.LastIndexByte(body.IdempotencyKey, '-')+1:], 10, 64)
		s.mu.Lock()
		s.sends[body.IdempotencyKey]++
		commit, seen := s.commits[body.IdempotencyKey]
		if !seen {
			s.last++
			commit = s.last
			s.commits[body.IdempotencyKey] = commit
		}
		s.mu.Unlock()
		replayed := seen
		if seen && s.lie != nil {
			switch s.lie(seq) {
			case "fresh":
				replayed = false
			case "other":
				commit += 1000
			case "500":
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
		}
		fmt.Fprintf(w, `{"commit_sequence":%d,"events":["%d.0"],"replayed":%t}`, commit, commit, replayed)
	}))
	t.Cleanup(s.Close)
	return s
}

// TestRetriesAreReplays checks RetryRatio: exactly the chosen fraction of
// requests is sent twice with the same idempotency key, the replays are not
// counted as requests, and a server that answers the repeat correctly
// leaves no retry error.
func TestRetriesAreReplays(t *testing.T) {
	s := newIdemServer(t, nil)
	rep, err := loadtest.Run(t.Context(), loadtest.Config{Address: s.URL, Token: "tok", Requests: 200, Concurrency: 5,
		RetryRatio: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests != 200 || rep.Succeeded != 200 || rep.Replayed != 0 {
		t.Fatalf("report %+v", rep)
	}
	if rep.Retries != 50 || len(rep.RetryErrors) != 0 {
		t.Fatalf("retries %d (errors %v), want 50 without errors", rep.Retries, rep.RetryErrors)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	twice := 0
	for key, n := range s.sends {
		switch n {
		case 1:
		case 2:
			twice++
			if seq, _ := strconv.Atoi(key[strings.LastIndexByte(key, '-')+1:]); seq%4 != 3 {
				t.Errorf("request %d retried; with ratio 0.25 only every fourth (3, 7, …) is", seq)
			}
		default:
			t.Errorf("key %s sent %d times", key, n)
		}
	}
	if len(s.sends) != 200 || twice != 50 {
		t.Fatalf("%d keys, %d sent twice; want 200 and 50", len(s.sends), twice)
	}
}

// TestRetryErrorsClassified checks that a retry answered as a fresh commit,
// as a replay of another commit, or with an error is reported in
// RetryErrors under its own key.
func TestRetryErrorsClassified(t *testing.T) {
	lies := map[int64]string{1: "fresh", 3: "other", 5: "500"}
	s := newIdemServer(t, func(seq int64) string { return lies[seq] })
	rep, err := loadtest.Run(t.Context(), loadtest.Config{Address: s.URL, Token: "tok", Requests: 8, Concurrency: 2,
		RetryRatio: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{loadtest.RetryNotReplayed: 1, loadtest.RetryOtherCommit: 1, "500": 1}
	if rep.Retries != 8 || len(rep.RetryErrors) != len(want) {
		t.Fatalf("retries %d, errors %v; want 8 and %v", rep.Retries, rep.RetryErrors, want)
	}
	for k, v := range want {
		if rep.RetryErrors[k] != v {
			t.Fatalf("retry errors %v, want %v", rep.RetryErrors, want)
		}
	}
	if rep.Errors != 0 || !strings.Contains(rep.String(), "retries not replayed:") {
		t.Fatalf("errors %d; text %q", rep.Errors, rep.String())
	}
}

// TestRetryRatioChecked refuses a retry ratio outside [0, 1].
func TestRetryRatioChecked(t *testing.T) {
	for _, r := range []float64{-0.1, 1.5} {
		_, err := loadtest.Run(t.Context(), loadtest.Config{Address: "127.0.0.1:1", Token: "tok", RetryRatio: r})
		if err == nil || !strings.Contains(err.Error(), "retry ratio") {
			t.Errorf("ratio %v: %v", r, err)
		}
	}
}
