// Command nullserver is the do-nothing baseline of riffdb's command path
// (BenchmarkFastCommands): a Go net/http server on a loopback port that
// checks the bearer token of every request, reads its body and answers a
// fixed command response, with no storage, no JSON parsing and no
// telemetry. With -store DIR it also does the storage work a command needs,
// on bare Pebble in DIR (floor, store.go): the floor that riffdb's command
// path is held against, and GET /pending answers how many committed events
// are not delivered yet. It prints {"msg":"nullserver ready","listen":"ADDR"} on
// stderr once it listens, and stops on SIGTERM.
//
//	nullserver -token-file riffdb-dev/dev-token [-store DIR]
package main

import (
	"context"
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
	"time"
)

func main() {
	tokenFile := flag.String("token-file", "", "file holding the bearer token every request must carry")
	storeDir := flag.String("store", "", "directory of bare Pebble stores: commit and deliver each request's body there (the storage floor)")
	flag.Parse()
	tok, err := os.ReadFile(*tokenFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nullserver: -token-file:", err)
		os.Exit(2)
	}
	want := []byte("Bearer " + strings.TrimSpace(string(tok)))
	var seq atomic.Uint64
	var fl *floor
	if *storeDir != "" {
		if fl, err = openFloor(*storeDir); err != nil {
			fmt.Fprintln(os.Stderr, "nullserver: -store:", err)
			os.Exit(1)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/databases/{alias}/commands/{command}", func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			http.Error(w, `{"error":"unauthenticated"}`, http.StatusUnauthorized)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, `{"error":"bad_request"}`, http.StatusBadRequest)
			return
		}
		var s uint64
		if fl != nil {
			if s, err = fl.commit(body); err != nil {
				http.Error(w, `{"error":"unavailable"}`, http.StatusServiceUnavailable)
				return
			}
		} else {
			s = seq.Add(1)
		}
		n := strconv.FormatUint(s, 10)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"database":`+strconv.Quote(r.PathValue("alias"))+`,"command":`+strconv.Quote(r.PathValue("command"))+
			`,"commit_sequence":`+n+`,"events":["`+n+`.0"],"replayed":false}`+"\n")
	})
	if fl != nil {
		mux.HandleFunc("GET /pending", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, strconv.FormatUint(fl.pending(), 10))
		})
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "nullserver:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "{\"msg\":\"nullserver ready\",\"listen\":%q}\n", ln.Addr().String())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	srv := &http.Server{Handler: mux}
	// Shutdown lets the requests in flight finish (their commits on the
	// floor's stores among them) before the stores close.
	shut := make(chan struct{})
	go func() {
		<-sigs
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			_ = srv.Close()
		}
		close(shut)
	}()
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "nullserver:", err)
		os.Exit(1)
	}
	<-shut
	if fl != nil {
		if err := fl.close(); err != nil {
			fmt.Fprintln(os.Stderr, "nullserver: -store:", err)
			os.Exit(1)
		}
	}
}
