#!/usr/bin/env bash
# The opt-in traced end-to-end test with a real tracing backend (issue #14).
# Builds the Jaeger all-in-one binary pinned by the separate tools module
# tools/jaeger (github.com/jaegertracing/jaeger v1.76.0, Apache-2.0; about
# 8 minutes on 2 cores the first time, then cached as bin/jaeger-<version>),
# then runs e2e TestJaegerTracing with it: Jaeger on loopback with in-memory
# storage, the real riffdb server exporting OTLP to it, `riffdb loadtest`
# with OTLP export and --wait-delivered, and the checks through Jaeger's
# query API (the slowest request's trace holds the client span, the HTTP
# server span and riffdb.command; a riffdb.outbox.claim trace links to that
# command and holds its riffdb.archive.txn).
#
# Jaeger's dependencies stay in tools/jaeger/go.mod: the main module gains
# nothing, and the default test command never builds Jaeger.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
version=$($GO -C tools/jaeger list -m -f '{{.Version}}' github.com/jaegertracing/jaeger)
bin="bin/jaeger-$version"
if [ ! -x "$bin" ]; then
	echo "e2e-tracing: building Jaeger $version all-in-one into $bin (about 8 minutes on 2 cores, once)"
	mkdir -p bin
	start=$(date +%s)
	$GO build -C tools/jaeger -o "../../$bin.tmp" github.com/jaegertracing/jaeger/cmd/jaeger
	mv "$bin.tmp" "$bin"
	echo "e2e-tracing: built in $(($(date +%s) - start)) s"
else
	echo "e2e-tracing: using the cached $bin"
fi
RIFFDB_JAEGER_BIN="$PWD/$bin" $GO test ./e2e -run '^TestJaegerTracing$' -count=1 -v -timeout 10m
