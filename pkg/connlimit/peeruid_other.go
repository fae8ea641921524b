//go:build !linux

package connlimit

import "net"

// loopbackUID is Linux only; elsewhere loopback peers share one key.
func loopbackUID(local, remote *net.TCPAddr) (uint32, bool) { return 0, false }
