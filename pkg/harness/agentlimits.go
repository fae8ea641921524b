package harness

import (
	"fmt"
	"os"
	"strconv"
	"sync/atomic"

	"github.com/galley-run/galley/pkg/contract"
)

// DefaultAgentMaxMemory is the agent's memory budget (its cgroup's
// memory.limit_in_bytes, where the harness makes one) when
// contract.EnvAgentMaxMemory is unset: 4 GiB, room for a CLI on Node, its
// git and a test run.
const DefaultAgentMaxMemory = 4 << 30

// agentMaxMemory is the memory budget contract.EnvAgentMaxMemory sets.
func agentMaxMemory() (int64, error) {
	v := os.Getenv(contract.EnvAgentMaxMemory)
	if v == "" {
		return DefaultAgentMaxMemory, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 64<<20 {
		return 0, fmt.Errorf("%s must be a number of bytes, at least 67108864 (64 MiB)", contract.EnvAgentMaxMemory)
	}
	return n, nil
}

// groups numbers the agents' cgroups this process makes.
var groups atomic.Uint64

// groupName is the agent's cgroup's name: its worker's handle, this
// harness's pid and a count of the groups it made, since harnesses of two
// houses on one machine may share a handle (and tests run several
// harnesses of one handle in one process). A group of the same name is
// then a dead process's (its pid was this one's), which newAgentGroup
// ends and makes afresh.
func groupName(handle string) string {
	b := []byte("galley-agent-")
	for _, c := range []byte(handle) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			b = append(b, c)
		}
	}
	return string(b) + "-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatUint(groups.Add(1), 10)
}

// DefaultAgentMaxProcs is the agent's process budget (its RLIMIT_NPROC)
// when contract.EnvAgentMaxProcs is unset: room for a CLI on Node (a
// dozen threads), its git and a test run with workers, far below the
// machine's pid_max.
const DefaultAgentMaxProcs = 1024

// agentMaxProcs is the process budget contract.EnvAgentMaxProcs sets.
func agentMaxProcs() (uint64, error) {
	v := os.Getenv(contract.EnvAgentMaxProcs)
	if v == "" {
		return DefaultAgentMaxProcs, nil
	}
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil || n < 16 {
		return 0, fmt.Errorf("%s must be a number of processes, at least 16", contract.EnvAgentMaxProcs)
	}
	return n, nil
}
