// Package delivery connects one primary database to its archive: it is the
// seam the outbox worker delivers across.
//
// The worker (package outbox) knows neither the archive nor the server: it
// asks a Source for the undelivered index and a Destination to accept
// records. This package supplies both for a primary and its archive
// (Connect):
//
//   - Destination opens the archive lazily, off the server's start-up path
//     (custody audit and startup validation run inside archive.Open),
//     reopens it after a fault once the fault is repaired, confirms before
//     each completion group that the store directory that took the group's
//     acceptances is still the one at the archive's path, and runs the
//     background checkpoint and scrub of the open store. Every error it
//     returns carries its delivery class and reason (package deliverytype),
//     which is all the worker acts on.
//   - The Source is the primary itself, whose completions also record the
//     archive's durable record count in the primary's delivery mark; with
//     the primary's history, that mark anchors every open of the archive
//     (archive/floor.go), so an archive that lost records, or a primary
//     that lost its tail, stops delivery instead of being trusted.
//
// server only wires: it calls Connect and hands the two to outbox.New.
package delivery
