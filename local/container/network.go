package container

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
)

// Network is a podman bridge network of its own, made for one stack: its
// containers reach the host only at the bridge's own address (Gateway),
// and there only on the ports Allow admits; every other packet from the
// bridge, to the host or beyond, is refused by a firewall chain of its own
// (iptables), since a host program may listen on every interface. Nothing
// outside is reachable: the stand-ins for AWS, the forge and the API all
// listen on Gateway. It holds no DNS server: names come from --add-host
// (Spec.Hosts).
//
// A bridge exists only while a container is attached to it, so Network
// keeps one running (catatonit in pause mode, an image built from the
// host's static binary) for its whole life, and the host's listeners can
// bind Gateway from the start.
type Network struct {
	r       *Runtime
	Name    string
	Bridge  string // the host's interface
	Gateway net.IP // the host's address on it
	Subnet  *net.IPNet

	chain  string
	keeper string

	mu      sync.Mutex
	allowed []int
	closed  bool
}

// keeperImage is the image of the container that holds the bridge up.
const keeperImage = "localhost/galley-netkeeper:catatonit"

// ErrNoFirewall is returned by NewNetwork when iptables is missing.
var ErrNoFirewall = errors.New("no iptables")

// NewNetwork makes the network name (podman picks a free subnet), brings
// its bridge up and closes it with a firewall that admits nothing yet.
func (r *Runtime) NewNetwork(ctx context.Context, name string) (*Network, error) {
	for _, tool := range []string{"iptables", "ip6tables"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%w: %s not found (Debian: apt-get install iptables)", ErrNoFirewall, tool)
		}
	}
	n := &Network{r: r, Name: name}
	// A network left by an earlier run of the same name goes first.
	_ = r.podmanCmd(ctx, "network", "rm", "--force", name).Run()
	if out, err := r.podmanCmd(ctx, "network", "create", "--disable-dns", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("container: podman network create %s: %v: %s", name, err, lastLine(out))
	}
	ok := false
	defer func() {
		if !ok {
			_ = n.Close()
		}
	}()
	out, err := r.podmanCmd(ctx, "network", "inspect", name, "--format",
		"{{.NetworkInterface}} {{range .Subnets}}{{.Subnet}} {{.Gateway}}{{end}}").Output()
	if err != nil {
		return nil, fmt.Errorf("container: podman network inspect %s: %v", name, err)
	}
	f := strings.Fields(string(out))
	if len(f) < 3 {
		return nil, fmt.Errorf("container: network %s: unexpected inspect answer %q", name, out)
	}
	n.Bridge, n.Gateway = f[0], net.ParseIP(f[2]).To4()
	if _, n.Subnet, err = net.ParseCIDR(f[1]); err != nil || n.Gateway == nil {
		return nil, fmt.Errorf("container: network %s: subnet %q gateway %q", name, f[1], f[2])
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	n.chain = "GALLEY-" + hex.EncodeToString(b[:])
	if err := n.firewall(); err != nil {
		return nil, err
	}
	if err := r.ensureKeeperImage(ctx); err != nil {
		return nil, err
	}
	n.keeper = name + "-keeper"
	_ = r.podmanCmd(ctx, "rm", "--force", n.keeper).Run()
	if out, err := r.podmanCmd(ctx, "run", "--detach", "--name", n.keeper, "--network", name,
		"--cap-drop", "ALL", "--read-only", "--read-only-tmpfs=false",
		"--ulimit", fmt.Sprintf("nofile=%d:%d", r.nofile, r.nofile),
		"--ulimit", fmt.Sprintf("nproc=%d:%d", r.nproc, r.nproc),
		keeperImage, "-P").CombinedOutput(); err != nil { // pause mode: waits for a signal
		return nil, fmt.Errorf("container: network %s: cannot start its keeper: %v: %s", name, err, lastLine(out))
	}
	ok = true
	return n, nil
}

