//go:build linux

package localproc

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// procStat reads a process's start time, process group and state from
// /proc/<pid>/stat; ok is false when no such process exists.
func procStat(pid int) (info procInfo, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, false
	}
	// The command name (field 2) may hold spaces and parentheses: the
	// fields we want follow its last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procInfo{}, false
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state), f[2] field 5 (pgrp), f[19] field 22 (starttime).
	if len(f) < 20 {
		return procInfo{}, false
	}
	pgid, _ := strconv.Atoi(f[2])
	return procInfo{start: f[19], pgid: pgid, zombie: f[0] == "Z" || f[0] == "X"}, true
}

// findLeaderByEnv finds a process group leader whose environment holds
// entry ("NAME=value"). It finds a harness whose server died before writing
// its pid file.
func findLeaderByEnv(entry string) (int, bool) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, false
	}
	needle := []byte("\x00" + entry + "\x00")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(append([]byte{0}, b...), needle) {
			continue
		}
		if info, ok := procStat(pid); ok && info.pgid == pid && !info.zombie {
			return pid, true
		}
	}
	return 0, false
}
