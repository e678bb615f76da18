//go:build linux && riffdb_mutant_recordlock

package dirlock

import "golang.org/x/sys/unix"

// setLockCmd, built with the tag riffdb_mutant_recordlock, is the record
// lock that a close of any descriptor drops: the counter-example of
// SECURITY.md's claim about store locks, which internal/testsupport/securitydoc builds
// to prove that the claim's tests fail without it. Never built otherwise.
const setLockCmd = unix.F_SETLK
