package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/riffdb/riffdb/capability"
	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
)

const apiContract = `
[commands.put]
input = { k = "string", n = "int?" }
emits = ["put"]
`

// lockedBuffer collects the server's log lines for a test to read while
// the server writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type apiServer struct {
	*Server
	root  string
	token string
	logs  *lockedBuffer
}

// newAPIServer starts a server with one database "a" (contract apiContract)
// and a token that may execute commands and read statistics.
func newAPIServer(t *testing.T) *apiServer {
	t.Helper()
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(root, 0o700))
	must(os.WriteFile(filepath.Join(root, "contract.toml"), []byte(apiContract), 0o600))
	doc := fmt.Sprintf(`
[server]
listen = "127.0.0.1:0"
metrics_listen = "127.0.0.1:0"
credential_path = %q
[databases.a]
path = %q
contract = %q
`, root+"/creds", root+"/a", root+"/contract.toml")
	cfg, err := config.Parse([]byte(doc), nil, config.Overrides{})
	must(err)
	creds, err := capability.Open(cfg.Server.CredentialPath)
	must(err)
	token, _, err := creds.Create("api", []capability.Permission{capability.ExecuteCommands, capability.ReadStatistics}, "")
	must(err)
	logs := &lockedBuffer{}
	s, err := New(context.Background(), Options{Config: cfg, LogOutput: logs})
	must(err)
	must(s.Start(context.Background()))
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return &apiServer{Server: s, root: root, token: token, logs: logs}
}

type apiError struct {
	status        int
	code, message string
	body          string
}

// post sends body to command put of database a with the given headers
// (Content-Type application/json unless headers set it, "" to omit it).
func (a *apiServer) post(t *testing.T, body []byte, headers map[string]string) apiError {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+a.APIAddr()+"/v1/databases/a/commands/put", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	out := apiError{status: resp.StatusCode, body: string(b)}
	if resp.StatusCode != http.StatusOK {
		var eb struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if err := json.Unmarshal(b, &eb); err != nil {
			t.Fatalf("error body %q: %v", b, err)
		}
		out.code, out.message = eb.Error.Code, eb.Error.Message
	}
	return out
}

func (a *apiServer) committed() uint64 { return a.dbs[0].db.LastCommitSequence() }

const (
	msgMalformed = `the body must be one JSON object {"input":{…},"idempotency_key":"…"} with no other fields`
	msgFields    = `the body may hold only the fields "input" and "idempotency_key", spelled exactly so, and no other fields`
)

