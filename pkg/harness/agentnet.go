package harness

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"

	"github.com/galley-run/galley/pkg/contract"
)

// AgentNetwork is how the platform keeps an agent's network to what the
// harness opens for it: its MCP endpoint, its push gate, its model proxy
// and its egress proxy. Enforcement never depends on the agent honouring a
// proxy variable. docs/security.md, "The agent's network".
type AgentNetwork string

const (
	// NetAuto picks the strongest this process can apply (ChooseNetwork);
	// what ConfigFromEnv defaults to.
	NetAuto AgentNetwork = "auto"
	// NetNamespace runs the agent in a network namespace of its own with
	// loopback only; the harness opens its listeners inside it (on fixed
	// ports of that loopback) and dials everything else from its own.
	// Needs CAP_SYS_ADMIN and CAP_NET_ADMIN (root, outside a container).
	NetNamespace AgentNetwork = "namespace"
	// NetLandlock lets the agent connect only to the harness's TCP ports
	// (Landlock's network rules, ABI 4 and later). It limits TCP by port
	// alone: UDP, and so a resolver, stays reachable.
	NetLandlock AgentNetwork = "landlock"
	// NetTask says the platform confines the whole task's network (on AWS
	// the worker task's subnets and security group): the harness adds
	// nothing, and says so without a warning.
	NetTask AgentNetwork = contract.AgentNetworkTask
	// NetOpen confines nothing: the agent reaches whatever the harness's
	// host reaches. The harness and galley serve say so loudly.
	NetOpen AgentNetwork = "open"
)

// ParseAgentNetwork reads a contract.EnvAgentNetwork value; empty is NetAuto.
func ParseAgentNetwork(s string) (AgentNetwork, error) {
	switch n := AgentNetwork(s); n {
	case "":
		return NetAuto, nil
	case NetAuto, NetNamespace, NetLandlock, NetTask, NetOpen:
		return n, nil
	}
	return "", errors.New(contract.EnvAgentNetwork + " must be auto, namespace, landlock, task or open")
}

// NetworkEnforcement is what ChooseNetwork found.
type NetworkEnforcement struct {
	Mode AgentNetwork
	// Why says why Mode was chosen over the stronger ones (never a secret).
	Why string
}

// ChooseNetwork picks the network confinement this process can apply to
// its agents: a namespace of their own where it can make one, else
// Landlock's network rules where the kernel has them, else none. It tries
// once per process.
func ChooseNetwork() NetworkEnforcement {
	chooseOnce.Do(func() { chosen = chooseNetwork() })
	return chosen
}

var (
	chooseOnce sync.Once
	chosen     NetworkEnforcement
)

func chooseNetwork() NetworkEnforcement {
	err := probeNamespace()
	if err == nil {
		return NetworkEnforcement{Mode: NetNamespace, Why: "the harness may make network namespaces"}
	}
	why := "no network namespace: " + err.Error()
	if abi := landlockABI(); abi >= landlockNetABI {
		return NetworkEnforcement{Mode: NetLandlock, Why: why}
	} else if abi > 0 {
		why += fmt.Sprintf("; Landlock ABI %d has no network rules (they need ABI %d)", abi, landlockNetABI)
	} else {
		why += "; the kernel has no Landlock"
	}
	return NetworkEnforcement{Mode: NetOpen, Why: why}
}

// landlockNetABI is the first Landlock ABI with TCP rules.
const landlockNetABI = 4

// namespacePortBase is where the harness's listeners sit on the loopback
// of an agent's own namespace: fixed, since the namespace is the agent's
// alone, so the agent's environment can name them before it runs.
const namespacePortBase = 7700

// agentNet is one agent's network: where the harness's servers listen so
// that the agent, and only the agent, reaches them.
type agentNet struct {
	mode AgentNetwork
	why  string

	mu       sync.Mutex
	deferred []*deferredListener // NetNamespace: bound inside the namespace by attach
	ports    []int               // every port opened for the agent
	attached bool
}

// listen opens a listener the agent will reach at the returned address's
// host and port: on this machine's loopback, or, under NetNamespace, one
// bound on the agent's loopback once its namespace exists (attach). name
// is for logs.
func (n *agentNet) listen(name string) (net.Listener, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mode != NetNamespace {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		n.ports = append(n.ports, ln.Addr().(*net.TCPAddr).Port)
		return ln, nil
	}
	if n.attached {
		return nil, errors.New("the agent's network is already made: " + name + " comes too late")
	}
	port := namespacePortBase + len(n.deferred)
	d := newDeferredListener(name, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	n.deferred = append(n.deferred, d)
	n.ports = append(n.ports, port)
	return d, nil
}

// connectPorts are the TCP ports the agent may connect to under
// NetLandlock: the harness's own.
func (n *agentNet) connectPorts() []int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]int(nil), n.ports...)
}

// close closes what attach bound in the agent's namespace (a server
// closing its listener does too).
func (n *agentNet) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, d := range n.deferred {
		_ = d.Close()
	}
}

// describe is the network's line for logs and the event log.
func (n *agentNet) describe() string {
	switch n.mode {
	case NetNamespace:
		return "a network namespace of its own with loopback only; the harness's ports " + portList(n.connectPorts())
	case NetLandlock:
		return "Landlock: TCP connections only to the harness's ports " + portList(n.connectPorts())
	case NetTask:
		return "the task's network, confined by the platform"
	}
	return "open: the agent reaches whatever this machine reaches"
}

func portList(ps []int) string {
	s := ""
	for i, p := range ps {
		if i > 0 {
			s += ","
		}
		s += strconv.Itoa(p)
	}
	return s
}

// deferredListener is a net.Listener whose address is known at once and
// whose connections come from a listener attached later (bound inside the
// agent's namespace, which exists only once the agent's first process
// does): a server can be started, and its URL given to the agent, before.
type deferredListener struct {
	name  string
	addr  net.Addr
	ready chan struct{} // closed by attach or Close
	once  sync.Once
	mu    sync.Mutex
	ln    net.Listener
	done  bool
}

func newDeferredListener(name string, addr net.Addr) *deferredListener {
	return &deferredListener{name: name, addr: addr, ready: make(chan struct{})}
}

func (d *deferredListener) attach(ln net.Listener) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done {
		ln.Close()
		return net.ErrClosed
	}
	d.ln = ln
	d.once.Do(func() { close(d.ready) })
	return nil
}

func (d *deferredListener) Accept() (net.Conn, error) {
	<-d.ready
	d.mu.Lock()
	ln := d.ln
	d.mu.Unlock()
	if ln == nil {
		return nil, net.ErrClosed
	}
	return ln.Accept()
}

func (d *deferredListener) Close() error {
	d.mu.Lock()
	d.done = true
	ln := d.ln
	d.mu.Unlock()
	d.once.Do(func() { close(d.ready) })
	if ln != nil {
		return ln.Close()
	}
	return nil
}

func (d *deferredListener) Addr() net.Addr { return d.addr }

// listenForAgent opens a listener for one of the harness's servers where
// the agent reaches it (agentNet.listen); on this machine's loopback when
// no network was chosen (tests that start a server alone).
func (h *harness) listenForAgent(name string) (net.Listener, error) {
	if h.net == nil {
		return net.Listen("tcp", "127.0.0.1:0")
	}
	return h.net.listen(name)
}
