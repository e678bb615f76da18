#!/usr/bin/env bash
# Installs what the test suite needs on a fresh machine, and nothing when it is
# already there: the Debian package "prometheus" (promtool for the metrics and
# alert-rule checks, the prometheus server for the live dashboard and alert
# test), and staticcheck for the lint step.
set -euo pipefail

if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
  echo "install-test-deps: installing the Debian package prometheus (promtool and the server)"
  export DEBIAN_FRONTEND=noninteractive
  sudo_cmd=""
  if [ "$(id -u)" != 0 ]; then sudo_cmd="sudo"; fi
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
promtool --version | head -1
prometheus --version 2>&1 | head -1

if ! command -v staticcheck >/dev/null 2>&1 && [ ! -x "$(go env GOPATH)/bin/staticcheck" ]; then
  echo "install-test-deps: installing staticcheck"
  go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
fi