// TestCommandEnvelopeIsStrict: the envelope has exactly the keys "input"
// and "idempotency_key", in that case, each once, and nothing after the
// object; every string in it is exact (issue 12, findings 2 and 4).
func TestCommandEnvelopeIsStrict(t *testing.T) {
	a := newAPIServer(t)
	const secret = "hunter2-secret"
	cases := []struct {
		name, body, code, message string
	}{
		{"duplicate input", `{"input":{"k":"A"},"input":{"k":"B"}}`, "malformed_request", `the body holds "input" more than once`},
		{"duplicate key", `{"input":{"k":"A"},"idempotency_key":"x","idempotency_key":"y"}`, "malformed_request", `the body holds "idempotency_key" more than once`},
		{"upper-case input", `{"INPUT":{"k":"A"}}`, "malformed_request", msgFields},
		{"mixed-case key", `{"input":{"k":"A"},"Idempotency_Key":"` + secret + `"}`, "malformed_request", msgFields},
		{"unknown field", `{"input":{"k":"A"},"destination":"` + secret + `"}`, "malformed_request", msgFields},
		{"second value", `{"input":{"k":"A"}} {"input":{"k":"B"}}`, "malformed_request", msgMalformed},
		{"trailing garbage", `{"input":{"k":"A"}}x`, "malformed_request", msgMalformed},
		{"not an object", `[{"input":{"k":"A"}}]`, "malformed_request", msgMalformed},
		{"broken", `{"input":`, "malformed_request", msgMalformed},
		{"empty", ``, "malformed_request", msgMalformed},
		{"missing input", `{"idempotency_key":"x"}`, "malformed_request", `the body needs an "input" object`},
		{"null input", `{"input":null}`, "malformed_request", `the body needs an "input" object`},
		{"key not a string", `{"input":{"k":"A"},"idempotency_key":7}`, "malformed_request", `idempotency_key must be a string`},
		{"key too long", `{"input":{"k":"A"},"idempotency_key":"` + strings.Repeat("k", 257) + `"}`, "malformed_request", "idempotency_key exceeds 256 bytes"},
		{"key invalid utf8", "{\"input\":{\"k\":\"A\"},\"idempotency_key\":\"" + secret + "\xff\"}", "malformed_request", "idempotency_key is not valid UTF-8"},
		{"key lone high surrogate", `{"input":{"k":"A"},"idempotency_key":"` + secret + `\ud800"}`, "malformed_request", "idempotency_key holds an unpaired UTF-16 surrogate escape"},
		{"key lone low surrogate", `{"input":{"k":"A"},"idempotency_key":"\udfff"}`, "malformed_request", "idempotency_key holds an unpaired UTF-16 surrogate escape"},
		{"key wrong order", `{"input":{"k":"A"},"idempotency_key":"\ude00\ud83d"}`, "malformed_request", "idempotency_key holds an unpaired UTF-16 surrogate escape"},
		{"envelope key invalid utf8", "{\"input\":{\"k\":\"A\"},\"\xff\":1}", "malformed_request", "the body has a field name that is not valid UTF-8"},
		{"input string invalid utf8", "{\"input\":{\"k\":\"" + secret + "\xfe\"}}", "invalid_input", `input field "k" is not valid UTF-8`},
		{"input lone high surrogate", `{"input":{"k":"` + secret + `\ud800"}}`, "invalid_input", `input field "k" holds an unpaired UTF-16 surrogate escape`},
		{"input lone low surrogate", `{"input":{"k":"\udfff"}}`, "invalid_input", `input field "k" holds an unpaired UTF-16 surrogate escape`},
		{"input duplicate field", `{"input":{"k":"A","k":"B"}}`, "invalid_input", `input field "k" appears more than once`},
		{"input key invalid utf8", "{\"input\":{\"k\":\"A\",\"\xff\":1}}", "invalid_input", `input has a key that is not valid UTF-8`},
		{"input nested duplicate", `{"input":{"k":{"x":1,"x":2}}}`, "invalid_input", `input field "k" holds an object with a repeated key`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := a.post(t, []byte(tc.body), nil)
			if got.status != http.StatusBadRequest || got.code != tc.code || got.message != tc.message {
				t.Fatalf("got %d %s %q, want 400 %s %q", got.status, got.code, got.message, tc.code, tc.message)
			}
			if strings.Contains(got.body, "hunter") || strings.Contains(got.body, "\ufffd") {
				t.Fatalf("the error echoes the request: %s", got.body)
			}
		})
	}
	if n := a.committed(); n != 0 {
		t.Fatalf("refused requests committed %d commands", n)
	}
	// The strict envelope still takes what clients send: any member order,
	// whitespace, escapes, surrogate pairs and null for an absent key.
	for i, body := range []string{
		`{"input":{"k":"A"},"idempotency_key":"k1"}`,
		` { "idempotency_key" : "k2" , "input" : { "k" : "\ud83d\ude00" } } `,
		`{"input":{"k":"A","n":null},"idempotency_key":null}`,
		`{"input":{"k":"\u00e9"},"idempotency_key":"\ufffd"}`,
	} {
		if got := a.post(t, []byte(body), nil); got.status != http.StatusOK {
			t.Fatalf("body %d refused: %d %s", i, got.status, got.body)
		}
	}
}

