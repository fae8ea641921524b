package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// agentView is what the agent's own mount namespace shows, made by
// agent-exec as root before it takes the agent's uid: an empty tmpfs over
// each folder of hide (this machine's sockets in /run, /tmp, /var/tmp and
// /dev/shm: the system bus, the resolver's, a root tmux or X server's, a
// database's), and over each folder above an exposed path that other users
// may not search (a data folder under /root), with the exposed paths (the
// worktree, the agent's home and tmp, its programs) bound in again at
// their own paths. So the agent reaches its worktree under its own uid
// wherever the operator keeps galley's data, and reaches no socket of this
// machine's by path, whatever its mode.
type agentView struct {
	hide   []hiddenDir
	expose []exposedPath
}

type hiddenDir struct {
	path string
	mode uint32 // of the tmpfs's root
}

type exposedPath struct {
	path string
	rw   bool
}

// hideFlag and exposeFlag are agent-exec's flags: --hide MODE:PATH (MODE
// octal), --expose rw:PATH or ro:PATH.
func (h hiddenDir) flag() string { return strconv.FormatUint(uint64(h.mode), 8) + ":" + h.path }
func (e exposedPath) flag() string {
	return map[bool]string{true: "rw", false: "ro"}[e.rw] + ":" + e.path
}

func parseHide(s string) (hiddenDir, error) {
	m, p, ok := strings.Cut(s, ":")
	mode, err := strconv.ParseUint(m, 8, 32)
	if !ok || err != nil || !filepath.IsAbs(p) {
		return hiddenDir{}, errors.New("--hide needs MODE:/absolute/path")
	}
	return hiddenDir{path: filepath.Clean(p), mode: uint32(mode)}, nil
}

func parseExpose(s string) (exposedPath, error) {
	how, p, ok := strings.Cut(s, ":")
	if !ok || (how != "rw" && how != "ro") || !filepath.IsAbs(p) {
		return exposedPath{}, errors.New("--expose needs rw:/path or ro:/path")
	}
	return exposedPath{path: filepath.Clean(p), rw: how == "rw"}, nil
}

// systemHidden are the folders every agent's view empties (where they
// exist and are folders, not links: /var/run links to /run).
var systemHidden = []hiddenDir{{"/run", 0o755}, {"/var/run", 0o755}, {"/tmp", 0o1777}, {"/var/tmp", 0o1777}, {"/dev/shm", 0o1777}}

// closedAbove is the outermost folder above p that other users may not
// search, or "".
func closedAbove(p string) string {
	d := "/"
	for _, part := range strings.Split(strings.Trim(filepath.Dir(p), "/"), "/") {
		if part == "" {
			break
		}
		d = filepath.Join(d, part)
		if fi, err := os.Stat(d); err == nil && fi.IsDir() && fi.Mode().Perm()&0o001 == 0 {
			return d
		}
	}
	return ""
}

// under reports whether p is dir or beneath it.
func under(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// apply makes the view in the calling process's mount namespace, which
// must be its own (agent-exec is started with CLONE_NEWNS, its mounts
// private).
func (v agentView) apply() error {
	// What is exposed is opened before anything is hidden.
	type opened struct {
		exposedPath
		fd  int
		dir bool
	}
	var exp []opened
	defer func() {
		for _, e := range exp {
			unix.Close(e.fd)
		}
	}()
	for _, e := range v.expose {
		// What the agent writes (its worktree, home and tmp) is opened
		// without following a link at its last component: root binds what
		// it opens. Programs may be links (/bin to usr/bin); the agent
		// cannot change them.
		flags := unix.O_PATH | unix.O_CLOEXEC
		if e.rw {
			flags |= unix.O_NOFOLLOW
		}
		fd, err := unix.Open(e.path, flags, 0)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return fmt.Errorf("opening %s: %w", e.path, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK { // O_PATH|O_NOFOLLOW opens the link itself
			unix.Close(fd)
			return fmt.Errorf("%s is a symbolic link: the agent's own folders are never one", e.path)
		}
		exp = append(exp, opened{e, fd, st.Mode&unix.S_IFMT == unix.S_IFDIR})
	}
	roots := map[string]uint32{}
	for _, h := range v.hide {
		if fi, err := os.Lstat(h.path); err == nil && fi.IsDir() {
			roots[h.path] = h.mode
		}
	}
	for _, e := range exp {
		if d := closedAbove(e.path); d != "" {
			if _, ok := roots[d]; !ok {
				roots[d] = 0o711
			}
		}
	}
	// Outermost first; a root inside another is hidden by it already.
	var order []string
	for r := range roots {
		order = append(order, r)
	}
	slices.SortFunc(order, func(a, b string) int { return len(a) - len(b) })
	var hidden []string
	for _, r := range order {
		if slices.ContainsFunc(hidden, func(h string) bool { return under(r, h) }) {
			continue
		}
		opts := "mode=" + strconv.FormatUint(uint64(roots[r]), 8) + ",size=64m"
		if err := unix.Mount("tmpfs", r, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			return fmt.Errorf("hiding %s: %w", r, err)
		}
		hidden = append(hidden, r)
		if r == "/run" {
			// What programs expect of /run: a lock folder for all, and
			// shm where some distributions link it.
			if err := os.Mkdir("/run/lock", 0o1777); err == nil {
				_ = os.Chmod("/run/lock", 0o1777|os.ModeSticky)
			}
			_ = os.Symlink("/dev/shm", "/run/shm")
		}
	}
	// Each exposed path under a hidden folder is bound in again at its own
	// path, the folders above it made searchable by all; outermost first,
	// and one beneath another already bound is shown by it (a mount point
	// made there would be made in the real folder).
	slices.SortStableFunc(exp, func(a, b opened) int { return len(a.path) - len(b.path) })
	var bound []string
	for _, e := range exp {
		i := slices.IndexFunc(hidden, func(h string) bool { return under(e.path, h) && e.path != h })
		if i < 0 || slices.ContainsFunc(bound, func(b string) bool { return under(e.path, b) }) {
			continue
		}
		bound = append(bound, e.path)
		root := hidden[i]
		rel, _ := filepath.Rel(root, filepath.Dir(e.path))
		d := root
		for _, part := range strings.Split(rel, "/") {
			if part == "." || part == "" {
				continue
			}
			d = filepath.Join(d, part)
			if err := os.Mkdir(d, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
				return fmt.Errorf("showing %s: %w", e.path, err)
			}
		}
		if e.dir {
			if err := os.Mkdir(e.path, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
				return fmt.Errorf("showing %s: %w", e.path, err)
			}
		} else if f, err := os.OpenFile(e.path, os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
			f.Close()
		} else if !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("showing %s: %w", e.path, err)
		}
		src := "/proc/self/fd/" + strconv.Itoa(e.fd)
		if err := unix.Mount(src, e.path, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("showing %s: %w", e.path, err)
		}
		if !e.rw {
			if err := unix.Mount("", e.path, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
				return fmt.Errorf("showing %s read-only: %w", e.path, err)
			}
		}
	}
	return nil
}

// switchUser makes the calling process the agent: uid and gid, no
// supplementary group (every thread: Go's calls apply to all).
func switchUser(uid, gid int) error {
	if err := unix.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := unix.Setresgid(gid, gid, gid); err != nil {
		return fmt.Errorf("setresgid: %w", err)
	}
	if err := unix.Setresuid(uid, uid, uid); err != nil {
		return fmt.Errorf("setresuid: %w", err)
	}
	return nil
}
