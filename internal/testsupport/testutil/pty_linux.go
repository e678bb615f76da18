package testutil

import (
	"bytes"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// PTYMark is what a test writes to a pseudo-terminal's slave side to mark
// the end of what it wants to read (ReadUntilMark).
const PTYMark = "--MARK--"

// OpenPTY opens a pseudo-terminal pair, for tests of output that only
// terminals get (progress lines).
func OpenPTY() (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		return nil, nil, err
	}
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		return nil, nil, err
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	return master, slave, nil
}

// ReadUntilMark returns what the master side of a pseudo-terminal reads
// before PTYMark, or everything it read before an error.
func ReadUntilMark(master *os.File) string {
	var got []byte
	buf := make([]byte, 4096)
	for !bytes.HasSuffix(got, []byte(PTYMark)) {
		n, err := master.Read(buf)
		if err != nil {
			return string(got)
		}
		got = append(got, buf[:n]...)
	}
	return string(got[:len(got)-len(PTYMark)])
}
