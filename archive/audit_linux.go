//go:build linux

package archive

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// Watch masks. The store directory's watch reports a change of its entries
// (created, removed, renamed in or out) and of the attributes of itself and
// of its entries (mode, owner, and the link count of an entry linked or
// unlinked inside the store); its own rename and removal end in
// IN_IGNORED. An entry's own watch reports its attribute changes, the link
// count included: a hard link made to it from outside the store changes its
// link count without any event on the store directory's watch. Writes
// (IN_MODIFY) change nothing the audit checks.
const (
	dirWatchMask = unix.IN_ATTRIB | unix.IN_CREATE | unix.IN_DELETE |
		unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF |
		unix.IN_MOVE_SELF | unix.IN_ONLYDIR
	entryWatchMask = unix.IN_ATTRIB | unix.IN_DONT_FOLLOW
	// archiveWatchMask is the archive directory's: an entry created,
	// removed or renamed in or out (the store directory replaced, or
	// anything beside it), its own attributes (mode, owner), and its own
	// rename or removal. Every event of it makes the next audit a full one.
	archiveWatchMask = dirWatchMask
)

// auditWatch makes the custody audit of an open store cost the same
// whatever the number of store files: an inotify watch on the store
// directory and on each of its entries, armed before the first full audit,
// reports every change of custody made since, so an audit that finds no
// event checks only the path, the archive directory and the store directory
// itself (that they are still the watched directory), and lists no entry.
// An event that names an entry (one of the directory's watch with a name,
// or one of an entry's own watch) makes the next audit check that entry
// again, and watch it if its inode is new: a partial audit, whose cost is
// the entries changed (the engine's new and removed files), not the
// store's. Any other event (one of the store directory itself, an unknown
// watch), a queue overflow, a read error or a lost watch makes the next
// audit a full one; a failed audit, partial or full, leaves it dirty, so
// the violation is reported again, by a full audit, until it is repaired.
// Without inotify (or /proc), or once closed, every audit is a full one.
//
// The archive directory that holds the store directory is watched too.
// While neither watch saw anything since the last audit that passed, an
// audit is a quick one: it opens the path (openat2, no symbolic link in
// any component), checks that it is still the watched archive directory
// and drains the events, without listing the archive directory or opening
// the store directory: four system calls instead of about fifteen, on the
// worker's path once per claim run (docs/benchmarks.md, #47). Once that
// check passed, the path itself is watched (armPath), and while nothing on
// it changed an audit is one poll (pathQuiet). A change of
// the archive directory's entries or attributes, or of the store
// directory's own, is an event of one of the two watches, and makes the
// next audit a full one; a path that no longer opens to the watched
// directory (a component renamed, replaced or made a symbolic link) makes
// it the usual audit, which reports what it finds.
type auditWatch struct {
	mu sync.Mutex
	// fd is the inotify descriptor, -1 while not armed; dirWd is the store
	// directory's watch and dev, ino its identity.
	fd       int
	dirWd    int32
	dev, ino uint64
	// archWd is the archive directory's watch (-1 when not watched) and
	// adev, aino its identity.
	archWd     int32
	adev, aino uint64
	// dirty is set by an event that names no entry since the last full
	// audit that passed, or by a failed audit; changed holds the entries
	// named by events since the last audit that passed.
	dirty   bool
	changed map[string]struct{}
	// broken is set when inotify failed (no further arming); closed once
	// the store's lock was released.
	broken, closed bool
	// entries maps the name of each watched entry to its inode and
	// watch, and names maps a watch back to its entry's name: a full
	// audit does not watch again an entry whose inode still has its
	// watch (IN_IGNORED, drained before, drops it from both maps).
	entries map[string]entryWatch
	names   map[int32]string
	// path watches the path to the archive directory (see armPath):
	// pathWds maps the watch of each directory on it, from "/" down to the
	// archive directory's parent, to the name of the next component; mfd
	// is /proc/self/mountinfo, polled for a change of the mount table (-1
	// while the path is not watched); pathDir is the path watched. moved
	// is set by an event that may have changed what the path resolves to
	// since the path was watched; pathBroken once the path cannot be
	// watched (a filesystem on it not trusted, no /proc, the watch limit),
	// until the next arm. retired holds the watches armPath removed whose
	// IN_IGNORED is still queued.
	pathWds    map[int32]string
	mfd        int
	pathDir    string
	moved      bool
	pathBroken bool
	retired    map[int32]struct{}
	pollFds    [2]unix.PollFd
	noWait     unix.Timespec
	// full counts full audits (entries listed and checked), partial the
	// partial ones, quick the quick ones (quiet the quick ones that the
	// path's watch decided without opening the path), and added the entry
	// watches added, for tests.
	full, partial, quick, quiet, added int
	buf                                [4096]byte
}

