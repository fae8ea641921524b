package safepath_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/galley-run/galley/pkg/safepath"
)

// snapshot is every file beneath dir: mode, owner and content.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		fmt.Fprintf(&b, "%s %v %d:%d", p, fi.Mode(), st.Uid, st.Gid)
		if fi.Mode().IsRegular() {
			c, _ := os.ReadFile(p)
			fmt.Fprintf(&b, " %q", c)
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// tree makes a worktree-like tree in dir: file, .git/info/attributes,
// .git/objects/info/alternates.
func tree(t *testing.T, dir string) {
	t.Helper()
	for _, f := range []string{"file", ".git/info/attributes", ".git/objects/info/alternates", ".git/config"} {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("content of "+f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// Every operation, with a symbolic link planted at each component of its
// path (the worktree's .git, .git/info, .git/objects, .git/objects/info,
// the file itself) pointing at the same names in another tree (a
// root-only folder elsewhere, another repository's objects/info), leaves
// the other tree as it was: no removal, chmod, chown, write or read goes
// through the link.
func TestNoOperationFollowsALink(t *testing.T) {
	ops := map[string]func(d *safepath.Dir, target string) error{
		"RemoveAll": func(d *safepath.Dir, p string) error { return d.RemoveAll(p) },
		"Remove":    func(d *safepath.Dir, p string) error { return d.Remove(p) },
		"Chmod":     func(d *safepath.Dir, p string) error { return d.Chmod(p, 0o777) },
		"Lchown":    func(d *safepath.Dir, p string) error { return d.Lchown(p, 12345, 12345) },
		"ChownTree": func(d *safepath.Dir, p string) error { return d.ChownTree(".", 12345, 12345) },
		"WriteFile": func(d *safepath.Dir, p string) error { return d.WriteFile(p, []byte("planted"), 0o644) },
		"ReadFile": func(d *safepath.Dir, p string) error {
			b, err := d.ReadFile(p, 1<<20)
			if err == nil && strings.Contains(string(b), "outside") {
				return errors.New("read the outside file")
			}
			return err
		},
		"OpenFile": func(d *safepath.Dir, p string) error {
			f, err := d.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			if err == nil {
				f.WriteString("appended")
				f.Close()
			}
			return err
		},
		"MkdirAll": func(d *safepath.Dir, p string) error { return d.MkdirAll(p+".d/sub", 0o755) },
	}
	targets := []string{".git/info/attributes", ".git/objects/info/alternates"}
	links := []string{".git", ".git/info", ".git/objects", ".git/objects/info", ".git/info/attributes", ".git/objects/info/alternates"}
	for name, op := range ops {
		for _, target := range targets {
			for _, link := range links {
				if !strings.HasPrefix(target, link) {
					continue
				}
				t.Run(name+"/"+target+"/link at "+link, func(t *testing.T) {
					root := t.TempDir()
					wt, outside := filepath.Join(root, "wt"), filepath.Join(root, "outside")
					tree(t, wt)
					tree(t, outside)
					if err := os.WriteFile(filepath.Join(outside, target), []byte("outside "+target), 0o600); err != nil {
						t.Fatal(err)
					}
					if err := os.RemoveAll(filepath.Join(wt, link)); err != nil {
						t.Fatal(err)
					}
					if err := os.Symlink(filepath.Join(outside, link), filepath.Join(wt, link)); err != nil {
						t.Fatal(err)
					}
					if err := os.Chmod(outside, 0o700); err != nil {
						t.Fatal(err)
					}
					before := snapshot(t, outside)
					d, err := safepath.Open(wt)
					if err != nil {
						t.Fatal(err)
					}
					defer d.Close()
					err = op(d, target)
					if after := snapshot(t, outside); after != before {
						t.Fatalf("%s(%s) with a link at %s changed the outside tree (err %v):\nbefore\n%s\nafter\n%s", name, target, link, err, before, after)
					}
					// Going through a link is refused as such; only the
					// link itself as the last component may be removed,
					// replaced or chowned.
					last := link == target
					switch {
					case err != nil && !errors.Is(err, safepath.ErrLink) && !last:
						t.Errorf("%s: %v, want ErrLink", name, err)
					case err == nil && !last && name != "ChownTree":
						t.Errorf("%s through a link at %s succeeded", name, link)
					}
				})
			}
		}
	}
}

// Open refuses a link as the folder itself.
func TestOpenRefusesALink(t *testing.T) {
	root := t.TempDir()
	if err := os.Symlink(root, filepath.Join(root, "l")); err != nil {
		t.Fatal(err)
	}
	if _, err := safepath.Open(filepath.Join(root, "l")); !errors.Is(err, safepath.ErrLink) {
		t.Fatalf("Open of a link: %v, want ErrLink", err)
	}
}

// Paths that would leave the folder are refused.
func TestPathsStayInside(t *testing.T) {
	d, err := safepath.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, p := range []string{"../x", "/etc/passwd", "a/../../x", "a//b", ""} {
		if err := d.WriteFile(p, []byte("x"), 0o644); err == nil {
			t.Errorf("WriteFile(%q) succeeded", p)
		}
	}
}

// ChownTree refuses a hard link to a file the new owner does not own (a
// name planted for another file, which a chown would give away), and
// gives everything else, links themselves included.
func TestChownTreeRefusesHardLinks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	root := t.TempDir()
	wt := filepath.Join(root, "wt")
	tree(t, wt)
	secret := filepath.Join(root, "secret")
	if err := os.WriteFile(secret, []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(wt, "sym")); err != nil {
		t.Fatal(err)
	}
	d, err := safepath.Open(wt)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.ChownTree(".", 12345, 12345); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"file", ".git/config", "sym"} {
		fi, _ := os.Lstat(filepath.Join(wt, p))
		if fi.Sys().(*syscall.Stat_t).Uid != 12345 {
			t.Errorf("%s not given", p)
		}
	}
	if fi, _ := os.Stat(secret); fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Error("the link's target was given")
	}
	if err := os.Link(secret, filepath.Join(wt, "hard")); err != nil {
		t.Fatal(err)
	}
	if err := d.ChownTree(".", 12345, 12345); !errors.Is(err, safepath.ErrHardLink) {
		t.Fatalf("ChownTree over a hard link: %v, want ErrHardLink", err)
	}
	if fi, _ := os.Stat(secret); fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Error("the hard link's file was given")
	}
}
