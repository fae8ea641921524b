//go:build linux

package gateway

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// listensOn reports whether process pid holds the socket listening on
// 127.0.0.1:port. A port picked free can be taken by anyone before the
// emulator binds it; a connection that succeeds then reaches the other
// listener while the emulator dies on "address already in use". Only the
// socket's owner says whose port it is.
func listensOn(pid, port int) (bool, error) {
	inode, err := listeningInode(port)
	if err != nil || inode == "" {
		return false, err
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return false, err
	}
	want := "socket:[" + inode + "]"
	for _, fd := range fds {
		if target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && target == want {
			return true, nil
		}
	}
	return false, nil
}

// listeningInode is the inode of the socket in LISTEN on 127.0.0.1:port,
// or "" when there is none.
func listeningInode(port int) (string, error) {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return "", err
	}
	defer f.Close()
	local := fmt.Sprintf("0100007F:%04X", port)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		fields := strings.Fields(sc.Text())
		if len(fields) > 9 && fields[1] == local && fields[3] == "0A" {
			return fields[9], nil
		}
	}
	return "", sc.Err()
}