// entryWatch is the inode of a watched entry and its watch.
type entryWatch struct {
	ino uint64
	wd  int32
}

func newAuditWatch() *auditWatch { return &auditWatch{fd: -1, dirWd: -1, archWd: -1, mfd: -1} }

// audit is Audit for the open store in dir, skipping the store's entries
// when the watch saw no change since the last full audit that passed.
func (w *auditWatch) audit(dir string) (storeExists bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.auditLocked(dir)
}

// prearm arms the watch and runs its first full audit of the store in dir,
// unless the watch is armed, closed or given up already. Open runs it
// while the engine opens the store, so that the first audit of the open
// store (the first claim's) finds every entry watched and checks only what
// the engine's open changed, instead of watching every table file on the
// first delivery's path. A failure leaves the watch dirty: the next audit
// is a full one and reports it.
func (w *auditWatch) prearm(dir string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd >= 0 || w.broken || w.closed {
		return
	}
	_, _ = w.auditLocked(dir)
}

// auditLocked is audit; the caller holds w.mu.
func (w *auditWatch) auditLocked(dir string) (storeExists bool, err error) {
	if w.clean() && w.quickAudit(dir) {
		w.quick++
		return true, nil
	}
	sfd, st, ast, err := openStoreDirAt(dir)
	if sfd == storeBadFd {
		w.dirty = true
		return true, err
	}
	if err != nil || sfd < 0 {
		w.dirty = true
		return false, err
	}
	defer unix.Close(sfd)
	if w.fd >= 0 && (uint64(st.Dev) != w.dev || st.Ino != w.ino ||
		w.archWd >= 0 && (uint64(ast.Dev) != w.adev || ast.Ino != w.aino)) {
		// Another directory now stands at the store's path, or at the
		// archive directory's: the events of the watched ones say
		// nothing about it.
		w.disarm()
	}
	if w.fd < 0 && !w.broken && !w.closed {
		w.arm(sfd, &st, &ast)
	}
	// Drain before the check: an event during the full audit stays queued
	// and makes the next audit a full one.
	w.drain()
	if w.fd >= 0 && !w.dirty {
		if len(w.changed) > 0 {
			w.partial++
			if err := w.checkChanged(sfd); err != nil {
				w.dirty = true
				return true, err
			}
			clear(w.changed)
		}
		return true, nil
	}
	w.full++
	var allocated int64
	var ew *auditWatch
	if w.fd >= 0 {
		ew = w
	}
	if err := checkStoreEntries(sfd, &allocated, ew); err != nil {
		w.dirty = true
		return true, err
	}
	w.dirty = false
	clear(w.changed)
	return true, nil
}

// clean reports whether both watches are armed and nothing happened since
// the last audit that passed, as far as the events read so far say.
func (w *auditWatch) clean() bool {
	return w.fd >= 0 && w.archWd >= 0 && !w.dirty && len(w.changed) == 0
}

// checkChanged is the partial audit: it checks again, and watches when
// its inode is new, each entry of the store directory open at sfd that an
// event named since the last audit that passed. An entry that no longer
// exists is skipped, as the full audit skips it.
func (w *auditWatch) checkChanged(sfd int) error {
	euid := os.Geteuid()
	for name := range w.changed {
		if err := checkStoreEntry(sfd, name, euid, w); err != nil {
			return err
		}
	}
	return nil
}

// arm creates the inotify descriptor and watches the store directory open
// at sfd (through /proc/self/fd, so the watched inode is the audited one),
// and its parent when that is the archive directory the audit checked
// (ast; without that watch every audit stays a full or partial one). The
// next audit is a full one.
func (w *auditWatch) arm(sfd int, st, ast *unix.Stat_t) {
	w.dirty = true
	var fs unix.Statfs_t
	if err := unix.Fstatfs(sfd, &fs); err != nil || !watchable(fs.Type) {
		w.broken = true
		return
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		w.broken = true
		return
	}
	wd, err := unix.InotifyAddWatch(fd, "/proc/self/fd/"+strconv.Itoa(sfd), dirWatchMask)
	if err != nil {
		unix.Close(fd)
		w.broken = true
		return
	}
	w.fd, w.dirWd, w.dev, w.ino = fd, int32(wd), uint64(st.Dev), st.Ino
	w.armArchive(sfd, ast)
}