// TestDistinctKeysAndInputsStayDistinct reproduces issue 12 finding 2:
// keys "\xff" and "\xfe" collided (the second came back replayed), and
// inputs "\ud800", "\udfff" and "\ufffd" were one input.
func TestDistinctKeysAndInputsStayDistinct(t *testing.T) {
	a := newAPIServer(t)
	for _, key := range []string{"\xff", "\xfe"} {
		body := "{\"input\":{\"k\":\"A\"},\"idempotency_key\":\"" + key + "\"}"
		if got := a.post(t, []byte(body), nil); got.status != http.StatusBadRequest {
			t.Fatalf("key %q: %d %s, want 400", key, got.status, got.body)
		}
	}
	for _, s := range []string{`\ud800`, `\udfff`} {
		body := `{"input":{"k":"` + s + `"},"idempotency_key":"same"}`
		if got := a.post(t, []byte(body), nil); got.status != http.StatusBadRequest {
			t.Fatalf("input %s: %d %s, want 400", s, got.status, got.body)
		}
	}
	if got := a.post(t, []byte(`{"input":{"k":"\ufffd"},"idempotency_key":"same"}`), nil); got.status != http.StatusOK || !strings.Contains(got.body, `"replayed":false`) {
		t.Fatalf("U+FFFD input: %d %s", got.status, got.body)
	}
	if n := a.committed(); n != 1 {
		t.Fatalf("%d commits, want 1", n)
	}
}

// TestCommandContentType: the media type is parsed, not prefix-matched
// (issue 12: APPLICATION/JSON was refused, application/jsonx accepted).
func TestCommandContentType(t *testing.T) {
	a := newAPIServer(t)
	for i, ct := range []string{
		"application/json", "APPLICATION/JSON", "Application/Json; charset=UTF-8",
		"application/json;charset=utf-8", `application/json; charset="utf-8"`, "application/json; foo=bar",
		"", // absent: accepted (clients that send no type; curl -d sends a form type, refused below)
	} {
		body := fmt.Sprintf(`{"input":{"k":"A"},"idempotency_key":"ct-%d"}`, i)
		if got := a.post(t, []byte(body), map[string]string{"Content-Type": ct}); got.status != http.StatusOK {
			t.Errorf("Content-Type %q: %d %s", ct, got.status, got.body)
		}
	}
	for _, tc := range []struct{ ct, message string }{
		{"application/jsonx", "the request body must be application/json"},
		{"text/plain", "the request body must be application/json"},
		{"application/x-www-form-urlencoded", "the request body must be application/json"},
		{"json", "the request body must be application/json"},
		{"application/json; charset", "the request body must be application/json"},
		{"application/json; charset=latin1", "the request body must be application/json in UTF-8 (charset=utf-8 or no charset)"},
		{"application/json; charset=utf-16", "the request body must be application/json in UTF-8 (charset=utf-8 or no charset)"},
	} {
		got := a.post(t, []byte(`{"input":{"k":"A"}}`), map[string]string{"Content-Type": tc.ct})
		if got.status != http.StatusUnsupportedMediaType || got.code != "unsupported_media_type" || got.message != tc.message {
			t.Errorf("Content-Type %q: %d %s %q, want 415 %q", tc.ct, got.status, got.code, got.message, tc.message)
		}
	}
}

// TestInvalidInputMessage: an invalid_input error is one sentence naming
// the field, with no internal prefixes (issue 12: "primary: contract:
// invalid input: contract: invalid input: …").
func TestInvalidInputMessage(t *testing.T) {
	a := newAPIServer(t)
	for _, tc := range []struct{ body, message string }{
		{`{"input":{"k":7}}`, `input field "k" must be a string`},
		{`{"input":{"n":1}}`, `required input field "k" is missing`},
		{`{"input":{"k":null}}`, `required input field "k" is null`},
		{`{"input":{"k":"A","n":1.5}}`, `input field "n" must be an integer (no fraction or exponent)`},
		{`{"input":{"k":"A","zz":1}}`, `input has an unknown field "zz"`},
		{`{"input":[]}`, `input must be a JSON object`},
		// An unknown field's name is quoted and cut to 64 bytes.
		{`{"input":{"k":"A","` + strings.Repeat("z", 200) + `":1}}`, `input has an unknown field "` + strings.Repeat("z", 64) + `"…`},
	} {
		got := a.post(t, []byte(tc.body), nil)
		if got.status != http.StatusBadRequest || got.code != "invalid_input" || got.message != tc.message {
			t.Errorf("%s: %d %s %q, want 400 invalid_input %q", tc.body, got.status, got.code, got.message, tc.message)
		}
	}
}

