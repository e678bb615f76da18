// Package bench holds riffdb's cross-package benchmarks: delivery throughput
// and commit→archived latency through the real server (server.New, the real
// archive adapter and outbox worker), /v1/stats latency at 100 and 1,000,000
// pending intents, and tracing overhead. Every benchmark runs its baseline
// in the same process on the same disk (a raw append+fdatasync loop in a
// b.TempDir), because these machines are noisy: results are read as ratios
// against that baseline, never as absolute limits, and no unit test asserts
// wall-clock time.
//
// Baselines are interleaved with what they measure: Interleave runs
// workloads in rotating order, round after round, so that the slow drifts of
// a noisy disk fall on all of them alike (the benchmarks of primary and
// archive use it too). The benchmarks live in *_test.go files; the report
// tool in cmd/benchreport reads `go test -bench` output and prints the
// measured values and ratios against the project's targets; cmd/peakrss
// measures a child process's peak RSS. scripts/bench.sh runs everything.
//
// Heavy setup (preloading thousands or a million intents) happens inside
// the benchmark functions, which use b.Loop so that the setup runs once per
// measurement and never in the default `go test ./...` run.
package bench
