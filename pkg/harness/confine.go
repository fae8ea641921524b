package harness

import (
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/galley-run/galley/pkg/workerapi"
)

// Confinement is how the platform keeps an agent (and everything it
// starts) away from what it must not reach: galley's data folder, the
// repository's storage, other workspaces, the harness's secrets and memory,
// the task role's credentials. docs/security.md says what each covers.
type Confinement string

const (
	// ConfineAuto picks the strongest confinement this process can apply
	// (ChooseConfinement); what ConfigFromEnv defaults to.
	ConfineAuto Confinement = "auto"
	// ConfineUser runs the agent under a uid and gid of its own (AgentUIDOf),
	// with no supplementary groups and no_new_privs, in a workspace, home
	// and temporary folder it owns (mode 0700). Needs every capability of
	// UIDCapabilities.
	ConfineUser Confinement = "uid"
	// ConfineLandlock runs the agent under the harness's uid inside a
	// Landlock domain: read-write beneath its workspace, home and temporary
	// folder, read-only (and execute) beneath the system's folders and the
	// folders of its programs, nothing else of the file system.
	ConfineLandlock Confinement = "landlock"
	// ConfineNone runs the agent as the harness, confined by nothing: what
	// a Config whose Confine is empty does (in-process tests).
	ConfineNone Confinement = "none"
)

// AgentExecCommand is the galley-worker subcommand through which the
// harness starts a confined agent: it sets no_new_privs, enters the
// Landlock domain when asked, and executes the agent (RunAgentExec).
const AgentExecCommand = "agent-exec"

// Agent uids come from ranges no distribution allocates (above the 16-bit
// range). The service numbers each house's workers in
// [workerapi.AgentUIDBase, workerapi.AgentUIDEnd) and hands the uid over
// in the worker's Self, so that two workers' agents never share a uid on
// one machine or one shared file system. A worker launched before the
// service numbered them has none; its uid is a hash of the handle in
// [AgentUIDBase, AgentUIDBase+2^28), below the service's range, where two
// such workers may collide (about one chance in six among 10,000).
const (
	AgentUIDBase = 1 << 28
	agentUIDSpan = 1 << 28
)

// AgentUID is the uid (and gid) of a worker's agent under ConfineUser when
// its Self names none: a stable function of the handle, so that every
// harness and every host agree on who owns the worktree. AgentUIDOf is the
// uid the harness uses.
func AgentUID(handle string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(handle))
	return AgentUIDBase + int(h.Sum32()%agentUIDSpan)
}

// AgentUIDOf is the uid (and gid) of the worker's agent under
// ConfineUser: the one the service allocated (self.AgentUID, unique in
// the house), else AgentUID(self.Handle). A uid outside the service's
// range is refused rather than used: it could be root's or a system
// user's.
func AgentUIDOf(self workerapi.Self) (int, error) {
	if self.AgentUID == 0 {
		return AgentUID(self.Handle), nil
	}
	if self.AgentUID < workerapi.AgentUIDBase || self.AgentUID >= workerapi.AgentUIDEnd {
		return 0, fmt.Errorf("the service gave agent uid %d, outside [%d, %d)", self.AgentUID, workerapi.AgentUIDBase, workerapi.AgentUIDEnd)
	}
	return int(self.AgentUID), nil
}

// UIDCapability is a capability the uid confinement uses (its name
// without CAP_, its bit in linux/capability.h) and the operation that
// needs it.
type UIDCapability struct {
	Name string
	Bit  uint
	Why  string
}

// UIDCapabilities are the capabilities ConfineUser needs, each for what
// the harness really calls (jail_linux.go): nothing else. infra/stack keeps
// exactly these in the worker container (its test checks that), and a
// harness that lacks one refuses the uid confinement naming it.
var UIDCapabilities = []UIDCapability{
	{"CHOWN", 0, "give the worktree, home and tmp to the agent's uid and take the worktree back (lchown)"},
	{"DAC_OVERRIDE", 1, "walk, rewrite and remove what the agent closed to others (a folder of its uid with mode 0700 or 0000)"},
	{"FOWNER", 3, "set the mode of the worktree it gave the agent (chmod 0700) and remove the agent's files from sticky folders (its home and tmp beneath /tmp)"},
	{"KILL", 5, "signal the agent's processes, which run under another uid"},
	{"SETGID", 6, "start the agent under its gid with no supplementary group (setresgid, setgroups)"},
	{"SETUID", 7, "start the agent under its uid (setresuid)"},
}

// Enforcement is what ChooseConfinement found.
type Enforcement struct {
	Mode Confinement
	// LandlockABI is the kernel's Landlock ABI version, 0 when absent.
	LandlockABI int
	// Why says why Mode was chosen over the stronger ones (never a secret).
	Why string
}

// ChooseConfinement picks the confinement for agents whose workspaces lie
// under workspaceRoot and whose programs include exe (the galley-worker
// that starts them): a separate uid when this process may switch users and
// the agent uid can reach both, else Landlock when the kernel has it, else
// none.
func ChooseConfinement(workspaceRoot, exe string) Enforcement {
	abi := landlockABI()
	e := Enforcement{LandlockABI: abi}
	var why []string
	if ok, msg := canSwitchUser(); ok {
		// Where the harness makes each agent a mount namespace of its
		// own (root, outside a container), the agent's view shows its
		// worktree and programs whatever the folders above them allow
		// (agentView): a separate uid reaches them anyway.
		view := probeNamespace() == nil
		switch {
		case !view && !traversableByOthers(workspaceRoot):
			why = append(why, "a separate uid could not reach the workspaces: a folder above "+workspaceRoot+" is closed to other users (chmod o+x it)")
		case exe != "" && !(executableByOthers(exe) || view && modeExecutableByOthers(exe)):
			why = append(why, "a separate uid could not run "+exe+" (it or a folder above it is closed to other users)")
		default:
			e.Mode, e.Why = ConfineUser, "the harness may switch users"
			return e
		}
	} else if os.Geteuid() == 0 && runtime.GOOS == "linux" {
		// A root harness that lacks a capability (a container that
		// dropped it) would run its agent as root under anything weaker:
		// uid is chosen, and refused naming what is missing.
		e.Mode, e.Why = ConfineUser, "the harness runs as root: "+msg
		return e
	} else {
		why = append(why, msg)
	}
	if abi > 0 {
		e.Mode, e.Why = ConfineLandlock, strings.Join(why, "; ")
		return e
	}
	why = append(why, "the kernel has no Landlock")
	e.Mode, e.Why = ConfineNone, strings.Join(why, "; ")
	return e
}

// modeExecutableByOthers reports whether the file at path (links
// followed) may be run by any user, whatever the folders above it allow.
func modeExecutableByOthers(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().Perm()&0o001 != 0
}

// traversableByOthers reports whether every folder from / down to dir may
// be searched by any user (the x bit for others).
func traversableByOthers(dir string) bool {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	for {
		fi, err := os.Stat(dir)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return true
		}
		dir = parent
	}
}

// executableByOthers reports whether any user may run the file at path.
func executableByOthers(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().Perm()&0o001 != 0 && traversableByOthers(filepath.Dir(path))
}

// CanSwitchUser reports whether this process may run an agent under
// another uid (ConfineUser), and if not, why.
func CanSwitchUser() (bool, string) { return canSwitchUser() }
