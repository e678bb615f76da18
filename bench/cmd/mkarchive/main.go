// Command mkarchive builds a valid outbox archive of many records quickly,
// for acceptance runs and benchmarks of inspect:
//
//	go run ./bench/cmd/mkarchive -records 1000000 -dir /abs/outbox -database <32 hex> [-payload-bytes 900] [-incarnation 1] [-compact]
//
// The directory is created (0700) when it is missing and must be empty
// otherwise. It runs the archive package's TestMakeArchive, which loads the
// records in unsynced batches of about one memtable and then writes their
// accounting in one synced batch: the result is indistinguishable from an
// archive built by Store.Accept (Open validates it, Inspect verifies it)
// but takes seconds for a million records instead of one fsync each. It
// waits for the compactions the load queued, so that its tables are those
// of records stored one by one (about one per 32 MiB of records). Its
// clean close validates every record and writes the validated-prefix
// checkpoint, as a server's clean shutdown does. -incarnation sets the
// records' history incarnation: an archive for a fresh primary
// (incarnation 1, nothing committed) must hold another incarnation's
// records (0), or the server refuses it as ahead of the primary's history.
// Run it from the module.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

func main() {
	records := flag.Int("records", 1_000_000, "number of records (sequences 1..n, history incarnation 1)")
	dir := flag.String("dir", "", "archive directory (created 0700 when missing, empty otherwise)")
	database := flag.String("database", "", "database identity, 32 lowercase hex characters")
	payload := flag.Int("payload-bytes", 900, "payload bytes per record (900: records of about 1 KiB)")
	incarnation := flag.Uint64("incarnation", 1, "history incarnation of the records")
	compact := flag.Bool("compact", false, "end with a manual compaction of the whole store (fewer, larger tables than delivery makes of compressible records)")
	flag.Parse()
	if *dir == "" || *database == "" || *records < 0 || *payload < 0 {
		flag.Usage()
		os.Exit(2)
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkarchive: -dir:", err)
		os.Exit(2)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		fmt.Fprintln(os.Stderr, "mkarchive: cannot create the parent of -dir")
		os.Exit(1)
	}
	if err := os.Mkdir(abs, 0o700); err != nil && !os.IsExist(err) {
		fmt.Fprintln(os.Stderr, "mkarchive: cannot create -dir")
		os.Exit(1)
	}
	cmd := exec.Command("go", "test", "github.com/riffdb/riffdb/archive", "-run", "^TestMakeArchive$", "-count=1", "-v", "-timeout", "0")
	cmd.Env = append(os.Environ(),
		"RIFFDB_MKARCHIVE_DIR="+abs,
		"RIFFDB_MKARCHIVE_DATABASE="+*database,
		"RIFFDB_MKARCHIVE_RECORDS="+strconv.Itoa(*records),
		"RIFFDB_MKARCHIVE_PAYLOAD_BYTES="+strconv.Itoa(*payload),
		"RIFFDB_MKARCHIVE_INCARNATION="+strconv.FormatUint(*incarnation, 10))
	if *compact {
		cmd.Env = append(cmd.Env, "RIFFDB_MKARCHIVE_COMPACT=1")
	}
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "mkarchive: the archive was not built:", err)
		os.Exit(1)
	}
}
