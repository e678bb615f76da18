package primary

import (
	"context"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/riffdb/riffdb/internal/hygiene/pathless"
	"github.com/riffdb/riffdb/internal/store/dirlock"
)

// ArchiveAnchors is what an offline inspection of the database's archive
// checks the archive against: the store's identity and history, and its
// delivery mark, whose ArchiveFloor is the anchor the server's archive Open
// checks (archive/floor.go, delivery/source.go). The archive's own floor
// file is only as new as its last clean shutdown; the delivery mark is
// written with every completion, so it also covers a crash.
type ArchiveAnchors struct {
	StoreInfo
	// Delivered is the delivery mark as durable in the store (zero counts
	// when the store never completed a delivery).
	Delivered DeliveryMark
}

// LockExisting takes the lock of the stopped database in dir, the one Open
// takes, without creating LOCK or changing it (ErrBusy while a server holds
// it; a directory without LOCK is an error wrapping fs.ErrNotExist, since
// a reader must create nothing). It refuses, as Open does, a directory
// with any group or other permission bit (ErrUnprotected). Errors contain
// no paths.
func LockExisting(dir string) (*pebble.Lock, error) {
	if err := checkPrivate(dir); err != nil {
		return nil, err
	}
	return lockExisting(dir)
}

// lockExisting takes the lock of dir through its existing LOCK file,
// which it neither creates nor touches: ErrBusy when it is held.
func lockExisting(dir string) (*pebble.Lock, error) {
	return lockDir(dir, dirlock.ReadOnlyFS(vfs.Default), "lock the store")
}

// ReadArchiveAnchors reads the archive anchors of the stopped database in
// dir without writing anything: the store is opened read-only (Pebble
// replays its WAL in memory) under lock, a lock of dir from LockExisting.
// A directory without a store, or a damaged delivery mark, is ErrCorrupt;
// a store this build cannot read is ErrIncompatible. Errors contain no
// paths.
func ReadArchiveAnchors(ctx context.Context, dir string, lock *pebble.Lock) (ArchiveAnchors, error) {
	if err := context.Cause(ctx); err != nil {
		return ArchiveAnchors{}, err
	}
	var a ArchiveAnchors
	err := withStore(dir, lock, true, func(s *pebble.DB) error {
		info, err := readInfo(s)
		if err != nil {
			return err
		}
		a.StoreInfo = info
		a.Delivered = DeliveryMark{Incarnation: info.Incarnation}
		v, closer, err := s.Get(keyDelivered)
		if errors.Is(err, pebble.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("primary: read delivery mark: %w", pathless.Error(err))
		}
		m, err := decodeDelivered(v)
		_ = closer.Close()
		if err != nil {
			return err
		}
		a.Delivered = m
		return nil
	})
	return a, err
}
