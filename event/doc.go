// Package event defines the identities and the exact stored form of a committed
// event, shared by the primary (which writes them), the outbox worker (which
// moves them) and the archive (which keeps them).
//
// Every encoding here is part of the durable format of both stores, so it is
// fixed: big-endian integers, explicit lengths, and a SHA-256 event hash that
// lets any holder of the bytes prove they were not altered.
package event
