package workspace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	gitconfig "github.com/go-git/go-git/v5/plumbing/format/config"
	"golang.org/x/sys/unix"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/safepath"
)

// maxConfig bounds the .git/config Scrub reads: a clone's is a few hundred
// bytes.
const maxConfig = 1 << 20

// Scrub removes what an agent may have planted in the git directory of the
// workspace at dir to make the next git command there run a program of its
// choosing (or read configuration from elsewhere), before another agent or
// galley itself runs git there. It never runs git in dir: git would read
// the planted configuration, and include/includeIf can pull in any file.
//
// It deletes every hook (the hooks directory is emptied, or replaced if it
// is not a plain directory), and these files, none of which galley's
// clones have: config.worktree, commondir (which would make git read
// another repository's config), info/attributes, objects/info/alternates
// and http-alternates, and modules/ (submodules' own git directories, each
// with its own config and hooks; the agent's unpushed submodule commits go
// with them, as they could never be pushed through the worker's branch).
//
// It rewrites .git/config from Go keeping only, with values checked:
//
//	core.repositoryformatversion (0 or 1), core.filemode and
//	core.logallrefupdates (true/false), core.bare (always false),
//	extensions.objectformat (sha1 or sha256),
//	remote.origin.url, remote.origin.fetch (rewritten to the default
//	+refs/heads/*:refs/remotes/origin/*),
//	branch.<name>.remote (origin) and branch.<name>.merge (refs/heads/...),
//	user.name and user.email,
//	core.hooksPath only when it names the workspace's own (emptied) hooks
//	directory, galley.branch, and the push restriction derived from it
//	(remote.origin.push of that branch, push.default=nothing).
//
// A key set more than once (a clone sets each once) is dropped.
//
// Everything else goes: core.hooksPath elsewhere, core.fsmonitor, core.sshCommand,
// core.pager, core.editor, core.askPass, core.worktree, credential.*,
// filter.* (so .gitattributes filters cannot run), diff.* and merge.*
// drivers, include.* and includeIf.*, url.*.insteadOf (so UseGate must
// follow Scrub), uploadpack.*, alias.*, gpg.*, remote.*.pushurl and
// every other remote. Values holding control characters are dropped.
// Every operation goes through package safepath, so no symbolic link is
// ever followed at any component (an agent replacing .git/info or
// .git/objects/info by a link to a folder elsewhere makes Scrub remove
// nothing there); every symbolic link beneath .git is removed, as a link,
// before anything else (a clone has none, and galley's git would follow
// one). The .git directory itself and its config must not be links:
// Scrub refuses (Invalid) a workspace whose are.
func Scrub(ctx context.Context, dir string) error {
	const op = galleyerr.Op("workspace.Scrub")
	dir, err := cleanDir(dir)
	if err != nil {
		return galleyerr.E(op, err)
	}
	if err := ctx.Err(); err != nil {
		return galleyerr.E(op, galleyerr.Unavailable, err)
	}
	wt, err := safepath.Open(dir)
	if err != nil {
		return galleyerr.E(op, galleyerr.Invalid, "open the workspace", err)
	}
	defer wt.Close()
	if st, err := wt.Lstat(".git"); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return galleyerr.E(op, galleyerr.Invalid, fmt.Sprintf("%s/.git is not a git directory (a link or gitdir file is not a galley clone)", dir))
	}
	g, err := wt.OpenDir(".git")
	if err != nil {
		return galleyerr.E(op, galleyerr.Invalid, "open the git directory", err)
	}
	defer g.Close()
	// A clone has no symbolic link in its git directory, and git, which
	// galley runs there with more privilege than the agent, would follow
	// one (appending to logs/HEAD, writing objects beneath objects/xx):
	// every one goes, removed as a link.
	if err := removeLinks(g); err != nil {
		return galleyerr.E(op, galleyerr.Other, "remove links from the git directory", err)
	}
	if err := scrubConfig(dir, g); err != nil {
		return galleyerr.E(op, err)
	}
	for _, name := range []string{"config.worktree", "commondir", "info/attributes",
		"objects/info/alternates", "objects/info/http-alternates", "modules"} {
		if err := g.RemoveAll(name); err != nil {
			return galleyerr.E(op, galleyerr.Other, "remove "+name, err)
		}
	}
	if err := emptyHooks(g); err != nil {
		return galleyerr.E(op, galleyerr.Other, "remove hooks", err)
	}
	return nil
}

