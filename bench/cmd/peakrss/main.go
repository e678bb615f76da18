// Command peakrss runs a command and reports the peak resident set size of
// that command alone.
//
//	peakrss command [argument …]
//
// The command's standard streams are passed through; when it ends, peakrss
// writes "peakrss: N KiB" as the last line of standard error and exits with
// the command's exit code.
//
// Why a launcher: on Linux a child started by a large process (a benchmark
// that has just built a million-record archive) through vfork inherits, in
// its ru_maxrss, the high-water mark of the parent's memory at exec time, so
// the parent's own peak would be reported as the child's. Started from this
// small launcher, the child's ru_maxrss is its own peak (or the launcher's
// few MiB, whichever is larger).
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: peakrss command [argument …]")
		os.Exit(2)
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		fmt.Fprintln(os.Stderr, "peakrss:", err)
		os.Exit(2)
	}
	kib, ok := maxRSSKiB(cmd.ProcessState)
	if !ok {
		fmt.Fprintln(os.Stderr, "peakrss: the peak resident set size is not available on this platform")
		os.Exit(2)
	}
	fmt.Fprintf(os.Stderr, "peakrss: %d KiB\n", kib)
	os.Exit(cmd.ProcessState.ExitCode())
}