// TestEmptyIdempotencyKeyIsRefused: an idempotency_key that is present but
// empty is a client bug (it would silently mean "no key" and commit twice),
// so it is refused with 400 invalid_idempotency_key and commits nothing; an
// absent or null key still means "no key".
func TestEmptyIdempotencyKeyIsRefused(t *testing.T) {
	a := newAPIServer(t)
	for _, body := range []string{
		`{"input":{"k":"A"},"idempotency_key":""}`,
		`{"idempotency_key":"","input":{"k":"A"}}`,
	} {
		got := a.post(t, []byte(body), nil)
		if got.status != http.StatusBadRequest || got.code != "invalid_idempotency_key" ||
			got.message != "idempotency_key is empty: omit it (or send null) for no key, or send a key of 1 to 256 bytes" {
			t.Fatalf("%s: got %d %s %q, want 400 invalid_idempotency_key", body, got.status, got.code, got.message)
		}
	}
	if n := a.committed(); n != 0 {
		t.Fatalf("refused requests committed %d commands", n)
	}
	for _, body := range []string{`{"input":{"k":"A"}}`, `{"input":{"k":"A"},"idempotency_key":null}`} {
		if got := a.post(t, []byte(body), nil); got.status != http.StatusOK || !strings.Contains(got.body, `"replayed":false`) {
			t.Fatalf("%s: %d %s", body, got.status, got.body)
		}
	}
	if n := a.committed(); n != 2 {
		t.Fatalf("%d commits without a key, want 2", n)
	}
}

// breakCredentialStore makes the server's credential store unreadable by
// removing its store file. A chmod 000 would stop reads only for a non-root
// user (tests may run as root), and a store file replaced by a directory is
// refused only on the store's periodic refresh, after which the cached
// capabilities are served until the next one; a missing file fails every
// Authenticate, whoever runs the test.
func breakCredentialStore(t *testing.T, dir string) {
	t.Helper()
	if err := os.Remove(filepath.Join(dir, "capabilities.json")); err != nil {
		t.Fatal(err)
	}
}

// TestUnreadableCredentialStoreIsLogged: a credential store that cannot be
// read answers 500 without details and logs one path-free error line, not
// one per request (issue 12: it answered 500 with no log line at all).
func TestUnreadableCredentialStoreIsLogged(t *testing.T) {
	a := newAPIServer(t)
	breakCredentialStore(t, filepath.Join(a.root, "creds"))
	// The store notices at its next refresh (at most every 250 ms).
	testutil.WaitFor(t, 10*time.Second, 10*time.Millisecond, "the store failure to reach the API", func() bool {
		return a.post(t, []byte(`{"input":{"k":"A"}}`), nil).status == http.StatusInternalServerError
	})
	// Both the command handler and the stats handler fail, many times.
	for range 5 {
		got := a.post(t, []byte(`{"input":{"k":"A"}}`), nil)
		if got.status != http.StatusInternalServerError || got.message != "the credential store cannot be read" {
			t.Fatalf("command: %d %s", got.status, got.body)
		}
		req, _ := http.NewRequest(http.MethodGet, "http://"+a.APIAddr()+"/v1/stats", nil)
		req.Header.Set("Authorization", "Bearer "+a.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusInternalServerError || strings.Contains(string(b), "capabilities") {
			t.Fatalf("stats: %d %s", resp.StatusCode, b)
		}
	}
	var lines []string
	for _, l := range strings.Split(a.logs.String(), "\n") {
		if strings.Contains(l, "credential store") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("%d log lines about the credential store, want 1:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	if !strings.Contains(lines[0], `"level":"error"`) || strings.Contains(lines[0], a.root) || strings.Contains(lines[0], "capabilities.json") {
		t.Fatalf("log line %s: want error level and no path", lines[0])
	}
}
