//go:build linux

package archive

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// pathWatchMask is the watch of each directory on the path to the archive
// directory, from "/" down to the archive directory's parent: its entries
// created, removed, renamed in or out or changed in their attributes (the
// path's next component among them), and its own attributes, rename and
// removal. IN_MASK_CREATE keeps a directory this descriptor watches already
// (a path that passes through one directory twice, by a bind mount) from
// having its watch replaced: the path is then not watched.
const pathWatchMask = dirWatchMask | unix.IN_MASK_CREATE

// mountTable is the file whose poll reports a change of this process's
// mount table (POLLPRI, proc(5)): a mount over a directory on the path, or
// over the archive or store directory, changes what the path resolves to
// and raises no inotify event.
const mountTable = "/proc/self/mountinfo"

// quickAudit is the audit of a clean watch (see auditWatch): it reports
// whether dir still opens, with no symbolic link in its path, to the
// watched archive directory, and the events queued until then leave the
// watch clean. When it reports false, the caller runs the usual audit,
// which reports any violation.
//
// While the path itself is watched and nothing on it changed (pathQuiet),
// the audit opens nothing: one poll says that no event is queued and the
// mount table is the same. Otherwise it opens the path, and once that
// check passes, watches the path again (armPath).
func (w *auditWatch) quickAudit(dir string) bool {
	if w.pathQuiet(dir) {
		if w.clean() {
			w.quiet++
			return true
		}
		return false
	}
	fd, err := openPath(dir)
	if err != nil {
		return false
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	unix.Close(fd)
	if err != nil || uint64(st.Dev) != w.adev || st.Ino != w.aino {
		return false
	}
	// Drain after the check: an event up to here is seen now, and one
	// after it is seen by the next audit.
	w.drain()
	if !w.clean() {
		return false
	}
	w.armPath(dir)
	return true
}

// armPath watches the path to the archive directory dir, which the quick
// audit has just found to open, with no symbolic link, to the watched
// archive directory: each directory from "/" down to the archive
// directory's parent, and the mount table. From then on, while no event
// names a directory on the path or its next component and the mount table
// is unchanged (pathQuiet), the path still resolves to the directories it
// resolved to here, and the quick audit need not open it.
//
// The walk opens each component only after its parent is watched, so a
// change made to the path during the walk is an event the next poll sees;
// a change made before it is found by the walk itself (the archive or the
// store directory is then not the watched one, and the path stays
// unwatched until the next quick audit passes). A directory on a filesystem
// the watch is not trusted on, a mount table that cannot be opened, or a
// watch that cannot be added (the watch limit, a directory watched twice)
// leaves the path unwatched until the next arm: audits then open the path
// as before.
func (w *auditWatch) armPath(dir string) {
	w.unwatchPath()
	if w.pathBroken || w.fd < 0 || w.archWd < 0 {
		return
	}
	clean := filepath.Clean(dir)
	if !filepath.IsAbs(clean) || clean == "/" {
		w.pathBroken = true
		return
	}
	mfd, err := unix.Open(mountTable, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		w.pathBroken = true
		return
	}
	w.mfd, w.moved = mfd, false
	w.pathWds = map[int32]string{}
	if ok, broken := w.walkPath(strings.Split(clean[1:], "/")); !ok {
		w.unwatchPath()
		w.pathBroken = broken
		w.moved = true
		return
	}
	w.pathDir = dir
}

// walkPath watches each directory from "/" down to the parent of the last
// of comps (the archive directory), and checks that the path resolves to the
// watched archive and store directories. broken reports a failure that
// another try would meet too.
func (w *auditWatch) walkPath(comps []string) (ok, broken bool) {
	fd, err := openPathAt(unix.AT_FDCWD, "/")
	if err != nil {
		return false, false
	}
	defer func() { unix.Close(fd) }()
	for _, c := range comps {
		var fs unix.Statfs_t
		if err := unix.Fstatfs(fd, &fs); err != nil {
			return false, false
		}
		if !watchable(fs.Type) {
			return false, true
		}
		wd, err := unix.InotifyAddWatch(w.fd, "/proc/self/fd/"+strconv.Itoa(fd), pathWatchMask)
		if err != nil {
			return false, !errors.Is(err, unix.ENOENT)
		}
		w.pathWds[int32(wd)] = c
		next, err := openPathAt(fd, c)
		if err != nil {
			return false, false
		}
		unix.Close(fd)
		fd = next
	}
	// fd is the archive directory now.
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || uint64(st.Dev) != w.adev || st.Ino != w.aino {
		return false, false
	}
	sfd, err := openPathAt(fd, StoreDirName)
	if err != nil {
		return false, false
	}
	err = unix.Fstat(sfd, &st)
	unix.Close(sfd)
	return err == nil && uint64(st.Dev) == w.dev && st.Ino == w.ino, false
}

// openPathAt opens the directory name in the directory open at at, not
// following a symbolic link, for its identity only (O_PATH; O_DIRECTORY
// refuses anything but a directory, the symbolic link O_NOFOLLOW would
// open included, with ENOTDIR).
func openPathAt(at int, name string) (int, error) {
	for {
		fd, err := unix.Openat(at, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return fd, err
	}
}

// unwatchPath removes the path's watches (their IN_IGNORED, still to be
// read, is then ignored) and closes the mount table.
func (w *auditWatch) unwatchPath() {
	w.closeMounts()
	for wd := range w.pathWds {
		if w.fd >= 0 {
			_, _ = unix.InotifyRmWatch(w.fd, uint32(wd))
			if w.retired == nil {
				w.retired = map[int32]struct{}{}
			}
			w.retired[wd] = struct{}{}
		}
	}
	w.pathWds, w.pathDir = nil, ""
}

// closeMounts closes the mount table, if open.
func (w *auditWatch) closeMounts() {
	if w.mfd >= 0 {
		unix.Close(w.mfd)
		w.mfd = -1
	}
}

// pathQuiet reports whether the path dir is watched (armPath) and nothing
// that could change what it resolves to happened since: one poll, without
// waiting, finds no inotify event queued and the mount table unchanged; when
// events are queued, they are read, and only one that names a directory on
// the path (or its next component) counts. The events of the store's own
// watches are recorded as usual (consume), so the caller checks clean too.
func (w *auditWatch) pathQuiet(dir string) bool {
	if w.fd < 0 || w.mfd < 0 || w.moved || w.pathDir != dir {
		return false
	}
	w.pollFds = [2]unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}, {Fd: int32(w.mfd), Events: unix.POLLPRI}}
	for {
		_, err := unix.Ppoll(w.pollFds[:], &w.noWait, nil)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EINTR) {
			w.moved = true
			return false
		}
	}
	if w.pollFds[1].Revents != 0 {
		// The mount table changed (POLLPRI), or the file failed.
		w.moved = true
	}
	if w.pollFds[0].Revents != 0 {
		w.drain()
	}
	return w.fd >= 0 && !w.moved
}

// PathWatchable reports whether every directory on the absolute path dir is
// on a filesystem the custody audit's watch trusts (see watchable), so that
// the path can be watched instead of opened by each audit (armPath).
func PathWatchable(dir string) bool {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		var fs unix.Statfs_t
		if unix.Statfs(d, &fs) != nil || !watchable(fs.Type) {
			return false
		}
		if d == "/" {
			return true
		}
	}
}

// holds reports whether the store directory at dir is, right now, the
// watched store directory, identified by dev and ino, as far as the watches
// tell without opening anything: the path is quiet (pathQuiet) and no event
// of the archive or store directory's own watch came since the last full
// audit that passed. False means that the watch cannot tell.
func (w *auditWatch) holds(dir string, dev, ino uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd < 0 || w.archWd < 0 || w.dev != dev || w.ino != ino {
		return false
	}
	return w.pathQuiet(dir) && !w.dirty
}

// directoryHeld is (*Store).DirectoryHeld's check, through the watch of the
// store's custody FS.
func directoryHeld(fs vfs.FS, dir string, fi os.FileInfo) bool {
	c, ok := fs.(custodyFS)
	if !ok || c.watch == nil || fi == nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	return c.watch.holds(dir, uint64(st.Dev), st.Ino)
}
