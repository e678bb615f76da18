// Package server wires one riffdb process together: configuration →
// telemetry → credential store → per database (contract, primary store,
// archive destination, outbox worker) → HTTP listeners, and the reverse on
// shutdown.
//
// Shutdown order is explicit: stop accepting HTTP requests and let in-flight
// commands finish (each is one durable commit), stop the outbox workers, close
// the archives, close the primary stores, then flush telemetry. A primary
// store that can no longer promise durability (a WAL write failed) stops the
// server; an archive failure never does.
package server
