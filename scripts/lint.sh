#!/usr/bin/env bash
# Lint: gofmt, go vet, staticcheck, a type check for darwin and windows, and
# a check that `go mod tidy` and the generated files leave the tree unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."

unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
go vet ./...
PATH="$(go env GOPATH)/bin:$PATH" staticcheck ./...
# The non-Linux builds (DESIGN: inspect refuses other platforms, so riffdb
# must build there): a type check of every package as it builds for each
# system, a tenth of the CPU of compiling every dependency twice more.
go run ./internal/tools/crosscheck darwin windows

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp go.mod go.sum "$tmp"/
go mod tidy
if ! diff -q go.mod "$tmp/go.mod" >/dev/null || ! diff -q go.sum "$tmp/go.sum" >/dev/null; then
  cp "$tmp/go.mod" "$tmp/go.sum" .
  echo "go mod tidy changes go.mod/go.sum: run it and commit the result"; exit 1
fi
echo "lint: ok"