// armArchive watches the parent of the store directory open at sfd when
// it is the archive directory whose fstat the audit took (ast): a parent
// that is another inode by now (the store directory was moved) is not
// watched, and audits are then never quick ones.
func (w *auditWatch) armArchive(sfd int, ast *unix.Stat_t) {
	if ast.Ino == 0 {
		return
	}
	awd, err := unix.InotifyAddWatch(w.fd, "/proc/self/fd/"+strconv.Itoa(sfd)+"/..", archiveWatchMask)
	if err != nil {
		return
	}
	var pst unix.Stat_t
	if err := unix.Fstatat(sfd, "..", &pst, unix.AT_SYMLINK_NOFOLLOW); err != nil ||
		pst.Dev != ast.Dev || pst.Ino != ast.Ino {
		// The watch may be on another directory: its events make the
		// next audit a full one (consume), and no audit is quick.
		return
	}
	w.archWd, w.adev, w.aino = int32(awd), uint64(ast.Dev), ast.Ino
}

// watchEntry makes sure the entry name of the store directory open at sfd,
// which the full audit found with the inode ino, is watched, and returns
// whether it was watched just now: then the audit checks the entry again,
// since a change made before the watch was added is reported by nothing.
// An entry whose inode already holds its watch is left as it is: the
// watch was added before that inode's earlier check. A missing entry is
// skipped (the audit skips it too); any other failure (the watch limit)
// gives the watch up, and later audits are full ones.
func (w *auditWatch) watchEntry(sfd int, name string, ino uint64) bool {
	if w.fd < 0 {
		return false
	}
	if e, ok := w.entries[name]; ok && e.ino == ino {
		return false
	}
	wd, err := unix.InotifyAddWatch(w.fd, "/proc/self/fd/"+strconv.Itoa(sfd)+"/"+name, entryWatchMask)
	if errors.Is(err, unix.ENOENT) {
		return false
	}
	if err != nil {
		w.disarm()
		w.broken = true
		return false
	}
	w.added++
	if w.entries == nil {
		w.entries, w.names = map[string]entryWatch{}, map[int32]string{}
	}
	// The watched inode is the one the second check sees: a rename over
	// name in between is an event of the directory's watch.
	w.entries[name] = entryWatch{ino: ino, wd: int32(wd)}
	w.names[int32(wd)] = name
	return true
}

// drain reads every queued event without blocking and records them.
func (w *auditWatch) drain() {
	for w.fd >= 0 {
		n, err := unix.Read(w.fd, w.buf[:])
		switch {
		case err == nil && n > 0:
			w.consume(w.buf[:n])
		case errors.Is(err, unix.EAGAIN):
			return
		case errors.Is(err, unix.EINTR):
		default:
			// A read error (or EOF) leaves the events unknown.
			w.disarm()
			return
		}
	}
}

// consume records the events in buf. An event of the store directory's
// watch that names an entry (created, removed, renamed in or out, its
// attributes changed), or an event of an entry's watch, adds that entry to
// the ones the next audit checks again; an entry watch's loss (IN_IGNORED:
// its inode is gone) forgets the watch. Any other event makes the next
// audit a full one: an overflow, an event of the store directory itself
// (its attributes, its own rename or removal), a watch the audit does not
// know, a truncated event. The loss of the store directory's watch
// (IN_IGNORED on it) disarms, so that the next audit arms again.
func (w *auditWatch) consume(buf []byte) {
	for len(buf) > 0 {
		if len(buf) < unix.SizeofInotifyEvent {
			w.dirty = true
			return
		}
		wd := int32(binary.NativeEndian.Uint32(buf[0:]))
		mask := binary.NativeEndian.Uint32(buf[4:])
		nameLen := int(binary.NativeEndian.Uint32(buf[12:]))
		size := unix.SizeofInotifyEvent + nameLen
		if size > len(buf) {
			w.dirty = true
			return
		}
		name := buf[unix.SizeofInotifyEvent:size]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		buf = buf[size:]
		next, onPath := w.pathWds[wd]
		_, retired := w.retired[wd]
		switch entry, known := w.names[wd]; {
		case mask&unix.IN_Q_OVERFLOW != 0:
			w.dirty, w.moved = true, true
		case (wd == w.dirWd || wd == w.archWd) && mask&unix.IN_IGNORED != 0:
			w.disarm()
			return
		case wd == w.archWd:
			// The archive directory's entries or attributes changed.
			w.dirty = true
		case wd == w.dirWd && len(name) > 0 && !strings.ContainsRune(string(name), '/'):
			w.change(string(name))
		case known && mask&unix.IN_IGNORED != 0:
			delete(w.names, wd)
			if w.entries[entry].wd == wd {
				delete(w.entries, entry)
			}
		case known:
			w.change(entry)
		case onPath:
			// A directory on the path: its own event, or one of the
			// entry that is the path's next component, may change
			// what the path resolves to; the others (its other
			// entries) do not.
			if len(name) == 0 || string(name) == next {
				w.moved = true
			}
			if mask&unix.IN_IGNORED != 0 {
				delete(w.pathWds, wd)
				w.moved = true
			}
		case retired:
			if mask&unix.IN_IGNORED != 0 {
				delete(w.retired, wd)
			}
		default:
			w.dirty = true
		}
	}
}

