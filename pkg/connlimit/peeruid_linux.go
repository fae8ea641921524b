package connlimit

import (
	"encoding/binary"
	"net"
	"sync"
	"syscall"
)

// On loopback every client shares one address: kitchn, the harnesses and
// the agents. The kernel knows which user owns the other end of a loopback
// connection; its sock_diag interface answers that for one exact 4-tuple,
// without privilege, so peers are told apart by uid there (an agent
// confined to a uid of its own then floods only its own share).

const (
	sockDiagByFamily = 20 // SOCK_DIAG_BY_FAMILY
	nlmsgHdrLen      = 16
	diagReqLen       = 56 // struct inet_diag_req_v2
	diagMsgUIDOffset = 64 // idiag_uid in struct inet_diag_msg
)

var diag struct {
	mu  sync.Mutex
	fd  int
	err error
	seq uint32
}

// loopbackUID returns the uid owning the client end of the loopback TCP
// connection from remote to local, as the server sees it.
func loopbackUID(local, remote *net.TCPAddr) (uint32, bool) {
	family, size := syscall.AF_INET, 4
	if remote.IP.To4() == nil {
		family, size = syscall.AF_INET6, 16
	}
	req := make([]byte, nlmsgHdrLen+diagReqLen)
	binary.LittleEndian.PutUint32(req[0:], uint32(len(req)))
	binary.LittleEndian.PutUint16(req[4:], sockDiagByFamily)
	binary.LittleEndian.PutUint16(req[6:], syscall.NLM_F_REQUEST)
	b := req[nlmsgHdrLen:]
	b[0], b[1] = byte(family), syscall.IPPROTO_TCP
	binary.LittleEndian.PutUint32(b[4:], 0xffffffff) // every state
	id := b[8:]
	// The client's socket: its source is our remote, its destination us.
	binary.BigEndian.PutUint16(id[0:], uint16(remote.Port))
	binary.BigEndian.PutUint16(id[2:], uint16(local.Port))
	copy(id[4:4+size], ipBytes(remote.IP, size))
	copy(id[20:20+size], ipBytes(local.IP, size))
	binary.LittleEndian.PutUint32(id[40:], 0xffffffff) // INET_DIAG_NOCOOKIE
	binary.LittleEndian.PutUint32(id[44:], 0xffffffff)

	diag.mu.Lock()
	defer diag.mu.Unlock()
	if diag.fd == 0 && diag.err == nil {
		diag.fd, diag.err = syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, syscall.NETLINK_INET_DIAG)
		if diag.err == nil {
			diag.err = syscall.Bind(diag.fd, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK})
		}
	}
	if diag.err != nil {
		return 0, false
	}
	diag.seq++
	binary.LittleEndian.PutUint32(req[8:], diag.seq)
	if err := syscall.Sendto(diag.fd, req, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return 0, false
	}
	buf := make([]byte, 1024)
	for {
		n, _, err := syscall.Recvfrom(diag.fd, buf, 0)
		if err != nil || n < nlmsgHdrLen {
			return 0, false
		}
		// A stale answer (an earlier lookup's, say) is skipped by its seq.
		if binary.LittleEndian.Uint32(buf[8:]) != diag.seq {
			continue
		}
		if binary.LittleEndian.Uint16(buf[4:]) != sockDiagByFamily || n < nlmsgHdrLen+diagMsgUIDOffset+4 {
			return 0, false // NLMSG_ERROR: no such socket (it closed already)
		}
		return binary.LittleEndian.Uint32(buf[nlmsgHdrLen+diagMsgUIDOffset:]), true
	}
}

func ipBytes(ip net.IP, size int) []byte {
	if size == 4 {
		return ip.To4()
	}
	return ip.To16()
}
