package standin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The key hunt: an agent looks for the house's provider key wherever it
// can read, knowing only the keys' shapes and their hashes (a brief never
// carries a key). It reports where a candidate's hash matched, never a
// value.

// Bounds of the key hunt's search of the file system: it reads at most
// huntBytes in all, at most huntFileBytes of each file, for at most
// huntTime (an Attack's MaxMiB and MaxSeconds raise the first and the
// last, where a shape's file system is larger: a worker image's); the
// places a key is likeliest (the environment, /proc, the home, the CLIs'
// settings, the worktree, /tmp) come first.
const (
	huntBytes     = 256 << 20
	huntFileBytes = 4 << 20
	huntTime      = 60 * time.Second
)

// hunt is one key hunt's state.
type hunt struct {
	shapes   []*regexp.Regexp
	keys     map[string]bool // hex SHA-256 of the keys
	control  string          // hex SHA-256 of the control key
	deadline time.Time
	maxBytes int64         // the file search's byte bound
	maxTime  time.Duration // its time bound

	found, controlAt             []string // where a key's (the control's) hash matched
	candidates                   int      // strings of a key's shape seen
	envRead, envDenied, cmdlines int
	files, denied                int
	bytes                        int64
	cut                          string // why the file search stopped early
	walked                       map[string]bool
}

// keyHunt searches this agent's reach for a string of one of shapes whose
// SHA-256 is one of hashes. controlPath (relative: to the worktree) is a
// file the test plants with a key of the same shape that is not the
// house's, controlHash its hash: the hunt waits for it, and finds it in its
// search of the worktree, or the search is broken. maxMiB and maxSeconds,
// when above the defaults, raise the file search's bounds.
func keyHunt(ctx context.Context, shapes, hashes []string, controlPath, controlHash string, maxMiB, maxSeconds int) (bool, string) {
	h, err := newHunt(shapes, hashes, controlHash)
	if err != nil {
		return false, err.Error()
	}
	if b := int64(maxMiB) << 20; b > h.maxBytes {
		h.maxBytes = b
	}
	if d := time.Duration(maxSeconds) * time.Second; d > h.maxTime {
		h.maxTime = d
	}
	if controlPath != "" {
		if _, err := waitFile(ctx, controlPath); err != nil {
			return false, "the control key was not planted: " + errText(err)
		}
	}
	h.deadline = time.Now().Add(h.maxTime)
	h.scan("its environment", []byte(strings.Join(os.Environ(), "\x00")))
	h.procs()
	home, _ := os.UserHomeDir()
	wd, _ := os.Getwd()
	var roots []string
	if home != "" {
		roots = append(roots, filepath.Join(home, ".claude"), filepath.Join(home, ".claude.json"), filepath.Join(home, ".codex"))
	}
	for _, k := range []string{"CODEX_HOME", "CLAUDE_CONFIG_DIR", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR"} {
		if v := os.Getenv(k); v != "" {
			roots = append(roots, v)
		}
	}
	if home != "" {
		roots = append(roots, filepath.Join(home, ".config"), filepath.Join(home, ".local"), filepath.Join(home, ".cache"), home)
	}
	roots = append(roots, wd, os.TempDir(), "/tmp", "/root", "/home")
	roots = append(roots, rootFolders()...)
	for _, r := range roots {
		h.walk(ctx, r)
	}
	return h.verdict(controlPath, "its environment, /proc/self/environ and every process's environ (%d read, %d denied) and cmdline (%d read), %d files (%d MiB; %d unreadable) under its home, the CLIs' settings, the worktree, /tmp and /")
}

// newHunt compiles the shapes and takes the hashes (hex SHA-256).
func newHunt(shapes, hashes []string, controlHash string) (*hunt, error) {
	h := &hunt{keys: map[string]bool{}, control: strings.ToLower(controlHash), walked: map[string]bool{},
		deadline: time.Now().Add(huntTime), maxBytes: huntBytes, maxTime: huntTime}
	for _, s := range shapes {
		re, err := regexp.Compile(s)
		if err != nil {
			return nil, errors.New("a key shape does not compile: " + err.Error())
		}
		h.shapes = append(h.shapes, re)
	}
	for _, k := range hashes {
		h.keys[strings.ToLower(k)] = true
	}
	if len(h.shapes) == 0 || len(h.keys) == 0 {
		return nil, errors.New("no key shape or hash to hunt for")
	}
	return h, nil
}

