// Command nullserver is the do-nothing baseline of riffdb's command path
// (BenchmarkFastCommands): a Go net/http server on a loopback port that
// checks the bearer token of every request, reads its body and answers a
// fixed command response, with no storage, no JSON parsing and no
// telemetry. It prints {"msg":"nullserver ready","listen":"ADDR"} on
// stderr once it listens, and stops on SIGTERM.
//
//	nullserver -token-file riffdb-dev/dev-token
package main

import (
	"crypto/subtle"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

func main() {
	tokenFile := flag.String("token-file", "", "file holding the bearer token every request must carry")
	flag.Parse()
	tok, err := os.ReadFile(*tokenFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nullserver: -token-file:", err)
		os.Exit(2)
	}
	want := []byte("Bearer " + strings.TrimSpace(string(tok)))
	var seq atomic.Uint64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/databases/{alias}/commands/{command}", func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			http.Error(w, `{"error":"unauthenticated"}`, http.StatusUnauthorized)
			return
		}
		if _, err := io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20)); err != nil {
			http.Error(w, `{"error":"bad_request"}`, http.StatusBadRequest)
			return
		}
		n := strconv.FormatUint(seq.Add(1), 10)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"database":`+strconv.Quote(r.PathValue("alias"))+`,"command":`+strconv.Quote(r.PathValue("command"))+
			`,"commit_sequence":`+n+`,"events":["`+n+`.0"],"replayed":false}`+"\n")
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "nullserver:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "{\"msg\":\"nullserver ready\",\"listen\":%q}\n", ln.Addr().String())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	srv := &http.Server{Handler: mux}
	go func() {
		<-sigs
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "nullserver:", err)
		os.Exit(1)
	}
}