// removeLinks removes every symbolic link beneath the git directory g.
func removeLinks(g *safepath.Dir) error {
	var links []string
	err := g.Walk(".", func(rel string, st unix.Stat_t) error {
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			links = append(links, rel)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, l := range links {
		if err := g.Remove(l); err != nil {
			return err
		}
	}
	return nil
}

// emptyHooks leaves hooks an empty directory.
func emptyHooks(g *safepath.Dir) error {
	st, err := g.Lstat("hooks")
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		if err := g.Remove("hooks"); err != nil {
			return err
		}
	default:
		names, err := g.ReadDir("hooks")
		if err != nil {
			return err
		}
		for _, n := range names {
			if err := g.RemoveAll("hooks/" + n); err != nil {
				return err
			}
		}
		return nil
	}
	return g.Mkdir("hooks", 0o755)
}

// scrubConfig rewrites gitDir/config with only the allowed keys (dir is
// the workspace, whose own hooks directory core.hooksPath may name).
func scrubConfig(dir string, g *safepath.Dir) error {
	st, err := g.Lstat("config")
	if err != nil {
		return galleyerr.E(galleyerr.Invalid, "read the clone's git configuration", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size > maxConfig {
		return galleyerr.E(galleyerr.Invalid, "the clone's .git/config is not a plain file of a sensible size")
	}
	raw, err := g.ReadFile("config", maxConfig)
	if err != nil {
		return galleyerr.E(galleyerr.Other, "read the clone's git configuration", err)
	}
	in := gitconfig.New()
	if err := gitconfig.NewDecoder(bytes.NewReader(raw)).Decode(in); err != nil {
		return galleyerr.E(galleyerr.Invalid, "the clone's .git/config cannot be parsed; remove the workspace")
	}
	var out configWriter
	out.allowed(in, filepath.Join(dir, ".git", "hooks"))
	if out.keeps(in) {
		return nil // nothing to remove: no write, so concurrent Prepares do not contend
	}
	if err := g.WriteFile("config", out.b.Bytes(), 0o644); err != nil {
		return galleyerr.E(galleyerr.Other, "rewrite config", err)
	}
	return nil
}

// configWriter renders a git config file and remembers what it wrote.
type configWriter struct {
	b       bytes.Buffer
	written map[string]bool // "section\x00subsection\x00key\x00value", section and key lower-case
}

func entryKey(section, sub, key, value string) string {
	return strings.ToLower(section) + "\x00" + sub + "\x00" + strings.ToLower(key) + "\x00" + value
}

func (w *configWriter) section(name, sub string) {
	if sub == "" {
		fmt.Fprintf(&w.b, "[%s]\n", name)
		return
	}
	fmt.Fprintf(&w.b, "[%s %s]\n", name, quote(sub))
}

func (w *configWriter) entry(section, sub, key, value string) {
	if w.written == nil {
		w.written = map[string]bool{}
	}
	w.written[entryKey(section, sub, key, value)] = true
	fmt.Fprintf(&w.b, "\t%s = %s\n", key, quote(value))
}

// keeps reports whether every setting of in was written unchanged.
func (w *configWriter) keeps(in *gitconfig.Config) bool {
	for _, s := range in.Sections {
		for _, o := range s.Options {
			if !w.written[entryKey(s.Name, "", o.Key, o.Value)] {
				return false
			}
		}
		for _, ss := range s.Subsections {
			for _, o := range ss.Options {
				if !w.written[entryKey(s.Name, ss.Name, o.Key, o.Value)] {
					return false
				}
			}
		}
	}
	return true
}

// allowed writes the allowlisted part of in.
func (w *configWriter) allowed(in *gitconfig.Config, hooksPath string) {
	get := func(section, sub, key string) (string, bool) {
		var vs []string
		for _, s := range in.Sections {
			if !s.IsName(section) {
				continue
			}
			if sub == "" {
				vs = append(vs, s.Options.GetAll(key)...)
				continue
			}
			for _, ss := range s.Subsections {
				if ss.Name == sub { // subsection names are case-sensitive
					vs = append(vs, ss.Options.GetAll(key)...)
				}
			}
		}
		if len(vs) != 1 || !clean(vs[0]) || vs[0] == "" {
			return "", false // absent, or set more than once: not a clone's
		}
		return vs[0], true
	}
	boolean := func(v string, ok bool) (string, bool) {
		return v, ok && (v == "true" || v == "false")
	}

	w.section("core", "")
	if v, ok := get("core", "", "repositoryformatversion"); ok && (v == "0" || v == "1") {
		w.entry("core", "", "repositoryformatversion", v)
	}
	for _, k := range []string{"filemode", "logallrefupdates"} {
		if v, ok := boolean(get("core", "", k)); ok {
			w.entry("core", "", k, v)
		}
	}
	w.entry("core", "", "bare", "false")
	if v, ok := get("core", "", "hooksPath"); ok && v == hooksPath {
		w.entry("core", "", "hooksPath", v)
	}
	if v, ok := get("extensions", "", "objectformat"); ok && (v == "sha1" || v == "sha256") {
		w.section("extensions", "")
		w.entry("extensions", "", "objectformat", v)
	}

	branch, pinned := get("galley", "", branchKey[len("galley."):])
	if url, ok := get("remote", "origin", "url"); ok {
		w.section("remote", "origin")
		w.entry("remote", "origin", "url", url)
		w.entry("remote", "origin", "fetch", "+refs/heads/*:refs/remotes/origin/*")
		if pinned && branch != branchValue("") {
			ref := "refs/heads/" + branch
			w.entry("remote", "origin", "push", ref+":"+ref)
		}
	}
	for _, s := range in.Sections {
		if !s.IsName("branch") {
			continue
		}
		for _, ss := range s.Subsections {
			if !clean(ss.Name) {
				continue
			}
			remote, rok := get("branch", ss.Name, "remote")
			merge, mok := get("branch", ss.Name, "merge")
			if rok && remote == "origin" && mok && strings.HasPrefix(merge, "refs/heads/") {
				w.section("branch", ss.Name)
				w.entry("branch", ss.Name, "remote", remote)
				w.entry("branch", ss.Name, "merge", merge)
			}
		}
	}
	name, nok := get("user", "", "name")
	email, eok := get("user", "", "email")
	if nok || eok {
		w.section("user", "")
		if nok {
			w.entry("user", "", "name", name)
		}
		if eok {
			w.entry("user", "", "email", email)
		}
	}
	if pinned {
		w.section("galley", "")
		w.entry("galley", "", "branch", branch)
		w.section("push", "")
		w.entry("push", "", "default", "nothing")
	}
}

// quote quotes s for a git config file (values and subsection names alike).
func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// clean reports whether s holds no control character.
func clean(s string) bool {
	return !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}