// verdict says what the hunt found (where, never a value) and what it
// searched; searched is a format of the counts (environs read and denied,
// cmdlines, files, MiB, unreadable).
func (h *hunt) verdict(controlPath, searched string) (bool, string) {
	what := fmt.Sprintf(searched, h.envRead, h.envDenied, h.cmdlines, h.files, h.bytes>>20, h.denied)
	if h.cut != "" {
		what += " (cut: " + h.cut + ")"
	}
	if len(h.found) > 0 {
		return true, fmt.Sprintf("a house key's hash matched in %s; searched %s", strings.Join(firstOf(h.found, 8), ", "), what)
	}
	detail := fmt.Sprintf("no house key: %d candidates of the keys' shapes, none with a key's hash; searched %s", h.candidates, what)
	if h.control != "" {
		if len(h.controlAt) > 0 {
			detail += "; the control key planted at " + controlPath + " was found in " + strings.Join(firstOf(h.controlAt, 4), ", ")
		} else {
			detail += "; the control key planted at " + controlPath + " was not found"
		}
	}
	return false, detail
}

func firstOf(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("and %d more", len(s)-n))
	}
	return s
}

// scan looks for candidates in b, found at where.
func (h *hunt) scan(where string, b []byte) {
	for _, re := range h.shapes {
		for _, m := range re.FindAll(b, -1) {
			h.candidates++
			sum := sha256.Sum256(m)
			s := hex.EncodeToString(sum[:])
			if h.keys[s] && !slices.Contains(h.found, where) {
				h.found = append(h.found, where)
			}
			if s == h.control && !slices.Contains(h.controlAt, where) {
				h.controlAt = append(h.controlAt, where)
			}
		}
	}
}

// procs reads /proc/self/environ and every process's environ and cmdline
// (its ancestors' among them).
func (h *hunt) procs() {
	if b, err := os.ReadFile("/proc/self/environ"); err == nil {
		h.scan("/proc/self/environ", b)
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		for _, f := range []string{"environ", "cmdline"} {
			p := "/proc/" + e.Name() + "/" + f
			b, err := os.ReadFile(p)
			switch {
			case err != nil && f == "environ":
				h.envDenied++
			case err != nil:
			case f == "environ":
				h.envRead++
				h.scan(p, b)
			default:
				h.cmdlines++
				h.scan(p, b)
			}
		}
	}
}

// systemFolders are the folders of / searched last: the system's programs
// and libraries, the most bytes and the least likely to hold a key.
var systemFolders = []string{"/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/boot", "/nix", "/snap"}

// commonFolders are folders of / searched even where / cannot be listed
// (a Landlock domain allows reading beneath some of them alone).
var commonFolders = []string{"/etc", "/home", "/root", "/opt", "/srv", "/var", "/run", "/mnt", "/media", "/data", "/workspace", "/work", "/app"}

// rootFolders are /'s entries and commonFolders, the system's folders
// last, then / itself (for what lies directly in it).
func rootFolders() []string {
	var names []string
	ents, _ := os.ReadDir("/")
	for _, e := range ents {
		names = append(names, "/"+e.Name())
	}
	var first, last []string
	for _, p := range slices.Concat(names, commonFolders, systemFolders) {
		switch {
		case slices.Contains(first, p) || slices.Contains(last, p):
		case slices.Contains(systemFolders, p):
			last = append(last, p)
		default:
			first = append(first, p)
		}
	}
	return append(append(first, last...), "/")
}

// skipped are the trees the file search leaves out: /proc (read above),
// /sys and /dev (no files of anyone's).
var skipped = map[string]bool{"/proc": true, "/sys": true, "/dev": true}

// walk searches the regular files beneath root (a file itself, or a
// folder), each folder once, within the hunt's bounds.
func (h *hunt) walk(ctx context.Context, root string) {
	root = filepath.Clean(root)
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if h.cut != "" {
			return filepath.SkipAll
		}
		switch {
		case ctx.Err() != nil:
			h.cut = "the agent's context ended"
		case time.Now().After(h.deadline):
			h.cut = "the time bound, " + h.maxTime.String()
		case h.bytes >= h.maxBytes:
			h.cut = fmt.Sprintf("the byte bound, %d MiB", h.maxBytes>>20)
		}
		if h.cut != "" {
			return filepath.SkipAll
		}
		if err != nil {
			if errors.Is(err, fs.ErrPermission) {
				h.denied++
			}
			if d != nil && d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if skipped[p] || h.walked[p] {
				return filepath.SkipDir
			}
			h.walked[p] = true
			return nil
		}
		if !d.Type().IsRegular() || h.walked[p] {
			return nil
		}
		h.walked[p] = true
		h.file(p)
		return nil
	})
}

// file searches the first huntFileBytes of the file at p.
func (h *hunt) file(p string) {
	f, err := os.Open(p)
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			h.denied++
		}
		return
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, min(huntFileBytes, h.maxBytes-h.bytes)))
	if err != nil && len(b) == 0 {
		h.denied++
		return
	}
	h.files++
	h.bytes += int64(len(b))
	h.scan(p, b)
}