func (r *Runtime) ensureKeeperImage(ctx context.Context) error {
	if r.ImageExists(ctx, keeperImage) {
		return nil
	}
	bin, err := exec.LookPath("catatonit")
	if err != nil {
		bin = "/usr/libexec/podman/catatonit"
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("%w: catatonit not found (it comes with podman)", ErrNoRuntime)
		}
	}
	return BuildFromBinary(ctx, keeperImage, bin, "/catatonit", nil)
}

func ipt(tool string, args ...string) error {
	out, err := exec.Command(tool, append([]string{"-w"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("container: %s %s: %v: %s", tool, strings.Join(args, " "), err, lastLine(out))
	}
	return nil
}

// firewall makes the network's chain (replies pass, then the allowed
// ports, then a refusal) and sends every packet from the bridge to the
// host or through it there. IPv6 from the bridge is dropped outright.
func (n *Network) firewall() error {
	steps := [][]string{
		{"-N", n.chain},
		{"-A", n.chain, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"},
		{"-A", n.chain, "-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"},
		{"-A", n.chain, "-j", "REJECT", "--reject-with", "icmp-port-unreachable"},
		{"-I", "INPUT", "1", "-i", n.Bridge, "-j", n.chain},
		{"-I", "FORWARD", "1", "-i", n.Bridge, "-j", n.chain},
	}
	for _, s := range steps {
		if err := ipt("iptables", s...); err != nil {
			return err
		}
	}
	for _, s := range [][]string{
		{"-N", n.chain}, {"-A", n.chain, "-j", "DROP"},
		{"-I", "INPUT", "1", "-i", n.Bridge, "-j", n.chain},
		{"-I", "FORWARD", "1", "-i", n.Bridge, "-j", n.chain},
	} {
		if err := ipt("ip6tables", s...); err != nil {
			return err
		}
	}
	return nil
}

// Allow admits TCP connections from the network's containers to port on
// Gateway.
func (n *Network) Allow(port int) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return errors.New("container: network closed")
	}
	// After the replies' rule, before the refusals.
	if err := ipt("iptables", "-I", n.chain, "2", "-p", "tcp", "-d", n.Gateway.String(), "--dport", strconv.Itoa(port), "-j", "ACCEPT"); err != nil {
		return err
	}
	n.allowed = append(n.allowed, port)
	return nil
}

// Listen listens on a free port of Gateway and admits it (Allow).
func (n *Network) Listen() (net.Listener, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(n.Gateway.String(), "0"))
	if err != nil {
		return nil, err
	}
	if err := n.Allow(ln.Addr().(*net.TCPAddr).Port); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// ListenClosed listens on a free port of Gateway without admitting it:
// this machine's programs reach it there, the network's containers do not.
func (n *Network) ListenClosed() (net.Listener, error) {
	return net.Listen("tcp", net.JoinHostPort(n.Gateway.String(), "0"))
}

// Close removes the keeper, the network and the firewall chains.
func (n *Network) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	n.mu.Unlock()
	ctx := context.Background()
	var errs []error
	if n.keeper != "" {
		if out, err := n.r.podmanCmd(ctx, "rm", "--force", "--time", "0", n.keeper).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("podman rm %s: %v: %s", n.keeper, err, lastLine(out)))
		}
	}
	if out, err := n.r.podmanCmd(ctx, "network", "rm", "--force", n.Name).CombinedOutput(); err != nil {
		errs = append(errs, fmt.Errorf("podman network rm %s: %v: %s", n.Name, err, lastLine(out)))
	}
	if n.chain != "" {
		for _, tool := range []string{"iptables", "ip6tables"} {
			for _, hook := range []string{"INPUT", "FORWARD"} {
				_ = ipt(tool, "-D", hook, "-i", n.Bridge, "-j", n.chain)
			}
			_ = ipt(tool, "-F", n.chain)
			_ = ipt(tool, "-X", n.chain)
		}
	}
	return errors.Join(errs...)
}
