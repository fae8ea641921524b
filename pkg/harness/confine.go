package harness

import (
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
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
	// ConfineUser runs the agent under a uid and gid of its own (AgentUID),
	// with no supplementary groups and no_new_privs, in a workspace, home
	// and temporary folder it owns (mode 0700). Needs root, or CAP_SETUID,
	// CAP_SETGID, CAP_CHOWN, CAP_KILL and CAP_DAC_READ_SEARCH (or
	// CAP_DAC_OVERRIDE).
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

// EnvConfine chooses the confinement (auto, uid, landlock or none); unset
// is auto. The local runtime sets it to the mode galley serve chose and
// reported at start.
const EnvConfine = "GALLEY_AGENT_CONFINE"

// AgentExecCommand is the galley-worker subcommand through which the
// harness starts a confined agent: it sets no_new_privs, enters the
// Landlock domain when asked, and executes the agent (RunAgentExec).
const AgentExecCommand = "agent-exec"

// Agent uids come from a range no distribution allocates (above the
// 16-bit range and systemd's dynamic and container ranges), one per worker
// handle, so that two workers' agents never share a uid on one machine or
// one shared file system.
const (
	AgentUIDBase = 1 << 28
	agentUIDSpan = 1 << 28
)

// AgentUID is the uid (and gid) of a worker's agent under ConfineUser: a
// stable function of the handle, so that every harness and every host
// agree on who owns a worker's worktree.
func AgentUID(handle string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(handle))
	return AgentUIDBase + int(h.Sum32()%agentUIDSpan)
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
		switch {
		case !traversableByOthers(workspaceRoot):
			why = append(why, "a separate uid could not reach the workspaces: a folder above "+workspaceRoot+" is closed to other users (chmod o+x it)")
		case exe != "" && !executableByOthers(exe):
			why = append(why, "a separate uid could not run "+exe+" (it or a folder above it is closed to other users)")
		default:
			e.Mode, e.Why = ConfineUser, "the harness may switch users"
			return e
		}
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