// change adds the entry name to the ones the next audit checks again.
func (w *auditWatch) change(name string) {
	if w.changed == nil {
		w.changed = map[string]struct{}{}
	}
	w.changed[name] = struct{}{}
}

// disarm closes the inotify descriptor; the next audit is a full one.
func (w *auditWatch) disarm() {
	if w.fd >= 0 {
		unix.Close(w.fd)
	}
	w.fd, w.dirWd, w.archWd, w.dirty = -1, -1, -1, true
	w.entries, w.names, w.changed = nil, nil, nil
	w.closeMounts()
	w.pathWds, w.retired, w.pathDir, w.moved, w.pathBroken = nil, nil, "", true, false
}

// close disarms for good; later audits are full ones.
func (w *auditWatch) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.disarm()
	w.closed = true
}

// watchCloser closes the watch with the store's lock: Pebble releases the
// lock when it closes (or when a fenced instance is abandoned).
type watchCloser struct {
	io.Closer
	w *auditWatch
}

// Close implements io.Closer.
func (c watchCloser) Close() error {
	c.w.close()
	return c.Closer.Close()
}

// prearmOpen starts arming the watch of the custody FS fs, when it is one,
// for the store in dir, in the background (prearm), and returns what
// releases the watch when the open fails: an open that fails before the
// engine took the store's lock would leave it armed.
func prearmOpen(fs vfs.FS, dir string) (release func()) {
	c, ok := fs.(custodyFS)
	if !ok || c.watch == nil {
		return func() {}
	}
	go c.watch.prearm(dir)
	return c.watch.close
}

// auditOpen is (*Store).Audit's audit: through the watch of the store's
// custody FS when fs is one, the full Audit otherwise.
func auditOpen(fs vfs.FS, dir string) (storeExists bool, err error) {
	if c, ok := fs.(custodyFS); ok && c.watch != nil {
		return c.watch.audit(dir)
	}
	return Audit(dir)
}

// watchable reports whether inotify sees every change on a filesystem of
// type fsType (statfs f_type): only local filesystems, where every change
// goes through this kernel. A change made by another host on a network
// filesystem (NFS, CIFS, Ceph, 9p) or behind FUSE raises no event here, so
// there every audit stays a full one. Overlayfs, a container's root
// filesystem, is trusted: a change made through the overlay raises its
// event on the overlay's own inode, the watched one; a change made to a
// layer directly raises none, but the kernel does not allow one while the
// overlay is mounted (its documentation: "the behavior of the overlay is
// undefined"), and only someone who can reach the layers on the host can
// make it (its administrator, or a rootless container's own user).
func watchable(fsType int64) bool {
	switch uint32(fsType) {
	case unix.EXT4_SUPER_MAGIC, unix.XFS_SUPER_MAGIC, unix.BTRFS_SUPER_MAGIC, unix.TMPFS_MAGIC,
		unix.F2FS_SUPER_MAGIC, zfsSuperMagic, unix.OVERLAYFS_SUPER_MAGIC:
		return true
	}
	return false
}

// zfsSuperMagic is ZFS on Linux's f_type (golang.org/x/sys/unix has none).
const zfsSuperMagic = 0x2fc12fc1
