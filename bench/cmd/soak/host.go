package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// The machine around the server: how busy its CPUs were and what the disk
// holding the server's data did. A soak's p99 compares two windows of one
// run; these say whether the server's own cost per event changed between
// them or the machine it shares did (docs/benchmarks.md, "The soak").

// userHZ is the unit of the CPU times in /proc/stat: USER_HZ, fixed at 100
// in the kernel's interface to user space whatever the kernel's own HZ.
const userHZ = 100

// machineCPU reads the first line of /proc/stat and returns, in seconds
// summed over the CPUs, the time they were busy (everything but idle and
// iowait) and the time in all.
func machineCPU() (busy, total float64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nanValue, nanValue, err
	}
	return parseProcStat(string(b))
}

// parseProcStat returns busy and total CPU seconds from a /proc/stat text:
// its "cpu" line holds user, nice, system, idle, iowait, irq, softirq,
// steal, guest and guest_nice in USER_HZ ticks, guest time already counted
// in user and nice (so the first eight are summed).
func parseProcStat(stat string) (busy, total float64, err error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return nanValue, nanValue, fmt.Errorf("soak: unexpected first line of /proc/stat %q", line)
	}
	var idle float64
	for i, s := range f[1:min(len(f), 9)] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return nanValue, nanValue, fmt.Errorf("soak: unexpected first line of /proc/stat %q", line)
		}
		total += float64(v)
		if i == 3 || i == 4 { // idle, iowait
			idle += float64(v)
		}
	}
	return (total - idle) / userHZ, total / userHZ, nil
}

// diskCounters are the cumulative counters of one block device
// (Documentation/block/stat.rst): writes completed, the bytes they wrote
// and the time they took, and flush requests completed and their time.
type diskCounters struct {
	Writes, WrittenBytes, WriteSeconds, Flushes, FlushSeconds float64
}

// readDisk reads a disk's statistics file.
func readDisk(path string) (diskCounters, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return diskCounters{}, err
	}
	return parseDiskStat(string(b))
}

// parseDiskStat parses a block device's stat file: 17 fields since Linux
// 5.5, of which the 5th to 8th are writes, writes merged, sectors written
// (512 bytes each) and milliseconds writing, and the 16th and 17th flushes
// and milliseconds flushing.
func parseDiskStat(stat string) (diskCounters, error) {
	f := strings.Fields(stat)
	if len(f) < 17 {
		return diskCounters{}, errors.New("soak: the disk's stat file has no flush counters (Linux before 5.5)")
	}
	v := make([]float64, 17)
	for i := range v {
		n, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return diskCounters{}, fmt.Errorf("soak: unexpected disk stat field %q", f[i])
		}
		v[i] = float64(n)
	}
	return diskCounters{Writes: v[4], WrittenBytes: v[6] * 512, WriteSeconds: v[7] / 1000, Flushes: v[15], FlushSeconds: v[16] / 1000}, nil
}
